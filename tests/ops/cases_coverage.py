"""Op table rows for transformer, sequence and dense-vision ops (joined to CASES in tests/ops/test_ops.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from litert_torch.errors import ConversionError
from tests.ops.cases import OpCase, fn, r, r2


def ints(*shape, high=10, low=0):
    return lambda: (torch.randint(low, high, shape),)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)

    def forward(self, ids):
        return self.emb(ids)


class Recurrent(nn.Module):
    def __init__(self, layer, returns="output"):
        super().__init__()
        self.layer = layer
        self.returns = returns

    def forward(self, x):
        out, state = self.layer(x)
        if self.returns == "h_n":
            return out, state[0] if isinstance(state, tuple) else state
        if self.returns == "c_n":
            return state[1]
        return out


class EmbeddingBagOffsets(nn.Module):
    """F.embedding_bag with its offsets (and per-sample weights) given at run time."""

    def __init__(self, weighted=False, **options):
        super().__init__()
        self.table = nn.Parameter(torch.randn(10, 4))
        self.options = options

    def forward(self, indices, offsets, weights=None):
        return F.embedding_bag(indices, self.table, offsets, per_sample_weights=weights, **self.options)


class LSTMFromState(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, h0, c0):
        out, (h, c) = self.layer(x, (h0, c0))
        return out, h, c


class GRUFromState(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, h0):
        return self.layer(x, h0)


def _setitem(y, index, value):
    """y[index] = value on a copy (index_put in the exported graph)."""
    y = y.clone()
    y[index] = value
    return y


def attn(**kw):
    return fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw))


def qkv(b=2, h=3, lq=5, lk=7, e=8):
    return lambda: (torch.randn(b, h, lq, e), torch.randn(b, h, lk, e), torch.randn(b, h, lk, e))


class MaskedAttention(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


def bool_mask_with_empty_row():
    mask = torch.rand(5, 7) > 0.4
    mask[2] = False
    return mask


def affine_norm(layer):
    def build():
        module = layer()
        with torch.no_grad():
            for p in module.parameters():
                p.normal_()
        return module
    return build


COVERAGE_CASES: list[OpCase] = [
    # ---- normalisation --------------------------------------------------------------------------------------
    OpCase("layer_norm", affine_norm(lambda: nn.LayerNorm(16)), r(2, 5, 16)),
    OpCase("layer_norm_2d_no_affine", lambda: nn.LayerNorm([4, 6], elementwise_affine=False), r(3, 4, 6)),
    OpCase("group_norm", affine_norm(lambda: nn.GroupNorm(3, 6)), r(2, 6, 5, 5)),
    OpCase("group_norm_1d", affine_norm(lambda: nn.GroupNorm(2, 4)), r(2, 4, 9)),
    OpCase("cdist_euclidean_direct", fn(lambda a, b: torch.cdist(a, b)), r2((2, 5, 4), (2, 7, 4))),
    OpCase("cdist_euclidean_by_matmul", fn(lambda a, b: torch.cdist(a, b)), r2((30, 8), (9, 8)),
           {"BATCH_MATMUL": 1}),
    OpCase("cdist_manhattan_broadcast_batch", fn(lambda a, b: torch.cdist(a, b, p=1)), r2((3, 1, 5, 4), (2, 6, 4))),
    OpCase("cdist_chebyshev", fn(lambda a, b: torch.cdist(a, b, p=float("inf"))), r2((5, 3), (4, 3))),
    OpCase("cdist_hamming", fn(lambda a, b: torch.cdist(a, b, p=0)),
           lambda: (torch.randint(0, 2, (5, 6)).float(), torch.randint(0, 2, (4, 6)).float())),
    OpCase("cdist_p3", fn(lambda a, b: torch.cdist(a, b, p=3)), r2((5, 3), (4, 3))),
    OpCase("scatter_src", fn(lambda x, s: x.scatter(1, torch.tensor([[0, 4], [2, 1], [3, 0]]), s)),
           r2((3, 5), (3, 2)), {"SCATTER_ND": 2}),
    OpCase("scatter_value", fn(lambda x: x.scatter(0, torch.tensor([[2, 0, 1, 2]]), -3.5)),
           r(3, 4)),
    OpCase("scatter_add_duplicates", fn(lambda x, s: x.scatter_add(0, torch.tensor([[0, 1, 1], [0, 0, 2]]), s)),
           r2((3, 3), (2, 3))),
    OpCase("scatter_reduce_sum_without_self",
           fn(lambda x, s: x.scatter_reduce(0, torch.tensor([[0, 1, 1], [0, 0, 2]]), s, "sum", include_self=False)),
           r2((3, 3), (2, 3))),
    OpCase("scatter_reduce_mean", fn(lambda x, s: x.scatter_reduce(1, torch.tensor([[0, 0], [2, 1]]), s, "mean")),
           r2((2, 3), (2, 2))),
    OpCase("scatter_reduce_amax_duplicates",
           fn(lambda x, s: x.scatter_reduce(1, torch.tensor([[0, 0], [2, 1]]), s, "amax")), r2((2, 3), (2, 2))),
    OpCase("scatter_reduce_amin_without_self_index_block",
           fn(lambda x, s: x.scatter_reduce(0, torch.tensor([[0, 3, 3], [3, 1, 0]]), s, "amin", include_self=False)),
           r2((4, 5), (3, 4))),
    OpCase("scatter_reduce_prod_3d", fn(lambda x, s: x.scatter_reduce(2, torch.tensor([[[1, 1, 0]], [[2, 0, 0]]]), s,
                                                                       "prod")), r2((2, 3, 4), (2, 1, 3))),
    OpCase("scatter_reduce_amin_ints", fn(lambda x, s: x.scatter_reduce(1, torch.tensor([[0, 0, 2]]), s, "amin")),
           lambda: (torch.randint(-50, 50, (1, 4)), torch.randint(-50, 50, (1, 3)))),
    OpCase("scatter_multiply", fn(lambda x, s: x.scatter(0, torch.tensor([[1, 1], [0, 1]]), s, reduce="multiply")),
           r2((2, 2), (2, 2))),
    OpCase("index_reduce_prod", fn(lambda x, s: x.index_reduce(0, torch.tensor([2, 0, 2]), s, "prod")),
           r2((4, 3), (3, 3))),
    OpCase("index_reduce_amax_without_self",
           fn(lambda x, s: x.index_reduce(1, torch.tensor([1, 1, 3]), s, "amax", include_self=False)),
           r2((2, 4), (2, 3))),
    OpCase("index_reduce_mean_ints", fn(lambda x, s: x.index_reduce(0, torch.tensor([0, 0, 1]), s, "mean")),
           lambda: (torch.randint(-20, 20, (3, 2)), torch.randint(-20, 20, (3, 2)))),
    OpCase("scatter_reduce_amax_too_many_comparisons",
           fn(lambda x, s: x.scatter_reduce(0, torch.arange(4097) % 4096, s, "amax")), r2((4096,), (4097,)),
           raises=ConversionError, reason="the comparison grid would be larger than 2**24 elements",
           match=r"over 2\*\*24"),
    OpCase("bucketize_left_with_nan_and_ties",
           fn(lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.0, 2.5]))),
           lambda: (torch.tensor([[-3.0, -1.0, 0.0, 1.0], [2.5, 9.0, float("nan"), float("-inf")]]),)),
    OpCase("bucketize_right_int32", fn(lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.0, 2.5]), right=True,
                                                                out_int32=True)),
           lambda: (torch.tensor([-3.0, -1.0, 0.0, 1.0, 2.5, 9.0, float("nan")]),)),
    OpCase("searchsorted_batched_right", fn(lambda s, v: torch.searchsorted(s, v, side="right")),
           lambda: (torch.sort(torch.randint(0, 6, (2, 3, 5)).float(), dim=-1).values, torch.randint(-1, 7, (2, 3, 4)).float())),
    OpCase("diagonal_scatter_below", fn(lambda x, s: torch.diagonal_scatter(x, s, -1, 2, 0)), r2((4, 3, 5), (3, 4))),
    OpCase("diagonal_scatter_above", fn(lambda x, s: torch.diagonal_scatter(x, s, 2)), r2((4, 5), (3,))),
    OpCase("as_strided_scatter_columns", fn(lambda x, s: torch.as_strided_scatter(x, s, (3, 2), (4, 2), 1)),
           r2((3, 4), (3, 2))),
    OpCase("narrow_copy_negative_start", fn(lambda x: x.narrow_copy(1, -3, 2)), r(2, 5, 3)),
    OpCase("index_put_rows", fn(lambda x, v: torch.index_put(x, (torch.tensor([2, -1, 0]),), v)), r2((4, 5), (3, 5))),
    OpCase("index_put_accumulate_duplicates",
           fn(lambda x, v: torch.index_put(x, (torch.tensor([1, 1, 3]),), v, accumulate=True)), r2((4, 5), (3, 5))),
    OpCase("setitem_adjacent_indices",
           fn(lambda y, v: _setitem(y, (slice(None), torch.tensor([0, 3, -2]), torch.tensor([[1], [4]])), v)),
           r2((3, 4, 5, 6), (2, 3, 6))),
    OpCase("setitem_indices_apart", fn(lambda y, v: _setitem(y, (torch.tensor([0, 2]), slice(None), torch.tensor([1, 4])),
                                                             v)), r2((3, 4, 5, 6), (2, 4, 6))),
    OpCase("setitem_boolean_mask", fn(lambda y: _setitem(y, y > 0.5, 0.0)), r(3, 4, 5)),
    OpCase("max_unpool2d_overlapping_windows",
           fn(lambda x: F.max_unpool2d(*F.max_pool2d(x, 3, stride=1, return_indices=True), 3, stride=1)),
           r(1, 2, 6, 6)),
    OpCase("cumprod", fn(lambda x: torch.cumprod(x, 1)), lambda: (torch.rand(3, 11) + 0.5,)),
    OpCase("cumprod_int", fn(lambda x: torch.cumprod(x, 0)), lambda: (torch.randint(-3, 4, (6, 2), dtype=torch.int32),)),
    OpCase("native_group_norm_statistics",
           fn(lambda x, w, b: torch.ops.aten.native_group_norm(x, w, b, 2, 6, 20, 3, 1e-5)),
           lambda: (torch.randn(2, 6, 4, 5), torch.randn(6), torch.randn(6))),
    OpCase("instance_norm", affine_norm(lambda: nn.InstanceNorm2d(4, affine=True)), r(2, 4, 6, 6)),
    OpCase("instance_norm_tracked_eval", lambda: nn.InstanceNorm1d(3, track_running_stats=True), r(2, 3, 8)),
    # ---- embedding, gather, indexing ------------------------------------------------------------------------
    OpCase("embedding_int64_ids", Embed, ints(2, 6, high=50), {"GATHER": 1}),
    # log(0) -> -inf -> the int64 minimum (+ 2), discarded by the where: a value between constants, never in the model
    OpCase("constant_int64_intermediate_out_of_int32",
           fn(lambda x: x + torch.where(torch.arange(4) > 0, torch.log(torch.arange(4.0)).long() + 2, 0)), ints(3, 4)),
    OpCase("index_select", fn(lambda x, i: x.index_select(1, i)),
           lambda: (torch.randn(3, 6, 2), torch.tensor([5, 0, 2, 2]))),
    OpCase("index_tensor_one_axis", fn(lambda x, i: x[:, i]), lambda: (torch.randn(3, 6, 2), torch.tensor([[1, -2]]))),
    OpCase("index_tensor_leading_axes", fn(lambda x, i, j: x[i, j]),
           lambda: (torch.randn(4, 5, 3), torch.tensor([0, 3, 1]), torch.tensor([4, 0, 2]))),
    OpCase("gather", fn(lambda x, i: torch.gather(x, 1, i)),
           lambda: (torch.randn(3, 5), torch.randint(0, 5, (3, 4)))),
    OpCase("gather_dim0", fn(lambda x, i: torch.gather(x, 0, i)),
           lambda: (torch.randn(4, 3), torch.randint(0, 4, (2, 3)))),
    OpCase("select", fn(lambda x: x[:, -1]), r(2, 5, 3), {"SLICE": 1, "STRIDED_SLICE": 0}),
    OpCase("bool_mask_index", fn(lambda x: x[x > 0] * 2), r(6), {"WHERE": 1}),
    OpCase("nonzero", fn(lambda x: torch.nonzero(x > 0)), r(3, 4), {"WHERE": 1}),
    OpCase("unique", fn(lambda x: torch.unique(x.round(), return_counts=True)), r(6), {"WHERE": 1}),
    OpCase("size_from_item", fn(lambda x: torch.ones(x.sum().int().item() % 4) * 2), ints(3, high=3), {"FILL": 1}),
    # ---- comparisons, logic, where --------------------------------------------------------------------------
    OpCase("compare_eq_scalar", fn(lambda x: x == 2), ints(5, 4, high=4), {"EQUAL": 1}),
    OpCase("compare_lt_tensor", fn(torch.lt), r2((3, 4), (4,)), {"LESS": 1}),
    OpCase("compare_ge_mixed_types", fn(lambda x, y: x >= y), lambda: (torch.randint(0, 4, (5,)), torch.rand(5) * 4)),
    OpCase("logical_ops", fn(lambda a, b: torch.logical_or(torch.logical_and(a > 0, b > 0), ~(a > 1))),
           r2((4, 4), (4, 4))),
    OpCase("where", fn(lambda c, a, b: torch.where(c > 0, a, b)), lambda: (torch.randn(3, 1), torch.randn(3, 4),
                                                                           torch.randn(4)), {"SELECT_V2": 1}),
    OpCase("where_scalar", fn(lambda x: torch.where(x > 0, x, 0.1)), r(6)),
    OpCase("masked_fill", fn(lambda x, m: x.masked_fill(m > 0, -5.0)), r2((2, 3, 4), (3, 1))),
    OpCase("full_like_and_zeros_like", fn(lambda x: x + torch.full_like(x, 2.0) + torch.zeros_like(x)), r(3)),
    OpCase("arange_full_constants", fn(lambda x: x + torch.arange(4) + torch.ones(4) * 2), r(3, 4)),
    # ---- math ----------------------------------------------------------------------------------------------
    OpCase("pow_square", fn(lambda x: x ** 2), r(6), {"POW": 0}),
    OpCase("pow_general", fn(lambda x: x.abs() ** 1.7), r(6), {"POW": 1}),
    OpCase("pow_tensor", fn(torch.pow), lambda: (torch.rand(5) + 0.5, torch.randn(5))),
    OpCase("sqrt_rsqrt_exp_log", fn(lambda x: torch.sqrt(x) + torch.rsqrt(x) + torch.exp(x) + torch.log(x)),
           lambda: (torch.rand(8) + 0.1,)),
    OpCase("abs_neg_reciprocal", fn(lambda x: torch.abs(x) - x + torch.reciprocal(x)), lambda: (torch.rand(8) + 0.5,)),
    OpCase("floor_divide_remainder", fn(lambda a, b: torch.floor_divide(a, b) + torch.remainder(a, b)),
           lambda: (torch.randn(6) * 5, torch.rand(6) + 0.5)),
    OpCase("to_dtype_cast", fn(lambda x: (x * 3).to(torch.int32).float()), r(6), {"CAST": 2}),
    OpCase("prelu", lambda: nn.PReLU(4, 0.2), r(2, 4, 5), {"PRELU": 1}),
    OpCase("erf", fn(torch.erf), lambda: (torch.cat([torch.randn(64) * 2, torch.zeros(1), torch.tensor([1e-8, -6.0])]),)),
    OpCase("erf_gelu_formula", fn(lambda x: x * 0.5 * (1.0 + torch.erf(x / 1.4142135623730951))), r(4, 16)),
    # ---- integer and edge-case shapes -------------------------------------------------------------------------
    OpCase("int_arithmetic", fn(lambda a, b: (a + b) * 3 - b), lambda: (torch.randint(-50, 50, (3, 4)),
                                                                        torch.randint(-50, 50, (4,)))),
    OpCase("int_cat_slice", fn(lambda a: torch.cat([a[:, 1:], a[:, :1]], dim=-1)), ints(3, 5, high=1000)),
    OpCase("cat_with_empty_part", fn(lambda a, b: torch.cat([a, b[:, :0], a], 1)), r2((2, 3), (2, 4))),
    OpCase("softmax_over_unit_dim", fn(lambda x: torch.softmax(x, dim=1)), r(3, 1, 4)),
    OpCase("mean_over_unit_dims", fn(lambda x: x.mean(dim=(0, 2))), r(1, 5, 1)),
    OpCase("bool_input_where", fn(lambda m, x: torch.where(m, x, -x)),
           lambda: (torch.rand(3, 4) > 0.5, torch.randn(3, 4))),
    # ---- reductions ----------------------------------------------------------------------------------------
    # one ARG_MAX of the values, one of the NaN mask (a NaN is the maximum, as in PyTorch)
    OpCase("argmax", fn(lambda x: x.argmax(dim=1)), r(3, 7), {"ARG_MAX": 2}),
    OpCase("argmin_keepdim", fn(lambda x: x.argmin(dim=-1, keepdim=True)), r(3, 7), {"ARG_MIN": 1}),
    OpCase("argmax_flat", fn(lambda x: x.argmax()), r(3, 7)),
    OpCase("max_dim", fn(lambda x: x.max(dim=0)), r(4, 5)),
    OpCase("cumsum", fn(lambda x: x.cumsum(dim=1)), r(3, 6), {"CUMSUM": 1}),
    OpCase("cumsum_int", fn(lambda x: x.cumsum(0)), ints(6, high=100)),
    OpCase("topk", fn(lambda x: torch.topk(x, 3)), r(2, 9), {"TOPK_V2": 1}),
    OpCase("topk_smallest_dim0", fn(lambda x: torch.topk(x, 2, dim=0, largest=False)), r(6, 3)),
    OpCase("fmod_float_exact", fn(lambda a, b: torch.fmod(a, b)),
           lambda: (torch.tensor([7.5, -7.5, 7.5, -7.5, 1e30, -3.0e9, 0.0, -0.25]),
                    torch.tensor([2.0, 2.0, -2.0, -2.0, 7.0, 0.3, 3.0, float("inf")]))),
    OpCase("fmod_int64_mixed_signs", fn(lambda a, b: torch.fmod(a, b)),
           lambda: (torch.tensor([7, -7, 7, -7, 0, 2**30 + 3, -(2**30) - 3]),
                    torch.tensor([3, 3, -3, -3, 5, 2**20, -7]))),
    OpCase("fmod_scalar_int32", fn(lambda a: torch.fmod(a, -4)),
           lambda: (torch.arange(-9, 9, dtype=torch.int32),)),
    OpCase("topk_smallest_int32_extremes",
           fn(lambda x: torch.topk(x, 3, largest=False)),
           lambda: (torch.tensor([[2**31 - 1, -2**31, 5, -2**31 + 1, 0, 7], [3, 4, -1, 2**31 - 1, -5, -6]],
                                 dtype=torch.int32),)),
    OpCase("sort_ascending_int", fn(lambda x: torch.sort(x, dim=0)),
           lambda: (torch.randperm(21, dtype=torch.int32).reshape(7, 3) - 10,)),
    OpCase("any_all", fn(lambda x: (x > 0).any(dim=1).logical_and((x > -3).all(dim=1))), r(3, 5)),
    OpCase("var_std", fn(lambda x: x.var(dim=-1) + x.std(dim=0, unbiased=False).sum()), r(4, 6)),
    # ---- shapes ---------------------------------------------------------------------------------------------
    OpCase("expand", fn(lambda x: x.expand(2, 3, 4)), r(3, 1), {"BROADCAST_TO": 0, "MUL": 1}),  # by ones
    OpCase("expand_into_broadcasting_add", fn(lambda x, y: x.expand(2, 3, 4) + y), r2((3, 1), (2, 3, 4)),
           {"BROADCAST_TO": 0, "ADD": 1}),
    OpCase("expand_needed_by_concat", fn(lambda x, y: torch.cat([x.expand(3, 4), y], 0)), r2((1, 4), (2, 4)),
           {"BROADCAST_TO": 0, "MUL": 1}),
    OpCase("repeat", fn(lambda x: x.repeat(2, 1, 3)), r(3, 2), {"TILE": 1}),
    OpCase("flip", fn(lambda x: x.flip(0, -1)), r(3, 4, 2), {"REVERSE_V2": 2}),
    OpCase("roll", fn(lambda x: torch.roll(x, shifts=(1, -2), dims=(0, 2))), r(3, 4, 5)),
    OpCase("roll_flat", fn(lambda x: torch.roll(x, 3)), r(2, 5)),
    OpCase("stack_unbind", fn(lambda a, b: torch.stack([a, b], dim=1).unbind(2)[1]), r2((2, 3, 4), (2, 3, 4))),
    OpCase("pixel_shuffle", lambda: nn.PixelShuffle(2), r(1, 12, 4, 5), {"DEPTH_TO_SPACE": 1}),
    OpCase("pixel_shuffle_one_channel", lambda: nn.PixelShuffle(3), r(2, 9, 3, 3), {"GATHER": 0}),
    OpCase("pixel_unshuffle", lambda: nn.PixelUnshuffle(2), r(1, 3, 4, 6), {"SPACE_TO_DEPTH": 1}),
    OpCase("reflection_pad2d", lambda: nn.ReflectionPad2d((1, 2, 2, 0)), r(1, 2, 5, 5), {"MIRROR_PAD": 1}),
    OpCase("reflection_pad1d", lambda: nn.ReflectionPad1d(3), r(2, 3, 6)),
    OpCase("replication_pad2d", lambda: nn.ReplicationPad2d((2, 1, 0, 3)), r(1, 2, 4, 5)),
    OpCase("replication_pad1d", lambda: nn.ReplicationPad1d((1, 4)), r(2, 3, 6)),
    OpCase("replication_pad2d_negative", lambda: nn.ReplicationPad2d((-1, 2, 3, -2)), r(1, 2, 5, 6), {"GATHER": 2}),
    # a crop wider than the axis: every output reads the clamped edge, as PyTorch computes it
    OpCase("replication_pad1d_crop_past_the_axis", fn(lambda x: F.pad(x, (-4, 5), mode="replicate")), r(1, 2, 3)),
    # ---- resize -------------------------------------------------------------------------------------------
    # An integer factor on both axes leaves as DEPTH_TO_SPACE of copies (nearest_upsample_to_depth_to_space).
    OpCase("upsample_nearest_2x", lambda: nn.Upsample(scale_factor=2, mode="nearest"), r(1, 3, 4, 5),
           {"DEPTH_TO_SPACE": 1}),
    OpCase("interpolate_nearest_size", fn(lambda x: F.interpolate(x, size=(7, 3))), r(1, 2, 5, 4)),
    OpCase("interpolate_nearest_exact", fn(lambda x: F.interpolate(x, size=(7, 9), mode="nearest-exact")),
           r(1, 2, 5, 4)),
    OpCase("upsample_bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), r(1, 3, 4, 5),
           {"RESIZE_BILINEAR": 1}),
    OpCase("upsample_bilinear_align_corners", lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
           r(1, 3, 4, 5)),
    OpCase("interpolate_bilinear_down", fn(lambda x: F.interpolate(x, size=(3, 4), mode="bilinear")), r(1, 2, 7, 9)),
    # PyTorch maps pixels with the given scale (1/1.7), TFLite's RESIZE_BILINEAR with in/out (5/8): the
    # gather-and-weigh form computes PyTorch's
    OpCase("interpolate_bilinear_odd_scale", fn(lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear")),
           r(1, 2, 5, 5), {"GATHER": 2, "RESIZE_BILINEAR": 0}),
    OpCase("interpolate_nearest_odd_scale", fn(lambda x: F.interpolate(x, scale_factor=1.7)), r(1, 2, 5, 6)),
    OpCase("interpolate_bilinear_antialias_down",
           fn(lambda x: F.interpolate(x, size=(7, 5), mode="bilinear", antialias=True)), r(2, 3, 23, 31)),
    OpCase("interpolate_bicubic_antialias_scale",
           fn(lambda x: F.interpolate(x, scale_factor=0.37, mode="bicubic", antialias=True)), r(1, 2, 23, 31)),
    OpCase("interpolate_bilinear_antialias_up_align_corners",
           fn(lambda x: F.interpolate(x, size=(30, 9), mode="bilinear", antialias=True, align_corners=True)),
           r(1, 2, 23, 7)),
    OpCase("interpolate_bicubic", fn(lambda x: F.interpolate(x, size=(7, 4), mode="bicubic")), r(1, 2, 5, 6),
           {"GATHER": 2}),
    OpCase("interpolate_bicubic_align_corners",
           fn(lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True)), r(1, 2, 5, 6)),
    OpCase("interpolate_trilinear", fn(lambda x: F.interpolate(x, scale_factor=(1.5, 0.5, 2), mode="trilinear")),
           r(1, 2, 3, 4, 5)),
    OpCase("interpolate_linear_1d", fn(lambda x: F.interpolate(x, size=11, mode="linear", align_corners=True)),
           r(2, 3, 7)),
    OpCase("interpolate_nearest_3d", fn(lambda x: F.interpolate(x, scale_factor=(2, 0.5, 1.5))), r(1, 2, 3, 4, 5)),
    OpCase("interpolate_nearest_exact_1d", fn(lambda x: F.interpolate(x, size=9, mode="nearest-exact")), r(2, 3, 7)),
    # ---- attention ------------------------------------------------------------------------------------------
    OpCase("sdpa", attn(), qkv(), {"BATCH_MATMUL": 2, "SOFTMAX": 1}),
    OpCase("sdpa_causal", attn(is_causal=True), qkv(lq=6, lk=6)),
    OpCase("sdpa_scale", attn(scale=0.3), qkv()),
    OpCase("sdpa_float_mask", fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
           lambda: (*qkv()(), torch.randn(5, 7))),
    OpCase("sdpa_bool_mask_input", fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0)),
           lambda: (*qkv()(), torch.randn(2, 1, 5, 7))),
    OpCase("sdpa_bool_mask_empty_row", lambda: MaskedAttention(bool_mask_with_empty_row()), qkv()),
    OpCase("sdpa_gqa", attn(enable_gqa=True), lambda: (torch.randn(2, 6, 5, 8), torch.randn(2, 2, 7, 8),
                                                      torch.randn(2, 2, 7, 8))),
    OpCase("sdpa_gqa_causal_mask", fn(lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m, enable_gqa=True)), lambda: (torch.randn(1, 4, 6, 8), torch.randn(1, 1, 6, 8),
                                                          torch.randn(1, 1, 6, 16), torch.randn(1, 4, 6, 6))),
    OpCase("multihead_attention", lambda: _MHA(), r(2, 6, 16)),
    OpCase("adaptive_avg_pool3d_uneven", lambda: nn.AdaptiveAvgPool3d((2, 3, 1)), r(1, 2, 5, 7, 4),
           {"FULLY_CONNECTED": 3}),
    OpCase("adaptive_avg_pool3d_unbatched_keeps_axis", lambda: nn.AdaptiveAvgPool3d((3, 6, 2)), r(2, 5, 6, 4),
           {"FULLY_CONNECTED": 2}),
    OpCase("adaptive_max_pool3d_uneven", lambda: nn.AdaptiveMaxPool3d((2, 3, 1)), r(1, 2, 5, 7, 4)),
    OpCase("adaptive_max_pool3d_indices", lambda: nn.AdaptiveMaxPool3d((2, 3, 2), return_indices=True),
           r(1, 2, 4, 5, 3)),
    OpCase("adaptive_max_pool2d_indices_ties", lambda: nn.AdaptiveMaxPool2d((3, 2), return_indices=True),
           lambda: (torch.randint(0, 3, (2, 3, 7, 5)).float(),)),
    # embedding bags: equal bags of a 2-D input, offsets given at run time (empty bags included), padding_idx
    OpCase("embedding_bag_2d_sum", lambda: nn.EmbeddingBag(10, 4, mode="sum"),
           lambda: (torch.randint(0, 10, (3, 5)),), {"BATCH_MATMUL": 0, "SUM": 1}),
    OpCase("embedding_bag_2d_max_padding", lambda: nn.EmbeddingBag(10, 4, mode="max", padding_idx=2),
           lambda: (torch.tensor([[2, 2, 2], [1, 2, 3], [4, 5, 2]]),)),
    OpCase("embedding_bag_offsets_mean", lambda: EmbeddingBagOffsets(mode="mean", padding_idx=0),
           lambda: (torch.tensor([3, 0, 4, 4, 9, 1, 0]), torch.tensor([0, 2, 2, 6]))),
    OpCase("embedding_bag_offsets_max_last", lambda: EmbeddingBagOffsets(mode="max", include_last_offset=True),
           lambda: (torch.tensor([3, 8, 4, 4, 9, 1, 7]), torch.tensor([0, 3, 3, 5, 7]))),
    OpCase("embedding_bag_weighted_sum", lambda: EmbeddingBagOffsets(mode="sum", weighted=True),
           lambda: (torch.tensor([3, 8, 4, 4, 9, 1, 7]), torch.tensor([0, 1, 1, 4]), torch.randn(7))),
    OpCase("index_select_0d", fn(lambda x, i: torch.index_select(x.sum(), 0, i) + x.conj_physical()),
           lambda: (torch.randn(3), torch.tensor([0]))),
    OpCase("bilinear", lambda: nn.Bilinear(5, 6, 7), r2((2, 3, 5), (2, 3, 6)), {"FULLY_CONNECTED": 1, "SUM": 1}),
    OpCase("bilinear_unbatched_no_bias", lambda: nn.Bilinear(5, 6, 7, bias=False), r2((5,), (6,))),
    OpCase("bilinear_weight_input", fn(lambda a, b, w: F.bilinear(a, b, w)),
           lambda: (torch.randn(4, 5), torch.randn(4, 6), torch.randn(3, 5, 6))),
    # ---- recurrent ------------------------------------------------------------------------------------------
    OpCase("lstm_2layer_batch_first", lambda: Recurrent(nn.LSTM(8, 16, 2, batch_first=True)), r(2, 10, 8),
           {"UNIDIRECTIONAL_SEQUENCE_LSTM": 2}, target="cpu"),
    OpCase("lstm_time_major_h_n", lambda: Recurrent(nn.LSTM(8, 12), "h_n"), r(6, 3, 8),
           {"UNIDIRECTIONAL_SEQUENCE_LSTM": 1}, target="cpu"),
    OpCase("lstm_bidirectional", lambda: Recurrent(nn.LSTM(8, 12, 2, batch_first=True, bidirectional=True), "h_n"),
           r(2, 7, 8), {"UNIDIRECTIONAL_SEQUENCE_LSTM": 4}, target="cpu"),
    OpCase("lstm_no_bias", lambda: Recurrent(nn.LSTM(8, 12, batch_first=True, bias=False)), r(1, 5, 8)),
    # A read c_n, an initial state or projections: unrolled over time.
    OpCase("lstm_cell_state", lambda: Recurrent(nn.LSTM(8, 12), "c_n"), r(6, 3, 8),
           {"UNIDIRECTIONAL_SEQUENCE_LSTM": 0}),
    OpCase("lstm_initial_state", lambda: LSTMFromState(nn.LSTM(8, 12, 2, batch_first=True, bidirectional=True)),
           lambda: (torch.randn(2, 5, 8), torch.randn(4, 2, 12), torch.randn(4, 2, 12))),
    OpCase("lstm_initial_state_time_major", lambda: LSTMFromState(nn.LSTM(8, 12)),
           lambda: (torch.randn(5, 3, 8), torch.randn(1, 3, 12), torch.randn(1, 3, 12))),
    OpCase("lstm_projection", lambda: Recurrent(nn.LSTM(8, 12, 2, batch_first=True, bidirectional=True,
                                                        proj_size=5), "h_n"), r(2, 6, 8)),
    OpCase("lstm_projection_state_no_bias", lambda: LSTMFromState(nn.LSTM(8, 12, bias=False, proj_size=4)),
           lambda: (torch.randn(4, 2, 8), torch.randn(1, 2, 4), torch.randn(1, 2, 12))),
    OpCase("lstm_unbatched", lambda: LSTMFromState(nn.LSTM(8, 12)),
           lambda: (torch.randn(5, 8), torch.randn(1, 12), torch.randn(1, 12))),
    OpCase("gru", lambda: Recurrent(nn.GRU(8, 12, batch_first=True), "h_n"), r(2, 5, 8)),
    OpCase("gru_bidirectional", lambda: Recurrent(nn.GRU(8, 12, bidirectional=True)), r(5, 2, 8)),
    OpCase("gru_2layer_bidirectional_h_n", lambda: Recurrent(nn.GRU(8, 12, 2, batch_first=True, bidirectional=True),
                                                             "h_n"), r(3, 6, 8), {"UNIDIRECTIONAL_SEQUENCE_LSTM": 0}),
    OpCase("gru_no_bias_time_major", lambda: Recurrent(nn.GRU(8, 12, bias=False), "h_n"), r(4, 2, 8)),
    OpCase("gru_initial_state", lambda: GRUFromState(nn.GRU(8, 12, 2, batch_first=True)),
           lambda: (torch.randn(2, 5, 8), torch.randn(2, 2, 12))),
]


class _MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]
