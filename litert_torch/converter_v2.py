"""The official litert-torch's `converter_v2` switch.

There, `use_v2=True` routes conversion through a TensorFlow-based bridge and `converter_v2.is_supported()`
says whether the installed TensorFlow has it. This converter has one path, which needs no TensorFlow and meets
what the official tests ask of both: `is_supported()` is True and `convert(..., use_v2=True)` converts exactly
as `use_v2=False` does, so code written for either path, and tests parameterised over both
(`litert_torch.testing.V1_V2_PARAMETERS`), run unchanged.
"""


def is_supported() -> bool:
    return True
