"""The official litert-torch's `converter_v2` switch.

There, `use_v2=True` routes conversion through a TensorFlow-based bridge and `converter_v2.is_supported()`
says whether the installed TensorFlow has it. This converter has one path that needs no TensorFlow, so
`is_supported()` is False and `convert(..., use_v2=True)` is refused; tests parameterised over both paths run
the one and skip the other, as they do on the official package without TensorFlow.
"""


def is_supported() -> bool:
    return False
