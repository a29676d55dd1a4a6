"""`V1V2TestCase`: the official litert-torch's base class for tests run on its two converter paths.

This converter has one path (`litert_torch.converter_v2.is_supported()` is False): a test case with
`use_v2 = True` skips, as it does on the official package without TensorFlow; one with `use_v2 = False` runs
against `litert_torch.convert` unchanged.
"""

from __future__ import annotations

from absl.testing import absltest

from litert_torch import converter_v2
from litert_torch.testing.parameterize import V1_V2_PARAMETERS, parameterized_class

__all__ = ["V1_V2_PARAMETERS", "V1V2TestCase", "parameterized_class"]


class V1V2TestCase(absltest.TestCase):
    use_v2 = False

    def setUp(self):
        super().setUp()
        if self.use_v2 and not converter_v2.is_supported():
            self.skipTest("litert_torch has one converter path; use_v2 selects the official's TensorFlow bridge")
