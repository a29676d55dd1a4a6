"""The official litert-torch's API on this package: module functions, convert's keywords, the converted model's
calling convention, PT2E quantization, and the behaviours its users rely on (bench/official_api_tests.py runs the
official package's own test files)."""


import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import InvalidArgumentError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.testing import model_coverage
from tests.helpers import litert_warnings


def _opcodes(edge):
    return [op.opcode for op in read_model(edge.flatbuffer).subgraphs[0].ops]


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def test_module_functions_and_submodules_exist_at_the_official_names():
    for name in ("convert", "signature", "Converter", "load", "to_channel_last_io", "config",
                 "experimental_add_compilation_backend", "Model"):
        assert hasattr(litert_torch, name), name
    assert litert_torch.config.in_oss is True
    assert litert_torch.converter_v2.is_supported() is True
    from litert_torch.quantize import pt2e_quantizer, quant_config  # noqa: F401
    from litert_torch.testing import V1_V2_PARAMETERS, V1V2TestCase, parameterized_class  # noqa: F401
    assert callable(litert_torch.quantize_model)


def test_to_channel_last_io_wraps_and_converts_to_an_nhwc_model():
    model = Conv().eval()
    wrapped = litert_torch.to_channel_last_io(model, args=[0], outputs=[0])
    x = torch.randn(1, 3, 8, 8)
    x_nhwc = x.permute(0, 2, 3, 1)
    torch.testing.assert_close(wrapped(x_nhwc), model(x).permute(0, 2, 3, 1))
    edge = litert_torch.convert(wrapped, (x_nhwc,))
    assert edge.signatures["serving_default"].inputs[0].shape == (1, 8, 8, 3)
    assert model_coverage.compare_tflite_torch(edge, wrapped, (x_nhwc,), atol=1e-4)
    with pytest.raises(ValueError, match="rank 3 or more"):
        litert_torch.to_channel_last_io(model, args=[0])(torch.randn(3, 8))


def test_signature_chain_with_a_default_and_without_one(tmp_path):
    model = Conv().eval()
    small, large = torch.randn(1, 3, 8, 8), torch.randn(1, 3, 16, 16)
    with_default = litert_torch.signature("large", model, (large,)).convert(model, (small,))
    assert set(with_default.signatures) == {"serving_default", "large"}
    assert model_coverage.compare_tflite_torch(with_default, model, (small,), atol=1e-4)
    assert model_coverage.compare_tflite_torch(with_default, model, (large,), signature_name="large", atol=1e-4)
    none = litert_torch.Converter().signature("a", model, (small,)).add_signature("b", model, (large,)).convert()
    with pytest.raises(ValueError, match="no default signature"):
        none(small)
    path = tmp_path / "two.tflite"
    none.export(path)
    loaded = litert_torch.load(path)
    np.testing.assert_allclose(loaded(large, signature_name="b"), model(large).detach().numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="given twice"):
        litert_torch.signature("a", model, (small,)).signature("a", model, (small,))
    with pytest.raises(ValueError, match="needs sample_args"):
        litert_torch.signature("a", model)


def test_official_keywords_have_their_effects_and_pipeline_options_are_refused(tmp_path):
    model = Conv().eval()
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "sub" / "m.tflite"
    edge = litert_torch.convert(model, (x,), strict_export="auto", lightweight_conversion=True,
                                runtime_constant_folding=True, use_v2=False, output_file_path=str(path))
    assert path.read_bytes() == edge.model_content()
    # strict mode traces with TorchDynamo, which a process that has imported torchax (the cloud validation
    # backend, used by other tests) can no longer do: checked in a fresh process
    import subprocess
    import sys

    strict = ("import torch, litert_torch\n"
              "from litert_torch.testing import model_coverage\n"
              "torch.manual_seed(0)\n"
              "m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()\n"
              "x = torch.randn(1, 3, 8, 8)\n"
              "assert model_coverage.compare_tflite_torch(litert_torch.convert(m, (x,), strict_export=True), m, (x,),"
              " atol=1e-4)\n")
    done = subprocess.run([sys.executable, "-c", strict], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # one path serves both: use_v2=True converts as use_v2=False does
    assert litert_torch.convert(model, (x,), use_v2=True).model_content() == \
        litert_torch.convert(model, (x,), use_v2=False).model_content()
    with pytest.raises(InvalidArgumentError, match="use_v2 must be True or False"):
        litert_torch.convert(model, (x,), use_v2="yes")
    with pytest.raises(InvalidArgumentError, match="print_ir_before= configures the official"):
        litert_torch.convert(model, (x,), print_ir_before="foo")
    with pytest.raises(InvalidArgumentError, match="unexpected keyword argument.*no_such_option"):
        litert_torch.convert(model, (x,), no_such_option=1)
    with pytest.raises(InvalidArgumentError, match="strict_export"):
        litert_torch.convert(model, (x,), strict_export="sometimes")


class Ids(nn.Module):
    def forward(self, ids):
        return ids + 1


def test_int64_io_is_int32_with_a_warning_or_int64_with_enable_x64():
    ids = torch.randint(0, 100, (1, 8))
    with litert_warnings() as records:
        narrow = litert_torch.convert(Ids(), (ids,))
    warning = " ".join(r.getMessage() for r in records if "downcasts 64-bit" in r.getMessage())
    assert "input 'args_0' (torch.int64)" in warning and "output 'output_0' (torch.int64)" in warning
    assert narrow.signatures["serving_default"].inputs[0].dtype == np.int32
    wide = litert_torch.convert(Ids(), (ids,), enable_x64=True)
    sig = wide.signatures["serving_default"]
    assert sig.inputs[0].dtype == np.int64 and sig.outputs[0].dtype == np.int64
    out = wide(ids.numpy())
    assert out.dtype == np.int64 and np.array_equal(out, (ids + 1).numpy())


def test_int64_sentinels_keep_their_meaning():
    class FirstAndLast(nn.Module):
        def forward(self, mask):
            positions = torch.arange(mask.shape[0])
            first = torch.where(mask, positions, torch.iinfo(torch.int64).max).min()
            last = positions.masked_fill(~mask, torch.iinfo(torch.int64).min).argmax()
            return first, last

    mask = torch.tensor([False, True, True, False, True, False])
    edge = litert_torch.convert(FirstAndLast(), (mask,))
    for m in (mask, torch.tensor([True, False, False, False, False, True])):
        got = edge(m)
        want = FirstAndLast()(m)
        assert [int(g) for g in got] == [int(w) for w in want]


def test_bfloat16_inputs_and_outputs_stay_bfloat16_in_the_signature():
    class Affine(nn.Module):
        def forward(self, x):
            return (x + 1) * 1.2

    x = torch.randn(10, 10).to(torch.bfloat16)
    edge = litert_torch.convert(Affine(), (x,))
    sig = edge.signatures["serving_default"]
    assert sig.inputs[0].dtype.name == "bfloat16" and sig.outputs[0].dtype.name == "bfloat16"
    got = edge.call_like_module(x)
    assert got.dtype == torch.bfloat16
    # computed in float32 between the casts: within one bfloat16 rounding of float32 arithmetic on the inputs
    exact = (x.float() + 1) * 1.2
    torch.testing.assert_close(got.float(), exact, rtol=2**-8, atol=0)


def test_a_model_writing_to_its_input_converts():
    class Scale(nn.Module):
        def forward(self, x):
            x /= 2
            return x + 10

    x = torch.randn(4, 4)
    with litert_warnings() as records:
        edge = litert_torch.convert(Scale(), (x.clone(),))
    assert any("writes to its input" in r.getMessage() for r in records)
    np.testing.assert_allclose(edge(x.clone()), (x / 2 + 10).numpy(), rtol=1e-6)
    with pytest.raises(litert_torch.ConversionError, match="buffer mutation"):
        class Counter(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("n", torch.zeros(1))

            def forward(self, x):
                self.n.add_(1)
                return x * self.n

        litert_torch.convert(Counter(), (x,))


@pytest.mark.parametrize("dims, groups, dilation, stride, padding", [
    (2, 2, 1, 2, 0), (2, 4, 1, 1, 1), (2, 1, 2, 1, 0), (2, 2, 2, 2, 1), (1, 3, 2, 2, 1), (1, 1, 3, 1, 0),
])
def test_grouped_and_dilated_transposed_convolution(dims, groups, dilation, stride, padding):
    cls = nn.ConvTranspose2d if dims == 2 else nn.ConvTranspose1d
    channels = 12 if groups == 3 else 8
    model = cls(channels, 2 * channels, 3, stride=stride, padding=padding, dilation=dilation, groups=groups).eval()
    x = torch.randn(1, channels, *([7] * dims))
    edge = litert_torch.convert(model, (x,))
    assert model_coverage.compare_tflite_torch(edge, model, (x,), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pad, mirror", [([1, 1, 1, 1], 1), ([1, 0, 0, 1], 1), ([2, 1, 1, 2], 0)])
def test_replicate_padding_by_one_is_one_mirror_pad(pad, mirror):
    class Pad(nn.Module):
        def forward(self, x):
            return nn.functional.pad(x, pad, mode="replicate")

    x = torch.randn(1, 3, 5, 6)
    edge = litert_torch.convert(Pad(), (x,))
    assert _opcodes(edge).count("MIRROR_PAD") == mirror
    np.testing.assert_array_equal(edge(x), Pad()(x).numpy())


def _pt2e(model, args, config):
    from torchao.quantization.pt2e import quantize_pt2e

    from litert_torch.quantize import pt2e_quantizer

    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(config)
    m = quantize_pt2e.prepare_pt2e(torch.export.export(model, args).module(), quantizer)
    for _ in range(4):
        m(torch.randn_like(args[0]))
    return quantize_pt2e.convert_pt2e(m, fold_quantize=False), quantizer


@pytest.mark.parametrize("per_channel", [False, True])
def test_pt2e_static_quantization_keeps_int8_weights_and_the_modules_numerics(per_channel):
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 4)).eval()
    x = torch.randn(1, 3, 12, 12)
    quantized, quantizer = _pt2e(model, (x,), pt2e_quantizer.get_symmetric_quantization_config(per_channel))
    edge = litert_torch.convert(quantized, (x,), quant_config=QuantConfig(pt2e_quantizer=quantizer))
    graph = read_model(edge.flatbuffer).subgraphs[0]
    weights = [t for t in graph.tensors() if t.is_constant and t.dtype == np.int8]
    assert len(weights) == 3  # both conv filters and the linear weight, stored as int8
    assert all((len(t.quantization.scale) > 1) == per_channel for t in weights)
    # integer kernels throughout: one QUANTIZE at the input, one DEQUANTIZE at the output
    assert _opcodes(edge).count("QUANTIZE") == 1 and _opcodes(edge).count("DEQUANTIZE") == 1
    for op in graph.ops:
        if op.opcode in ("CONV_2D", "FULLY_CONNECTED", "MEAN"):
            assert op.inputs[0].dtype == np.int8 and op.outputs[0].dtype == np.int8, op
    for _ in range(3):
        sample = torch.randn(1, 3, 12, 12)
        want = quantized(sample).detach().numpy()
        step = float(np.abs(want).max()) / 64  # a few int8 steps of the output's range
        np.testing.assert_allclose(edge(sample), want, atol=step)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.a, self.b = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 1, stride=2)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.b(torch.relu(self.a(x))) + x)
        return self.head(self.down(x).mean((2, 3)))


def test_pt2e_residual_network_runs_on_integer_kernels_within_a_few_steps():
    from litert_torch.quantize import pt2e_quantizer

    torch.manual_seed(1)
    x = torch.randn(1, 3, 32, 32)
    quantized, _ = _pt2e(Residual().eval(), (x,), pt2e_quantizer.get_symmetric_quantization_config(True))
    edge = litert_torch.convert(quantized, (x,))
    ops = _opcodes(edge)
    assert ops.count("QUANTIZE") == 1 and ops.count("DEQUANTIZE") == 1, ops
    graph = read_model(edge.flatbuffer).subgraphs[0]
    step = next(op.inputs[0].quantization.scale[0] for op in graph.ops if op.opcode == "DEQUANTIZE")
    for _ in range(3):
        sample = torch.randn(1, 3, 32, 32)
        err = np.abs(edge(sample) - quantized(sample).detach().numpy()).max()
        assert err <= 4 * step, (err, step)


def test_pt2e_dynamic_config_quantizes_the_weights_of_the_converted_model():
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    x = torch.randn(2, 64)
    config = pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    prepared, quantizer = _pt2e(model, (x,), config)
    qc = QuantConfig(pt2e_quantizer=quantizer)
    assert qc.is_dynamic
    edge = litert_torch.convert(prepared, (x,), quant_config=qc)
    assert edge.quantization is not None and edge.quantization.mode == "dynamic-int8"
    np.testing.assert_allclose(edge(x), model(x).detach().numpy(), atol=0.05)
    with pytest.raises(InvalidArgumentError, match="QuantConfig"):
        litert_torch.convert(model, (x,), quant_config="int8")


def test_compiled_runtime_and_interpreter_give_the_same_outputs():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(2, 16)
    edge = litert_torch.convert(model, (x,))
    interpreted = edge(x)
    assert edge.use_compiled_runtime() is edge
    np.testing.assert_allclose(edge(x), interpreted, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="dtype"):
        edge(np.zeros((2, 16), np.float64))
    np.testing.assert_array_equal(edge.use_interpreter_runtime()(x), interpreted)


def test_compilation_backend_returns_the_aot_result():
    from ai_edge_litert.aot.vendors import fallback_backend

    result = litert_torch.experimental_add_compilation_backend(fallback_backend.FallbackTarget()).convert(
        Conv().eval(), (torch.randn(1, 3, 8, 8),))
    assert result.models_with_backend[0][0].id() == fallback_backend.FallbackBackend.id()


def test_compare_tflite_torch_detects_a_mismatch_and_testing_parameterizes():
    model = Conv().eval()
    x = torch.randn(1, 3, 8, 8)
    edge = litert_torch.convert(model, (x,))
    assert model_coverage.compare_tflite_torch(edge, model, lambda: (torch.randn(1, 3, 8, 8),), num_valid_inputs=3,
                                               atol=1e-4)
    assert not model_coverage.compare_tflite_torch(edge, lambda t: model(t) + 1e-2, (x,))
    from litert_torch.testing import parameterized_class

    @parameterized_class([{"k": 1}, {"k": 2}])
    class Case:
        def test_k(self):
            return self.k

    made = [globals().pop(f"Case_{i}") for i in range(2)]
    assert [c().test_k() for c in made] == [1, 2] and not hasattr(Case, "test_k")
