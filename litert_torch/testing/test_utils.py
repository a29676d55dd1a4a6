"""`V1V2TestCase`: the official litert-torch's base class for tests run on its two converter paths.

This converter has one path, which serves both (`litert_torch.converter_v2.is_supported()` is True): a test
case runs against `litert_torch.convert` unchanged whatever its `use_v2`. The skip stays for a converter
without the second path, as on the official package without TensorFlow.
"""

from __future__ import annotations

from absl.testing import absltest

from litert_torch import converter_v2
from litert_torch.testing.parameterize import V1_V2_PARAMETERS, parameterized_class

__all__ = ["V1_V2_PARAMETERS", "V1V2TestCase", "parameterized_class"]


class V1V2TestCase(absltest.TestCase):
    use_v2 = False

    def setUp(self) -> None:
        super().setUp()
        if self.use_v2 and not converter_v2.is_supported():
            self.skipTest("this litert_torch has no use_v2 converter path")
