"""Delegate-aware rewrites: each keeps the numerics, moves the ops it targets onto the delegate, and is recorded
(with the residency before it) in the plan that travels in the file."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import EdgeModel
from litert_torch.passes.delegate_rewrites import reduced_transpose
from tests.helpers import assert_matches, op_counts, runtime_partitions


class ChannelShuffle(nn.Module):
    def __init__(self, groups=2):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 1)
        self.groups = groups

    def forward(self, x):
        x = self.conv(x)
        n, c, h, w = x.shape
        x = x.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)
        return torch.relu(x)


class GroupNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        return self.norm(self.conv(x))


class LSTMNet(nn.Module):
    def __init__(self, layers=1, bidirectional=False, batch_first=True, use_hidden=False):
        super().__init__()
        self.rnn = nn.LSTM(6, 5, layers, batch_first=batch_first, bidirectional=bidirectional)
        self.use_hidden = use_hidden

    def forward(self, x):
        y, (h, _) = self.rnn(x)
        return (y, h) if self.use_hidden else y


@pytest.mark.parametrize("shape, perm, small_shape, small_perm", [
    ((1, 7, 7, 2, 58), [0, 1, 2, 4, 3], [49, 2, 58], [0, 2, 1]),
    ((2, 3, 4, 5, 6), [0, 3, 4, 1, 2], [2, 12, 30], [0, 2, 1]),
    ((2, 1, 4, 1, 6), [4, 3, 2, 1, 0], [2, 4, 6], [2, 1, 0]),
    ((2, 3, 4, 5, 6), [4, 2, 0, 3, 1], [2, 3, 4, 5, 6], [4, 2, 0, 3, 1]),
])
def test_reduced_transpose_is_the_same_permutation(shape, perm, small_shape, small_perm):
    got_shape, got_perm = reduced_transpose(shape, perm)
    assert (got_shape, got_perm) == (small_shape, small_perm)
    x = np.arange(np.prod(shape)).reshape(shape)
    expected = x.transpose(perm)
    assert np.array_equal(x.reshape(got_shape).transpose(got_perm).reshape(expected.shape), expected)


def _rank5_ops(edge):
    from litert_torch.flatbuffer.reader import read_model
    graph = read_model(edge.flatbuffer).subgraphs[0]
    return [op.opcode for op in graph.ops if any(t.rank > 4 for t in (*op.inputs, *op.outputs) if t is not None)]


def test_channel_shuffle_becomes_gpu_resident():
    torch.manual_seed(0)
    model, x = ChannelShuffle().eval(), torch.randn(1, 8, 5, 5)
    gpu_model = litert_torch.convert(model, (x,), target="gpu")
    plan = gpu_model.delegate_plan.targets["gpu"]
    assert plan.fully_delegated and plan.mac_share == 1.0
    assert plan.rewrites == {"rank_reduce_transposes": 1}
    assert plan.before["delegated_ops"] < plan.before["ops"]
    assert _rank5_ops(gpu_model) == []
    assert_matches(model(x), gpu_model(x))
    # For the CPU alone nothing is rewritten: XNNPACK takes the rank-5 form.
    cpu_model = litert_torch.convert(model, (x,), target="cpu")
    assert _rank5_ops(cpu_model) and cpu_model.delegate_plan.targets["cpu"].before is None


def test_group_norm_broadcasts_with_mul():
    torch.manual_seed(0)
    model, x = GroupNormNet().eval(), torch.randn(2, 4, 10)
    edge = litert_torch.convert(model, (x,))
    assert "BROADCAST_TO" not in op_counts(edge)
    for plan in edge.delegate_plan.targets.values():
        assert plan.fully_delegated, plan.summary()
        assert plan.rewrites == {"broadcast_to_mul": 2}  # the mean and the variance
    assert_matches(model(x), edge(x))


@pytest.mark.parametrize("kwargs", [
    {},
    {"layers": 2, "use_hidden": True},
    {"bidirectional": True},
    {"bidirectional": True, "use_hidden": True},
    {"batch_first": False, "bidirectional": True, "layers": 2},
], ids=["plain", "2layer-hn", "bidir", "bidir-hn", "time-major-bidir-2layer"])
def test_unrolled_lstm_matches_and_leaves_no_cpu_ops(kwargs):
    torch.manual_seed(0)
    model = LSTMNet(**kwargs).eval()
    x = torch.randn(2, 7, 6) if kwargs.get("batch_first", True) else torch.randn(7, 2, 6)
    edge = litert_torch.convert(model, (x,), target=("gpu", "npu"))
    counts = op_counts(edge)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in counts and "REVERSE_V2" not in counts
    for plan in edge.delegate_plan.targets.values():
        assert plan.fully_delegated, plan.summary()
        assert plan.rewrites["unroll_lstm"] == kwargs.get("layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    assert_matches(model(x), edge(x))
    other = torch.randn_like(x)
    assert_matches(model(other), edge(other))


def test_cpu_target_keeps_the_fused_lstm():
    model, x = LSTMNet().eval(), torch.randn(1, 4, 6)
    edge = litert_torch.convert(model, (x,), target="cpu")
    assert op_counts(edge).get("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1


def test_cube_is_multiplication():
    class Cube(nn.Module):
        def forward(self, x):
            return torch.pow(x, 3) + 1

    x = torch.randn(3, 4)
    edge = litert_torch.convert(Cube(), (x,))
    assert "POW" not in op_counts(edge)
    assert_matches(Cube()(x), edge(x))


def test_before_and_rewrites_survive_the_file(tmp_path):
    model, x = ChannelShuffle().eval(), torch.randn(1, 8, 5, 5)
    edge = litert_torch.convert(model, (x,), target=("cpu", "gpu"))
    path = tmp_path / "shuffle.tflite"
    edge.export(path)
    loaded = EdgeModel.load(path).delegate_plan.targets
    assert loaded["gpu"].before == edge.delegate_plan.targets["gpu"].before
    assert loaded["gpu"].rewrites == {"rank_reduce_transposes": 1}
    assert "before delegate-aware lowering" in loaded["gpu"].summary()
    assert loaded["cpu"].before is None


def test_unknown_target_is_refused_before_export():
    with pytest.raises(ValueError, match="unknown target"):
        litert_torch.convert(nn.ReLU(), (torch.randn(2),), target="tpu")


@pytest.mark.parametrize("index, opcode", [
    ([1, 3, 5], "STRIDED_SLICE"),
    ([2, 3, 4, 5], "SLICE"),
    ([[0, 1], [2, 3]], "SLICE"),
    (4, "SLICE"),
    ([-3, -2], "SLICE"),
], ids=["strided", "range", "2d-range", "scalar", "negative"])
def test_evenly_spaced_gather_is_a_slice(index, opcode):
    class Pick(nn.Module):
        def forward(self, x):
            return x[:, torch.tensor(index)] * 2

    x = torch.randn(2, 8, 3)
    edge = litert_torch.convert(Pick(), (x,))
    counts = op_counts(edge)
    assert "GATHER" not in counts and counts.get(opcode) == 1, counts
    plans = edge.delegate_plan.targets
    # XNNPACK slices with unit strides only; the GPU and NPU take the strided slice too.
    for target in ("gpu", "npu") if opcode == "STRIDED_SLICE" else ("cpu", "gpu", "npu"):
        assert plans[target].fully_delegated, plans[target].summary()
    assert_matches(Pick()(x), edge(x))


def test_unevenly_spaced_gather_stays():
    class Pick(nn.Module):
        def forward(self, x):
            return x[:, torch.tensor([0, 1, 5])]

    x = torch.randn(2, 8)
    edge = litert_torch.convert(Pick(), (x,))
    assert op_counts(edge).get("GATHER") == 1
    assert_matches(Pick()(x), edge(x))


class MaskedScores(nn.Module):
    """Attention-style scores with a constant mask filled with `fill`, read by softmax or not."""

    def __init__(self, fill, softmax=True, causal=True):
        super().__init__()
        mask = torch.tril(torch.ones(6, 6, dtype=torch.bool)) if causal else torch.ones(6, 6, dtype=torch.bool)
        self.register_buffer("mask", mask)
        self.fill, self.softmax = fill, softmax

    def forward(self, q, k):
        scores = (q @ k.transpose(-1, -2)).masked_fill(~self.mask, self.fill)
        return scores.softmax(-1) if self.softmax else scores * 2


@pytest.mark.parametrize("fill, softmax, causal, expect", [
    (float("-inf"), False, True, "MINIMUM"),
    (float("inf"), False, True, "MAXIMUM"),
    (torch.finfo(torch.float32).min, True, True, "MINIMUM"),
    (torch.finfo(torch.float32).min, False, True, "SELECT_V2"),  # -inf scores would differ: not rewritten
    (float("-inf"), True, False, None),  # a mask keeping everything: no op at all
], ids=["-inf", "+inf", "lowest-softmax", "lowest-other-reader", "keep-all"])
def test_constant_mask_select_becomes_a_bound(fill, softmax, causal, expect):
    torch.manual_seed(0)
    model = MaskedScores(fill, softmax, causal).eval()
    q, k = torch.randn(2, 6, 4), torch.randn(2, 6, 4)
    edge = litert_torch.convert(model, (q, k))
    counts = op_counts(edge)
    others = {"MINIMUM", "MAXIMUM", "SELECT_V2"} - {expect}
    assert (expect is None or counts.get(expect) == 1) and not others & set(counts), counts
    if expect != "SELECT_V2":
        assert runtime_partitions(edge.flatbuffer) == 1 and edge.delegate_plan.targets["cpu"].fully_delegated
    # The masked places hold the fill itself (infinite without a softmax): compared as values, infinities too.
    np.testing.assert_allclose(edge(q, k), model(q, k).numpy(), rtol=1e-5, atol=1e-6)


def test_causal_sdpa_is_one_xnnpack_partition():
    class Causal(nn.Module):
        def forward(self, q, k, v):
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    edge = litert_torch.convert(Causal(), (q, k, v))
    assert "SELECT_V2" not in op_counts(edge) and runtime_partitions(edge.flatbuffer) == 1
    assert_matches(Causal()(q, k, v), edge(q, k, v))


@pytest.mark.parametrize("size, mode, expect", [
    ((16, 16), "nearest", "DEPTH_TO_SPACE"),
    ((24, 24), "nearest-exact", "DEPTH_TO_SPACE"),
    ((16, 24), "nearest", "RESIZE_NEAREST_NEIGHBOR"),  # unequal factors
    ((12, 12), "nearest", "RESIZE_NEAREST_NEIGHBOR"),  # not an integer factor
])
def test_integer_nearest_upsampling_is_depth_to_space(size, mode, expect):
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x):
            return self.conv(nn.functional.interpolate(self.conv(x), size=size, mode=mode))

    torch.manual_seed(0)
    model, x = Up().eval(), torch.randn(1, 3, 8, 8)
    edge = litert_torch.convert(model, (x,))
    counts = op_counts(edge)
    assert counts.get(expect) == 1, counts
    assert runtime_partitions(edge.flatbuffer) == (1 if expect == "DEPTH_TO_SPACE" else 2)
    assert_matches(model(x), edge(x))


def test_wide_splits_and_concats_stay_on_xnnpack():
    class Wide(nn.Module):
        def forward(self, x):
            parts = torch.split(x, 2, dim=1)  # 8 equal parts
            uneven = torch.split(x, [5, 11], dim=1)  # SPLIT_V
            odd = torch.split(x[:, :14], 2, dim=1)  # 7 equal parts: a prime count
            return torch.cat([p * (i + 1) for i, p in enumerate(parts)] + [uneven[0] - 1] + list(odd), dim=1)

    x = torch.randn(2, 16, 3)
    edge = litert_torch.convert(Wide(), (x,))
    counts = op_counts(edge)
    assert "SPLIT_V" not in counts and edge.delegate_plan.targets["cpu"].rewrites["narrow_splits_and_concats"] >= 4
    assert runtime_partitions(edge.flatbuffer) == 1 and edge.delegate_plan.targets["cpu"].fully_delegated
    assert_matches(Wide()(x), edge(x))


def _ops_of(edge):
    from litert_torch.flatbuffer.reader import read_model
    return read_model(edge.flatbuffer).subgraphs[0].ops


def test_same_transpose_conv_becomes_valid_and_a_crop_for_the_gpu():
    torch.manual_seed(0)
    model, x = nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2).eval(), torch.randn(1, 16, 50)
    edge = litert_torch.convert(model, (x,), target="gpu")
    conv = next(op for op in _ops_of(edge) if op.opcode == "TRANSPOSE_CONV")
    assert conv.options["padding"] == "VALID" and conv.outputs[0].shape[2] == (50 - 1) * 4 + 8
    assert op_counts(edge).get("SLICE") == 1
    assert edge.delegate_plan.targets["gpu"].rewrites == {"valid_transpose_conv": 1}
    assert_matches(model(x), edge(x))
    cpu_only = litert_torch.convert(model, (x,), target="cpu")  # XNNPACK keeps the SAME form
    assert [op.options.get("padding") for op in _ops_of(cpu_only) if op.opcode == "TRANSPOSE_CONV"] == ["SAME"]


def test_fully_connected_wider_than_the_gpu_texture_is_split_for_the_gpu():
    from litert_torch.passes.delegate_rewrites import GPU_MAX_OUTPUTS

    torch.manual_seed(0)
    model, x = nn.Linear(32, GPU_MAX_OUTPUTS + 100).eval(), torch.randn(1, 64, 32)
    edge = litert_torch.convert(model, (x,), target="gpu")
    fcs = [op for op in _ops_of(edge) if op.opcode == "FULLY_CONNECTED"]
    assert len(fcs) == 2 and all(op.inputs[1].shape[0] <= GPU_MAX_OUTPUTS for op in fcs)
    assert sum(op.inputs[1].shape[0] for op in fcs) == GPU_MAX_OUTPUTS + 100
    assert op_counts(edge).get("CONCATENATION") == 1
    assert_matches(model(x), edge(x))
