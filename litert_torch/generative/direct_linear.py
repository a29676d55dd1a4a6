"""Layer bodies of the direct builder (`direct.py`) for the hybrid decoders: LFM2-MoE's sigmoid router, and the
gated DeltaNet (linear attention with a recurrent state) and gated attention layers of Qwen3-Next and Qwen 3.5.
Each function appends the ops of one piece of a layer to a `graph_builder.Builder`, in the order and with the
constants Hugging Face's PyTorch code computes them; `direct.py` dispatches to them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from litert_torch import ir
from litert_torch.generative.config import LlmConfig
from litert_torch.generative.graph_builder import Builder as _Builder


# The longest run of tokens the prefill's chunk form of the gated delta rule takes at once (Hugging Face's
# `torch_chunk_gated_delta_rule` chunk size): a longer prefill chunk is taken in runs of this many, in turn.
CHUNK = 64


def sigmoid_route(b: _Builder, w: dict[str, Any], cfg: LlmConfig, flat: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """LFM2-MoE's router (`Lfm2MoeTopKRouter`) over the tokens `flat` [T, H]: each token's k experts of highest
    sigmoid(x . router) + expert_bias, their sigmoid scores (without the bias) renormalised to sum to 1 (the sum
    plus 1e-6) when `norm_topk_prob`, then times `routed_scaling_factor`. Returns the weights [T, k] and the
    chosen experts [T, k] (int32), as `direct._moe` takes them."""
    k = cfg.num_experts_per_tok
    scores = b._like("LOGISTIC", b._linear(flat, w["router"], None, "router"), what="sigmoid")
    if cfg.expert_bias:
        _, chosen = b._topk(b._add(scores, b.const(w["expert_bias"], "expert_bias")), k)
        weights = b.emit("GATHER", [scores, chosen], chosen.shape, np.float32, "gather", axis=1, batch_dims=1)
    else:
        weights, chosen = b._topk(scores, k)
    if cfg.norm_topk_prob:
        total = b._add(b._sum(weights, 1, keep_dims=True), 1e-6)
        weights = b._binary("DIV", weights, total, "div")
    if cfg.routed_scaling_factor != 1.0:
        weights = b._mul(weights, float(cfg.routed_scaling_factor))
    return weights, chosen


def linear_attention_layer(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor, window: ir.Tensor,
                           rec_state: ir.Tensor, input_pos: ir.Tensor,
                           mlp: Callable[[_Builder, dict[str, Any], LlmConfig, ir.Tensor], ir.Tensor]
                           ) -> tuple[ir.Tensor, list[ir.Tensor]]:
    """A Qwen3-Next / Qwen 3.5 "linear_attention" decoder layer: x + gated DeltaNet(norm(x)), then that plus
    `mlp` (`direct._mlp`: routed experts with a shared expert, or a dense MLP) of its norm. Returns the output
    and the two states it updated (convolution window, recurrent state)."""
    module = b.module
    b.module = f"{module}/linear_attn"
    h, window, rec_state = gated_delta_net(b, w, cfg, b._named_norm(x, w, "input", cfg), window, rec_state,
                                           input_pos)
    b.module = module
    x = b._add(x, h)
    b.module = f"{module}/mlp"
    out = mlp(b, w, cfg, b._named_norm(x, w, "post_attention", cfg))
    b.module = module
    return b._add(x, out), [window, rec_state]


def gated_delta_net(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor, window: ir.Tensor,
                    rec_state: ir.Tensor, input_pos: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """`Qwen3NextGatedDeltaNet` / `Qwen3_5GatedDeltaNet` over the normed input x [1, N, hidden].

    In a prefill chunk a token whose position is not the first position plus its index is padding (LiteRT-LM
    gives the positions past the real tokens as 0): it changes neither state. The q, k, v projections go through
    a causal depthwise convolution of K = `linear_conv_kernel` taps and SiLU, over the state `window` (the
    projections of the K - 1 tokens before, zeros before the first) followed by the chunk's; the new window is
    the last K - 1 rows up to the last real token. q and k are L2-normalised per head (eps 1e-6) and repeated to
    the value heads, q scaled by key_dim^-0.5; beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias). The
    recurrent state S [value heads, key dim, value dim] takes the tokens by the gated delta rule: a decode step
    as `torch_recurrent_gated_delta_rule` (`_recurrent_rule`), a prefill chunk in runs of at most `CHUNK` tokens
    as `torch_chunk_gated_delta_rule` (`_chunk_rule`). The outputs go through the gated RMSNorm
    (norm(o) * weight * silu(z), per value head) and out_proj."""
    _, n, _ = x.shape
    nk, nv, dk, dv = cfg.linear_key_heads, cfg.linear_value_heads, cfg.linear_key_dim, cfg.linear_value_dim
    kd, vd, taps = nk * dk, nv * dv, cfg.linear_conv_kernel
    channels = 2 * kd + vd
    qkv = b._linear(x, w["lin_qkv"], None, "in_proj_qkv")
    z = b._linear(x, w["lin_z"], None, "in_proj_z")
    beta = b._like("LOGISTIC", b._reshape(b._linear(x, w["lin_b"], None, "in_proj_b"), [n, nv]), what="sigmoid")
    a = b._reshape(b._linear(x, w["lin_a"], None, "in_proj_a"), [n, nv])

    valid = _real_tokens(b, input_pos) if n > 1 else None
    # the causal convolution over the window and the chunk: tap j of token t reads row t + j
    rows = b._concat([b._reshape(window, [taps - 1, channels]), b._reshape(qkv, [n, channels])], 0)
    conv_w = np.ascontiguousarray(w["conv_w"], np.float32)
    conv = b._mul(b._slice(rows, 0, 0, n, "tap"), b.const(conv_w[0], "conv_weight"), "tap")
    for j in range(1, taps):
        term = b._mul(b._slice(rows, 0, j, n, "tap"), b.const(conv_w[j], "conv_weight"), "tap")
        conv = b._add(conv, term, "conv")
    conv = b._act(conv, "silu")  # [N, channels]
    if valid is None:
        window = b._slice(rows, 0, 1, taps - 1, "window")
    else:  # the K - 1 rows that end at the last real token
        count = b._sum(b.emit("CAST", [valid], [n], np.int32, "count"), 0, keep_dims=True)
        last = b._add(count, b.const(np.arange(taps - 1, dtype=np.int32), "arange"), "window")
        window = b.emit("GATHER", [rows, last], [taps - 1, channels], np.float32, "window", axis=0, batch_dims=0)
    window = b._reshape(window, [1, taps - 1, channels])

    def heads(start_channel: int, count: int, dim: int) -> ir.Tensor:
        return b._reshape(b._slice(conv, 1, start_channel, count * dim, "split"), [n, count, dim])

    q, k, v = _l2norm(b, heads(0, nk, dk)), _l2norm(b, heads(kd, nk, dk)), heads(2 * kd, nv, dv)
    if nv > nk:  # each query/key head serves nv / nk consecutive value heads
        q, k = (_repeat_heads(b, t, nv // nk) for t in (q, k))
    q = b._mul(q, float(dk ** -0.5))
    g = b._mul(_softplus(b, b._add(a, b.const(np.asarray(w["dt_bias"], np.float32), "dt_bias"))),
               b.const(-np.exp(np.asarray(w["A_log"], np.float32)), "neg_A"))

    def per_head(t: ir.Tensor) -> ir.Tensor:  # [N, heads, d] -> [heads, N, d]; [N, heads] -> [heads, N, 1]
        if t.rank == 2:
            t = b._reshape(t, [n, nv, 1], "unsqueeze")
        return b._transpose(t, [1, 0, 2])

    q, k, v, g, beta = (per_head(t) for t in (q, k, v, g, beta))
    state = b._reshape(rec_state, [nv, dk, dv])
    if valid is None:
        core, state = _recurrent_rule(b, q, k, v, g, beta, state)
    else:  # in chunks of at most CHUNK tokens, as Hugging Face's prefill
        parts = []
        for first in range(0, n, CHUNK):
            size = min(CHUNK, n - first)
            cq, ck, cv, cg, cbeta = (t if size == n else b._slice(t, 1, first, size, "chunk")
                                     for t in (q, k, v, g, beta))
            mask = valid if size == n else b._slice(valid, 0, first, size, "chunk")
            part, state = _chunk_rule(b, cq, ck, cv, cg, cbeta, state, mask)
            parts.append(part)
        core = parts[0] if len(parts) == 1 else b._concat(parts, 1)
    core = b._transpose(core, [1, 0, 2])  # [N, value heads, value dim]
    normed = _gated_rms_norm(b, core, w["lin_norm"], b._reshape(z, [n, nv, dv]), cfg.rms_norm_eps)
    out = b._linear(b._reshape(normed, [1, n, vd]), w["lin_out"], None, "out_proj")
    return out, window, b._reshape(state, [1, nv, dk, dv])


def _bmm(b: _Builder, x: ir.Tensor, y: ir.Tensor, what: str, adj_y: bool = False) -> ir.Tensor:
    """x @ y (or x @ y^T) over a batch of heads."""
    shape = [*x.shape[:-1], y.shape[-2] if adj_y else y.shape[-1]]
    return b.emit("BATCH_MATMUL", [x, y], shape, np.float32, what, adj_x=False, adj_y=adj_y,
                  asymmetric_quantize_inputs=False)


def _recurrent_rule(b: _Builder, q: ir.Tensor, k: ir.Tensor, v: ir.Tensor, g: ir.Tensor, beta: ir.Tensor,
                    state: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """The gated delta rule token by token, as `torch_recurrent_gated_delta_rule` (a decode step): per head,
    S = S * exp(g); S += k (x) (v - k S) * beta; the output q S. q, k [heads, N, key dim], v [heads, N, value dim],
    g and beta [heads, N, 1], S [heads, key dim, value dim]; returns the outputs [heads, N, value dim] and S."""
    heads, n, dk = k.shape
    decay = b._like("EXP", g, what="exp")
    outs = []
    for t in range(n):
        qt, kt, vt, dt, bt = (b._slice(s, 1, t, 1, "step") for s in (q, k, v, decay, beta))
        decayed = b._mul(state, dt, "decay")
        delta = b._mul(b._binary("SUB", vt, _bmm(b, kt, decayed, "kv_mem"), "delta"), bt, "delta")
        state = b._add(decayed, b._mul(b._reshape(kt, [heads, dk, 1], "unsqueeze"), delta, "outer"), "update")
        outs.append(_bmm(b, qt, state, "read"))
    return (outs[0] if n == 1 else b._concat(outs, 1)), state


def _chunk_rule(b: _Builder, q: ir.Tensor, k: ir.Tensor, v: ir.Tensor, g: ir.Tensor, beta: ir.Tensor,
                state: ir.Tensor, valid: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """The gated delta rule over a prefill chunk at once, in the form of `torch_chunk_gated_delta_rule` with the
    whole chunk as one chunk (shapes as `_recurrent_rule`). With G the running sum of g and decay[i, j] =
    exp(G_i - G_j) for j <= i: the unit lower-triangular system L = I + strictly_lower((k beta) k^T * decay) is
    inverted as the product of (I + P), (I + P^2), (I + P^4), ... with P = I - L (exact, since P is nilpotent: a
    few matrix products where a triangular solve takes a step per token); u = L^-1 (v beta),
    w = L^-1 (k beta exp(G)); v' = u - w S; the outputs (q exp(G)) S + (q k^T * decay) v'; the new
    S = S exp(G_last) + (k exp(G_last - G))^T v'. A padding token (`valid` false) gets beta = 0 and g = 0, which
    leaves S as it was."""
    heads, n, dk = k.shape
    real = b._reshape(b.emit("CAST", [valid], [n], np.float32, "valid"), [1, n, 1])
    beta, g = b._mul(beta, real, "mask_padding"), b._mul(g, real, "mask_padding")
    total = b.emit("CUMSUM", [g, b.const(np.array(1, np.int32), "axis")], g.shape, np.float32, "cumsum",
                   exclusive=False, reverse=False)  # G [heads, N, 1]
    rows, cols = np.indices((n, n))
    lower = b.const((rows >= cols)[None], "tril")
    strict = b.const((rows > cols)[None], "strict_tril")
    zero = b.scalar(0.0)
    diff = b._binary("SUB", total, b._reshape(total, [heads, 1, n]), "pairwise")  # G_i - G_j
    diff = b.emit("SELECT_V2", [lower, diff, zero], diff.shape, np.float32, "where")
    decay = b.emit("SELECT_V2", [lower, b._like("EXP", diff, what="exp"), zero], diff.shape, np.float32, "where")
    k_beta = b._mul(k, beta, "k_beta")
    system = b._mul(_bmm(b, k_beta, k, "ut_system", adj_y=True), decay, "ut_system")
    power = b._mul(b.emit("SELECT_V2", [strict, system, zero], system.shape, np.float32, "where"), -1.0, "neg")
    eye = b.const(np.eye(n, dtype=np.float32)[None], "eye")
    inverse = b._add(power, eye, "inverse")
    for _ in range(max(0, int(np.ceil(np.log2(n))) - 1)):
        power = _bmm(b, power, power, "power")
        inverse = b._add(inverse, _bmm(b, inverse, power, "inverse"), "inverse")
    grown = b._like("EXP", total, what="exp")  # exp(G)
    u = _bmm(b, inverse, b._mul(v, beta, "v_beta"), "new_values")
    w = _bmm(b, inverse, b._mul(k_beta, grown, "decayed_k_beta"), "k_cumdecay")
    v_new = b._binary("SUB", u, _bmm(b, w, state, "v_prime"), "v_new")
    inter = _bmm(b, b._mul(q, grown, "q_decayed"), state, "inter_chunk")
    intra = _bmm(b, b._mul(_bmm(b, q, k, "intra_chunk", adj_y=True), decay, "intra_chunk"), v_new, "intra_chunk")
    last = b._slice(total, 1, n - 1, 1, "last")  # G at the last token (padding adds 0)
    k_scaled = b._mul(k, b._like("EXP", b._binary("SUB", last, total, "sub"), what="exp"), "k_decayed")
    update = _bmm(b, b._transpose(k_scaled, [0, 2, 1]), v_new, "state_update")
    state = b._add(b._mul(state, b._like("EXP", last, what="exp"), "decay"), update, "update")
    return b._add(inter, intra, "core"), state


def _rsqrt(b: _Builder, x: ir.Tensor) -> ir.Tensor:
    """1 / sqrt(x) of an x at least 2^-100, scaled so that RSQRT never sees a value past its range (as
    `direct._Builder._rms_norm`)."""
    return b._mul(b._like("RSQRT", b._mul(x, 2.0 ** -8, "rsqrt"), what="rsqrt"), 2.0 ** -4, "rsqrt")


def _l2norm(b: _Builder, x: ir.Tensor) -> ir.Tensor:
    """x * rsqrt(sum(x^2) + 1e-6) over the last axis (Hugging Face's `l2norm`)."""
    return b._mul(x, _rsqrt(b, b._add(b._sum(b._mul(x, x, "pow"), x.rank - 1, keep_dims=True), 1e-6)), "l2norm")


def _repeat_heads(b: _Builder, x: ir.Tensor, times: int) -> ir.Tensor:
    """[N, H, D] -> [N, H * times, D], each head repeated `times` times in place (`repeat_interleave`)."""
    n, heads, d = x.shape
    wide = b.emit("BROADCAST_TO", [b._reshape(x, [n, heads, 1, d], "unsqueeze"),
                                   b.const(np.array([n, heads, times, d], np.int32), "shape")],
                  [n, heads, times, d], np.float32, "repeat_interleave")
    return b._reshape(wide, [n, heads * times, d], "repeat_interleave")


def _softplus(b: _Builder, x: ir.Tensor) -> ir.Tensor:
    """log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)), which never overflows (PyTorch's softplus returns x past
    20, where this rounds to x in float32)."""
    tail = b._like("EXP", b._mul(b._like("ABS", x, what="abs"), -1.0, "neg"), what="exp")
    return b._add(b._binary("MAXIMUM", x, 0.0), b._like("LOG", b._add(tail, 1.0), what="log"), "softplus")


def _gated_rms_norm(b: _Builder, x: ir.Tensor, weight: Any, gate: ir.Tensor, eps: float) -> ir.Tensor:
    """`Qwen3NextRMSNormGated`: weight * (x * rsqrt(mean(x^2) + eps)) * silu(gate) over the last axis (the weight
    as it is, not 1 + weight)."""
    mean = b.emit("MEAN", [b._mul(x, x, "pow"), b.const(np.array([x.rank - 1], np.int32), "axes")],
                  [*x.shape[:-1], 1], np.float32, "mean", keep_dims=True)
    normed = b._mul(x, _rsqrt(b, b._add(mean, float(eps))), "mul")
    normed = b._mul(b.const(np.asarray(weight, np.float32), "norm_weight"), normed, "norm")
    return b._mul(normed, b._act(gate, "silu"), "gate")


def _real_tokens(b: _Builder, input_pos: ir.Tensor) -> ir.Tensor:
    """Which tokens of a prefill chunk are real: those whose position is the chunk's first plus their index."""
    n = input_pos.shape[0]
    expected = b._add(b._slice(input_pos, 0, 0, 1), b.const(np.arange(n, dtype=np.int32), "arange"))
    return b.emit("EQUAL", [input_pos, expected], [n], np.bool_, "eq")
