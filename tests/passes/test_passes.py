"""Each pass on small graphs: the structure it promises afterwards, with numerics unchanged."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import litert_torch
from litert_torch import EdgeModel, ir
from litert_torch.flatbuffer.reader import read_model
from litert_torch.flatbuffer.writer import serialize
from litert_torch.passes import cleanup, fold_constants, fuse_activation, layout
from tests.helpers import assert_matches, op_counts


def const(name, value):
    value = np.asarray(value)
    return ir.Tensor(name, value.shape, value.dtype, value)


def run_graph(graph: ir.Graph, *inputs):
    model = ir.Model([graph], [ir.Signature("serving_default", 0, [t.name for t in graph.inputs],
                                            [f"out{i}" for i in range(len(graph.outputs))])])
    return EdgeModel(serialize(model))(*inputs)


def check_pass(build, pass_fn, inputs):
    """Run `pass_fn` on a fresh graph from `build` and compare outputs with the untouched graph's."""
    before = run_graph(build(), *inputs)
    graph = build()
    assert pass_fn(graph)
    after = run_graph(graph, *inputs)
    assert_matches(before, after)
    return graph


def transpose(x, perm, name):
    out = ir.Tensor(name, [x.shape[p] for p in perm], x.dtype)
    return ir.Op("TRANSPOSE", [x, const(name + "/perm", np.array(perm, np.int32))], [out]), out


def test_layout_sinks_through_elementwise_and_cancels():
    def build():
        x = ir.Tensor("x", [1, 4, 5, 3], np.float32)
        t1, a = transpose(x, [0, 3, 1, 2], "a")
        b = ir.Tensor("b", a.shape, np.float32)
        relu = ir.Op("RELU", [a], [b])
        c = ir.Tensor("c", a.shape, np.float32)
        add = ir.Op("ADD", [b, const("bias", np.arange(3, dtype=np.float32).reshape(3, 1, 1))], [c])
        t2, d = transpose(c, [0, 2, 3, 1], "d")
        return ir.Graph("main", [x], [d], [t1, relu, add, t2])

    graph = check_pass(build, lambda g: layout.run(g) | cleanup.run(g), (np.random.randn(1, 4, 5, 3).astype(np.float32),))
    assert [op.opcode for op in graph.ops] == ["RELU", "ADD"]


def test_layout_keeps_a_single_transpose_for_a_channel_shuffle():
    class Shuffle(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.a(x)
            n, c, h, w = y.shape
            y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
            return self.b(y)

    model = Shuffle().eval()
    x = torch.randn(1, 8, 6, 6)
    edge = litert_torch.convert(model, (x,), channel_last_io=True)
    assert op_counts(edge).get("TRANSPOSE", 0) == 1
    assert_matches(model(x), edge.call_like_module(x.permute(0, 2, 3, 1).contiguous()).permute(0, 3, 1, 2))


def test_cleanup_collapses_reshapes_and_drops_noops():
    def build():
        x = ir.Tensor("x", [2, 6], np.float32)
        a = ir.Tensor("a", [3, 4], np.float32)
        b = ir.Tensor("b", [12], np.float32)
        c = ir.Tensor("c", [12], np.float32)
        d = ir.Tensor("d", [12], np.float32)
        return ir.Graph("main", [x], [d], [
            ir.Op("RESHAPE", [x, const("s1", np.array([3, 4], np.int32))], [a], {"new_shape": [3, 4]}),
            ir.Op("RESHAPE", [a, const("s2", np.array([12], np.int32))], [b], {"new_shape": [12]}),
            ir.Op("CAST", [b], [c]),
            ir.Op("RELU", [c], [d]),
        ])

    graph = check_pass(build, cleanup.run, (np.random.randn(2, 6).astype(np.float32),))
    assert [op.opcode for op in graph.ops] == ["RESHAPE", "RELU"]


def test_fold_constants_evaluates_constant_only_ops():
    def build():
        x = ir.Tensor("x", [3, 2], np.float32)
        t, w = transpose(const("w", np.arange(6, dtype=np.float32).reshape(2, 3)), [1, 0], "wt")
        y = ir.Tensor("y", [3, 2], np.float32)
        return ir.Graph("main", [x], [y], [t, ir.Op("ADD", [x, w], [y])])

    graph = check_pass(build, fold_constants.run, (np.random.randn(3, 2).astype(np.float32),))
    assert [op.opcode for op in graph.ops] == ["ADD"]


def test_fuse_activation_only_where_the_activation_is_the_only_reader():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU6()).eval()
    x = torch.randn(1, 3, 8, 8)
    edge = litert_torch.convert(model, (x,))
    assert op_counts(edge).get("RELU6", 0) == 0
    conv = next(op for op in read_model(edge.flatbuffer).subgraphs[0].ops if op.opcode == "CONV_2D")
    assert conv.options["fused_activation_function"] == "RELU6"

    class TwoReaders(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            return torch.relu(y), y * 2

    model = TwoReaders().eval()
    edge = litert_torch.convert(model, (x,))
    assert op_counts(edge).get("RELU", 0) == 1
    assert_matches(model(x), edge(x))


def test_fuse_activation_pass_directly():
    def build():
        x = ir.Tensor("x", [4], np.float32)
        a = ir.Tensor("a", [4], np.float32)
        b = ir.Tensor("b", [4], np.float32)
        return ir.Graph("main", [x], [b], [ir.Op("ADD", [x, const("one", np.float32(1.0))], [a],
                                                 {"fused_activation_function": "NONE"}),
                                           ir.Op("RELU", [a], [b])])

    graph = check_pass(build, fuse_activation.run, (np.random.randn(4).astype(np.float32),))
    assert [op.opcode for op in graph.ops] == ["ADD"]


def test_fold_padding_turns_explicit_pad_into_same():
    class PadConv(nn.Module):
        def __init__(self, pad):
            super().__init__()
            self.pad = pad
            self.stem = nn.Conv2d(3, 3, 1)
            self.conv = nn.Conv2d(3, 4, 3)
            self.pool = nn.MaxPool2d(3, 1)

        def forward(self, x):
            y = self.conv(F.pad(self.stem(x), self.pad))
            return self.pool(F.pad(y, self.pad, value=float("-inf")))

    x = torch.randn(1, 3, 9, 9)
    same = PadConv((1, 1, 1, 1)).eval()
    edge = litert_torch.convert(same, (x,))
    counts = op_counts(edge)
    assert counts.get("PAD", 0) == 0 and counts.get("PADV2", 0) == 0, counts
    assert_matches(same(x), edge(x))
    lopsided = PadConv((2, 0, 2, 0)).eval()
    edge = litert_torch.convert(lopsided, (x,))
    assert op_counts(edge).get("PAD", 0) == 1
    assert_matches(lopsided(x), edge(x))


def test_identical_constants_share_one_buffer():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)
            self.b.load_state_dict(self.a.state_dict())

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    x = torch.randn(2, 64)
    edge = litert_torch.convert(Twice().eval(), (x,))
    single = litert_torch.convert(nn.Linear(64, 64).eval(), (x,))
    weight_bytes = 64 * 64 * 4
    assert len(edge.flatbuffer) < len(single.flatbuffer) + weight_bytes // 4


def test_folding_never_copies_shared_weights():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 64)
            self.norm = nn.LayerNorm(64)
            with torch.no_grad():
                self.norm.weight.normal_()
                self.norm.bias.normal_()

        def forward(self, ids):
            return nn.functional.linear(self.norm(self.emb(ids)), self.emb.weight)

    model = Tied().eval()
    ids = torch.randint(0, 1000, (1, 8))
    edge = litert_torch.convert(model, (ids,))
    table_bytes = 1000 * 64 * 4
    assert len(edge.flatbuffer) < 1.5 * table_bytes
    assert_matches(model(ids), edge(ids))


def test_max_pool_padding_after_relu_is_a_plain_pad():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)).eval()
    x = torch.randn(1, 3, 18, 18)  # 16x16 into the pool: PyTorch pads 1 before, SAME would pad 0
    edge = litert_torch.convert(model, (x,))
    counts = op_counts(edge)
    assert counts.get("PADV2", 0) == 0 and counts.get("PAD", 0) == 1, counts
    assert_matches(model(x), edge(x))
    signed = nn.Sequential(nn.Conv2d(3, 8, 3), nn.MaxPool2d(3, 2, 1)).eval()  # no ReLU: -inf stays
    assert op_counts(litert_torch.convert(signed, (x,))).get("PADV2", 0) == 1


def test_matmul_takes_operand_transposes_as_adjoint_flags():
    from litert_torch.passes import matmul

    def build():
        q = ir.Tensor("a_q", [1, 2, 3, 8], np.float32)  # inputs are fed in the order of their names
        k = ir.Tensor("b_k", [1, 2, 5, 8], np.float32)
        t1, kt = transpose(k, [0, 1, 3, 2], "kt")
        scores = ir.Tensor("scores", [1, 2, 3, 5], np.float32)
        bmm = ir.Op("BATCH_MATMUL", [q, kt], [scores], {"adj_x": False, "adj_y": False})
        t2, st = transpose(scores, [0, 1, 3, 2], "st")  # also read as a graph output: the transpose stays
        back = ir.Tensor("back", [1, 2, 5, 5], np.float32)
        bmm2 = ir.Op("BATCH_MATMUL", [st, scores], [back], {"adj_x": False, "adj_y": False})
        return ir.Graph("main", [q, k], [back, st], [t1, bmm, t2, bmm2])

    inputs = (np.random.randn(1, 2, 3, 8).astype(np.float32), np.random.randn(1, 2, 5, 8).astype(np.float32))
    graph = check_pass(build, lambda g: matmul.run(g) | cleanup.run(g), inputs)
    bmms = [op for op in graph.ops if op.opcode == "BATCH_MATMUL"]
    assert [(op.options["adj_x"], op.options["adj_y"]) for op in bmms] == [(False, True), (True, False)]
    assert graph.op_counts()["TRANSPOSE"] == 1  # the key transpose is gone; the one feeding an output stays


def test_product_with_transposed_stored_weights_reads_them_as_stored():
    """`x @ w.transpose(-1, -2)` of a constant [E, out, in] weight is one BATCH_MATMUL reading the weight as
    stored, with adj_y: no transposed copy of it in the model; the numbers are PyTorch's."""
    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 6, 8))  # [experts, out, in]

        def forward(self, x, y):
            return torch.bmm(x, self.w.transpose(1, 2)) + torch.matmul(y, self.w.mT)

    model, x, y = Experts().eval(), torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    edge = litert_torch.convert(model, (x, y))
    assert_matches(model(x, y), edge(x, y))
    graph = read_model(edge.flatbuffer).subgraphs[0]
    bmms = [op for op in graph.ops if op.opcode == "BATCH_MATMUL"]
    assert len(bmms) == 2 and all(op.options["adj_y"] for op in bmms)
    assert all(list(op.inputs[1].shape) == [4, 6, 8] for op in bmms)
    np.testing.assert_array_equal(bmms[0].inputs[1].data, model.w.detach().numpy())
    assert not any(t.is_constant and list(t.shape) == [4, 8, 6] for op in graph.ops for t in op.inputs if t)


def test_attention_over_a_runtime_cache_has_no_transpose():
    class Scores(nn.Module):
        def forward(self, q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2), -1) @ v.transpose(-1, -2)

    # A few query rows against a long cache (decode), and as many rows as cached keys (prefill): the products
    # read the caches in place, as right-hand operands with adj_y (the layout LiteRT-LM's runtime is fastest
    # with; reading the cache as the left-hand operand and transposing the few-row result back was measured
    # slower there).
    for rows, cached in ((3, 16), (3, 256), (64, 64)):
        args = (torch.randn(1, 2, rows, 8), torch.randn(1, 2, cached, 8), torch.randn(1, 2, 8, cached))
        edge = litert_torch.convert(Scores().eval(), args)
        assert_matches(Scores()(*args), edge(*args))
        assert "TRANSPOSE" not in op_counts(edge)
        bmms = [op for op in read_model(edge.flatbuffer).subgraphs[0].ops if op.opcode == "BATCH_MATMUL"]
        assert [list(op.inputs[1].shape) for op in bmms] == [[1, 2, cached, 8], [1, 2, 8, cached]]
        assert all(op.options["adj_y"] and not op.options["adj_x"] for op in bmms)


def test_cleanup_drops_identity_arithmetic_and_unit_pools():
    def build():
        x = ir.Tensor("x", [1, 4, 4, 3], np.float32)
        a, b, c, d, e = (ir.Tensor(n, [1, 4, 4, 3], np.float32) for n in "abcde")
        ones, zeros = const("ones", np.ones(3, np.float32)), const("zeros", np.zeros([1, 1, 3], np.float32))
        window = {"padding": "VALID", "stride_h": 1, "stride_w": 1, "filter_height": 1, "filter_width": 1,
                  "fused_activation_function": "NONE"}
        return ir.Graph("main", [x], [e], [
            ir.Op("MUL", [ones, x], [a], {"fused_activation_function": "NONE"}),
            ir.Op("ADD", [a, zeros], [b], {"fused_activation_function": "NONE"}),
            ir.Op("AVERAGE_POOL_2D", [b], [c], window),
            ir.Op("SUB", [c, zeros], [d], {"fused_activation_function": "RELU"}),  # clamps: not a no-op
            ir.Op("DIV", [d, ones], [e], {"fused_activation_function": "NONE"}),
        ])

    graph = check_pass(build, cleanup.run, (np.random.randn(1, 4, 4, 3).astype(np.float32),))
    assert [op.opcode for op in graph.ops] == ["SUB"]

    def broadcasting():  # x + 0 where the zeros make the result larger than x: the ADD broadcasts, it stays
        x = ir.Tensor("x", [3], np.float32)
        y = ir.Tensor("y", [2, 3], np.float32)
        return ir.Graph("main", [x], [y], [ir.Op("ADD", [x, const("zeros", np.zeros([2, 3], np.float32))], [y],
                                                  {"fused_activation_function": "NONE"})])

    graph = broadcasting()
    cleanup.run(graph)
    assert [op.opcode for op in graph.ops] == ["ADD"]


def test_scale_after_a_head_reshape_folds_into_the_dense_layer():
    class Query(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(16, 16)

        def forward(self, x):
            return self.q(x).view(1, 5, 2, 8) / 8.0 * torch.arange(1.0, 9.0)

    model = Query().eval()
    x = torch.randn(1, 5, 16)
    edge = litert_torch.convert(model, (x,))
    assert op_counts(edge) == {"FULLY_CONNECTED": 1, "RESHAPE": 1}
    assert_matches(model(x), edge(x))

    class PerHead(Query):  # one scale per head is one per output channel of the layer: it folds too
        def forward(self, x):
            return self.q(x).view(1, 5, 2, 8) * torch.tensor([[1.0], [2.0]])

    class PerPosition(Query):  # one per position is not: the MUL stays
        def forward(self, x):
            return self.q(x).view(1, 5, 2, 8) * torch.arange(1.0, 6.0).view(5, 1, 1)

    for module, muls in ((PerHead, 0), (PerPosition, 1)):
        model = module().eval()
        edge = litert_torch.convert(model, (x,))
        assert op_counts(edge).get("MUL", 0) == muls
        assert_matches(model(x), edge(x))


def test_written_out_tanh_gelu_becomes_one_gelu():
    class NewGelu(nn.Module):  # Hugging Face's gelu_new
        def __init__(self, cubic=0.044715):
            super().__init__()
            self.cubic = cubic

        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + self.cubic * torch.pow(x, 3.0))))

    x = torch.randn(2, 64) * 3
    edge = litert_torch.convert(NewGelu().eval(), (x,))
    assert op_counts(edge) == {"GELU": 1}
    assert_matches(NewGelu()(x), edge(x))
    other = NewGelu(cubic=0.05).eval()  # a different function: left as written
    edge = litert_torch.convert(other, (x,))
    assert "GELU" not in op_counts(edge)
    assert_matches(other(x), edge(x))


def test_a_transpose_stuck_after_a_norm_merges_with_the_one_already_there():
    from litert_torch.passes import merge_transposes

    def build():
        x = ir.Tensor("a_x", [4, 6], np.float32)
        other = ir.Tensor("b_other", [6, 4], np.float32)
        t1, xt = transpose(x, [1, 0], "xt")
        residual = ir.Tensor("residual", [6, 4], np.float32)
        mean = ir.Tensor("mean", [1, 6], np.float32)
        centred = ir.Tensor("centred", [4, 6], np.float32)
        scaled = ir.Tensor("scaled", [4, 6], np.float32)
        ops = [
            t1,
            ir.Op("ADD", [xt, other], [residual], {"fused_activation_function": "NONE"}),
            ir.Op("MEAN", [x, const("axes", np.array([0], np.int32))], [mean], {"keep_dims": True}),
            ir.Op("SUB", [x, mean], [centred], {"fused_activation_function": "NONE"}),
            ir.Op("MUL", [centred, const("gamma", np.arange(6, dtype=np.float32).reshape(1, 6))], [scaled],
                  {"fused_activation_function": "NONE"}),
        ]
        t2, normed = transpose(scaled, [1, 0], "normed")
        return ir.Graph("main", [x, other], [residual, normed], ops + [t2])

    inputs = (np.random.randn(4, 6).astype(np.float32), np.random.randn(6, 4).astype(np.float32))
    graph = check_pass(build, merge_transposes.run, inputs)
    assert graph.op_counts()["TRANSPOSE"] == 1
    mean = next(op for op in graph.ops if op.opcode == "MEAN")
    assert mean.inputs[0].shape == (6, 4) and mean.inputs[1].data.tolist() == [1]


def test_dense_block_concatenations_build_on_each_other():
    class DenseBlock(nn.Module):
        def __init__(self, layers=7):
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv2d(4 * (i + 1), 4, 3, padding=1) for i in range(layers))

        def forward(self, x):
            features = [x]
            for conv in self.convs:
                features.append(torch.relu(conv(torch.cat(features, 1))))
            return torch.cat(features, 1)

    model = DenseBlock().eval()
    x = torch.randn(1, 4, 8, 8)
    edge = litert_torch.convert(model, (x,))
    assert_matches(model(x), edge(x))
    concats = [op for op in read_model(edge.flatbuffer).subgraphs[0].ops if op.opcode == "CONCATENATION"]
    assert len(concats) == 7 and all(len(op.inputs) == 2 for op in concats)  # no tree of copies for XNNPACK


def test_nested_concatenations_flatten_and_wide_ones_take_few_ops():
    class Inception(nn.Module):  # torchvision's InceptionE joins two inner concatenations with two branches
        def forward(self, a, b, c, d, e, f):
            return torch.cat([a, torch.cat([b, c], 1), torch.cat([d, e], 1), f], 1)

    args = tuple(torch.randn(1, 2 + i, 3, 3) for i in range(6))
    edge = litert_torch.convert(Inception().eval(), args)
    assert_matches(Inception()(*args), edge(*args))
    assert op_counts(edge).get("CONCATENATION") == 2  # six inputs: one join of two, then five (XNNPACK's limit)

    class Wide(nn.Module):
        def forward(self, x):
            return torch.cat([x * i for i in range(1, 14)], -1)

    x = torch.randn(2, 3)
    edge = litert_torch.convert(Wide().eval(), (x,))
    assert_matches(Wide()(x), edge(x))
    assert op_counts(edge)["CONCATENATION"] == 3  # 13 inputs: two joins of five, and the top one of five


class PackedQkvAttention(nn.Module):
    """Attention over one packed q/k/v projection, split after one permute (as torchvision's ViT-style and Swin
    blocks do)."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * (c // self.heads) ** -0.5, qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


def test_transposes_of_split_pieces_share_one_before_the_split():
    """q, k and v sliced out of one packed projection share a single TRANSPOSE of it (k reaching q @ k^T through
    BATCH_MATMUL's adj_y), and the attention output keeps its own: two in all."""
    model = PackedQkvAttention().eval()
    x = torch.randn(2, 9, 32)
    edge = litert_torch.convert(model, (x,))
    with torch.no_grad():
        assert_matches(model(x), edge(x))
    counts = op_counts(edge)
    assert counts["TRANSPOSE"] == 2, counts
    assert any(op.options.get("adj_y") for op in read_model(edge.flatbuffer).subgraphs[0].ops
               if op.opcode == "BATCH_MATMUL")


def test_names_of_tensors_a_pass_moves_again_do_not_grow_and_written_names_are_unique():
    from litert_torch.flatbuffer.writer import _unique_names

    name = "layer/reshape"
    for _ in range(50):
        name = ir.derived_name(name, "pre")
    assert name == "layer/reshape/pre"
    tensors = [ir.Tensor("x/pre", [1], np.float32) for _ in range(5000)] + [ir.Tensor("x/pre_2", [1], np.float32)]
    names = _unique_names(tensors, "g/")
    assert len(set(names.values())) == len(tensors)
    assert names[tensors[0]] == "g/x/pre" and names[tensors[1]] == "g/x/pre_1" and names[tensors[-1]] == "g/x/pre_2_1"


class Router(nn.Module):
    """A mixture-of-experts router: the top 3 of a softmax, and the chosen rows of a table."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 5))

    def forward(self, logits):
        weights, chosen = torch.topk(torch.softmax(logits, dim=-1), 3)
        return weights, chosen, self.table[chosen.reshape(-1)]


class PlainTopk(nn.Module):
    """Top 3 of values of any sign, and the rows of a table at indices given at run time."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 5))

    def forward(self, x, index):
        weights, chosen = torch.topk(x, 3)
        return weights, chosen, self.table[index]


def _same_results(edge, plain, model, cases):
    """`edge` gives what `plain` (the model converted without the sign pass) gives on every case, and PyTorch's
    values; the indices are PyTorch's where the row's values are distinct (PyTorch leaves the order of equal
    values to its kernels)."""
    for args in cases:
        got, before, want = edge(*args), plain(*args), model(*args)
        for a, b in zip(got, before):
            np.testing.assert_array_equal(a, b)
        torch.testing.assert_close(torch.as_tensor(got[0]), want[0], equal_nan=True)
        if all(len(set(row.tolist())) == len(row) for row in args[0]):
            torch.testing.assert_close(torch.as_tensor(got[1]).long(), want[1])
            torch.testing.assert_close(torch.as_tensor(got[2]), want[2].detach())


def _without_sign_pass(monkeypatch, model, args):
    from litert_torch import passes

    with monkeypatch.context() as m:
        m.setattr(passes, "PIPELINE", [p for p in passes.PIPELINE if p[0] != "known_signs"])
        return litert_torch.convert(model, args)


def test_sign_fixes_dropped_after_a_softmax_and_a_topk(monkeypatch):
    """Top-k of a softmax needs no -0.0 fix nor flipped keys for negative values, and its indices no wrap; the
    results are those of the model converted with the fixes, on ties, rows of NaN and rows that underflow."""
    from litert_torch.passes import known_signs

    model = Router().eval()
    x = torch.randn(4, 8)
    edge = litert_torch.convert(model, (x,))
    counts = op_counts(edge)
    for gone in ("BITWISE_XOR", "EQUAL", "LESS"):
        assert counts.get(gone, 0) == 0, counts
    assert counts["TOPK_V2"] == 1 and counts["SELECT_V2"] == 1, counts  # NaN's key stays
    plain = _without_sign_pass(monkeypatch, model, (x,))
    assert op_counts(plain)["BITWISE_XOR"] == 1
    nan = float("nan")
    _same_results(edge, plain, model, [
        (x,), (torch.zeros(4, 8),), (torch.tensor([[0.0, 1, 1, 0, 1, 0, 0, 1]] * 4),),
        (torch.tensor([[nan] + [0.0] * 7, [-200.0, 0, -200, 5, -200, -200, 0, 0],
                       [float("-inf")] * 2 + [1.0] * 6, [1e4, -1e4, 0, 0, 0, 0, 0, 0]]),)])

    # the pass alone: nothing to drop where the keys are read without NaN's key replacing them
    p = ir.Tensor("p", [1, 8], np.float32)
    logits = ir.Tensor("logits", [1, 8], np.float32)
    bits, flipped = ir.Tensor("bits", [1, 8], np.int32), ir.Tensor("flipped", [1, 8], np.int32)
    negative, keys = ir.Tensor("negative", [1, 8], np.bool_), ir.Tensor("keys", [1, 8], np.int32)
    top, idx = ir.Tensor("top", [1, 2], np.int32), ir.Tensor("idx", [1, 2], np.int32)
    graph = ir.Graph("main", [logits], [top, idx], [
        ir.Op("SOFTMAX", [logits], [p], {"beta": 1.0}),
        ir.Op("BITCAST", [p], [bits]),
        ir.Op("BITWISE_XOR", [bits, const("mask", np.array(0x7FFFFFFF, np.int32))], [flipped]),
        ir.Op("LESS", [bits, const("zero", np.array(0, np.int32))], [negative]),
        ir.Op("SELECT_V2", [negative, flipped, bits], [keys]),
        ir.Op("TOPK_V2", [keys, const("k", np.array(2, np.int32))], [top, idx])])
    assert not known_signs.run(graph)


def test_sign_fixes_kept_where_values_may_be_negative(monkeypatch):
    """Top-k of values of any sign keeps the -0.0 fix and the flipped keys, and an index from the caller keeps
    its wrap: negative values, -0.0 against 0.0, and negative indices as before."""
    model = PlainTopk().eval()
    x, index = torch.randn(3, 8), torch.tensor([0, -1, 3, -8])
    edge = litert_torch.convert(model, (x, index))
    plain = _without_sign_pass(monkeypatch, model, (x, index))
    assert op_counts(edge) == op_counts(plain)
    assert op_counts(edge)["BITWISE_XOR"] == 1
    x2 = torch.tensor([[-0.0, 0.0, -1, -2, -0.0, 0.0, -3, -4]] * 3)
    _same_results(edge, plain, model, [(x, index), (x2, index), (-x.abs(), index)])
