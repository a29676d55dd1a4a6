"""Layer bodies of the direct builder (`direct.py`) for the hybrid decoders: LFM2-MoE's sigmoid router, and the
gated DeltaNet (linear attention with a recurrent state) and gated attention layers of Qwen3-Next and Qwen 3.5.
Each function appends the ops of one piece of a layer to a `direct._Builder`, in the order and with the
constants Hugging Face's PyTorch code computes them; `direct.py` dispatches to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from litert_torch import ir
from litert_torch.generative.config import LlmConfig

if TYPE_CHECKING:
    from litert_torch.generative.direct import _Builder


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
