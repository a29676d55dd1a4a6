"""What the exporter needs to know of a Hugging Face causal LM, read from its config and checked before any work.

`LlmConfig.from_hf(config)` accepts the architectures the exporter builds (`ARCHITECTURES`) and refuses, naming
the config field, every option it does not reproduce exactly: an unknown RoPE scaling type, attention logit
soft-capping, a bidirectional mask, an activation other than the ones the decoder layers implement. A refusal
happens before any weight is read or anything is written.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from litert_torch.errors import ConversionError
from litert_torch.generative.weights import ModelSourceError

log = logging.getLogger("litert_torch")


class UnsupportedModelError(ConversionError):
    """A Hugging Face model whose architecture or configuration the LLM exporter does not reproduce; the message
    names the config field and the value."""


# model_type -> the family whose decoder layer it uses.
ARCHITECTURES = {
    "llama": "llama",
    "smollm3": "llama",
    "mistral": "llama",
    "granite": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "mixtral": "mixtral",
    "qwen2_moe": "qwen2_moe",
    "phi3": "phi3",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
    "phi": "phi",
    "stablelm": "stablelm",
    "olmo2": "olmo2",
    "olmo3": "olmo3",
    "lfm2": "lfm2",
    "lfm2_moe": "lfm2",
    "gpt_oss": "gpt_oss",
    "qwen3_next": "qwen3_next",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "qwen3_5": "qwen3_5",  # (the image+text model: its language model)
    "qwen3_5_moe": "qwen3_5",
    "gemma4_text": "gemma4",
    "gemma3n_text": "gemma3n",
}
# Families only the direct builder (`direct.py`) builds: the traced builder (`model.py`) refuses them.
DIRECT_ONLY = ("phi", "stablelm", "olmo2", "olmo3", "lfm2", "gpt_oss", "qwen3_next", "qwen3_5", "gemma4",
               "gemma3n")
# Families with gated DeltaNet layers ("linear_attention": a recurrent state updated by the gated delta rule)
# between gated full-attention layers
LINEAR_ATTENTION = ("qwen3_next", "qwen3_5")
# OLMo 2 and 3: norms on the attention's and MLP's outputs, q/k RMSNorm over the whole projections
OLMO = ("olmo2", "olmo3")
# Families whose rope_parameters may hold one RoPE per layer type
ROPE_PER_LAYER_TYPE = ("gemma3", "olmo3", "gemma4", "gemma3n")
# Families whose norms are LayerNorm (with a bias), their epsilon `layer_norm_eps`.
LAYER_NORM = ("phi", "stablelm")
# Families whose default RoPE rotates `partial_rotary_factor` of each head's features.
PARTIAL_ROTARY = ("phi3", "phi", "stablelm", *LINEAR_ATTENTION)
GEMMA = ("gemma", "gemma2", "gemma3")  # RMSNorm scaling by (1 + weight), embeddings scaled by sqrt(hidden)
# Gemma 4 and Gemma 3n text decoders: RMSNorm scaling by the weight itself, RMSNorm on values too, per-layer
# embeddings, key/value caches shared by the last layers (built by `direct_gemma.py`)
PLE_GEMMA = ("gemma4", "gemma3n")
# Families whose activation is config.hidden_activation
_HIDDEN_ACTIVATION = ("gemma2", "gemma3", "gemma4", "gemma3n")

# RoPE types whose tables depend only on the config (not on the sequence length seen at run time).
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "proportional")
# RoPE types whose tables change once the sequence grows past a length: static while the cache holds no more
# (Hugging Face switches LongRoPE's short factors for its long ones, and rescales dynamic NTK, past that length).
BOUNDED_ROPE_TYPES = ("longrope", "dynamic")

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                "gelu": "gelu"}


@dataclass
class LlmConfig:
    """The decoder as the exporter builds it. Sizes follow Hugging Face's names where they exist."""

    model_type: str
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float  # the norms' epsilon (`layer_norm_eps` where they are LayerNorm)
    activation: str  # "silu", "gelu_tanh" or "gelu"
    tie_word_embeddings: bool
    attention_scale: float
    attn_softcap: float | None = None  # Gemma 2 and 3: scores -> tanh(scores / cap) * cap before the mask
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # a norm on each query and key head
    qk_norm_whole: bool = False  # OLMo 2: the query and key norms over the whole projections instead
    layer_norm: bool = False  # Phi, StableLM: LayerNorm with a bias rather than RMSNorm
    parallel_residual: bool = False  # Phi, StableLM: attention and MLP both read the input norm's output
    gated_mlp: bool = True  # False for Phi: fc2(act(fc1(x)))
    lm_head_bias: bool = False  # Phi
    post_norms: bool = False  # OLMo 2: norms on the attention's and the MLP's outputs, none on their inputs
    conv_kernel: int = 0  # LFM2: the window of its gated short convolutions ("conv" layers)
    conv_bias: bool = False
    attention_sinks: bool = False  # gpt-oss: a learned logit per head in every softmax of attention
    swiglu_limit: float | None = None  # gpt-oss experts: gate clamped to <= limit, up to [-limit, limit]
    swiglu_alpha: float = 1.0  # gpt-oss experts: glu = gate * sigmoid(alpha * gate); out = (up + 1) * glu
    norm_plus_one: bool = False  # Gemma: RMSNorm scales by (1 + weight)
    sandwich_norms: bool = False  # Gemma: norms after attention and MLP too
    embed_scale: float | None = None
    residual_scale: float | None = None  # Granite: each block's output times residual_multiplier
    logit_divisor: float | None = None  # Granite: the logits divided by logits_scaling
    layer_types: list[str] = field(default_factory=list)  # "full_attention" / "sliding_attention" per layer
    sliding_window: int | None = None
    final_logit_softcap: float | None = None
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # Qwen2-MoE: a shared expert MLP added to the routed experts' output
    norm_topk_prob: bool = False
    # LFM2-MoE's router: sigmoid scores, the top k chosen by score + a per-expert bias (`expert_bias`), the chosen
    # scores renormalised (sum + 1e-6) when `norm_topk_prob`, then times `routed_scaling_factor`
    router_sigmoid: bool = False
    expert_bias: bool = False
    routed_scaling_factor: float = 1.0
    moe_layers: list[bool] = field(default_factory=list)
    # Qwen3-Next, Qwen 3.5: the query projection also gives a gate per feature, attention's output * sigmoid(gate)
    attn_output_gate: bool = False
    # Qwen3-Next, Qwen 3.5 "linear_attention" layers (gated DeltaNet): `linear_conv_kernel` taps of causal
    # convolution over the q, k, v projections; `linear_key_heads` query/key heads of `linear_key_dim` features,
    # `linear_value_heads` value heads (a multiple of the key heads) of `linear_value_dim`
    linear_conv_kernel: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    # where the decoder's weights are named (a Qwen 3.5 image+text checkpoint's language model:
    # "model.language_model."); the output layer is `lm_head` in any case
    weight_prefix: str = "model."
    rope_layers: list[bool] = field(default_factory=list)  # False where a layer has no RoPE (SmolLM3's NoPE layers)
    # The longest cache whose RoPE tables Hugging Face computes as for any shorter one (LongRoPE, dynamic NTK):
    # (limit, the config field that sets it), or None when the tables never change.
    rope_limit: tuple[int, str] | None = None
    # Gemma 4 and Gemma 3n (`PLE_GEMMA`; `gemma_text_fields` reads them)
    v_norm: bool = False  # an RMSNorm without a scale on each value head
    layer_head_dims: list[int] = field(default_factory=list)  # per layer, where layers differ (Gemma 4)
    layer_kv_heads: list[int] = field(default_factory=list)  # per layer, where layers differ (Gemma 4)
    layer_intermediate_sizes: list[int] = field(default_factory=list)  # per layer, where layers differ
    kv_owners: list[int] = field(default_factory=list)  # per layer, the layer whose caches it attends over
    k_eq_v_layers: list[bool] = field(default_factory=list)  # Gemma 4: values taken from the key projection
    per_layer_input_size: int = 0  # the per-layer embeddings' width per layer (0: none)
    per_layer_vocab_size: int = 0
    altup_inputs: int = 0  # Gemma 3n: AltUp's streams (0: no AltUp)
    altup_active: int = 0
    altup_correct_scale: bool = False
    laurel_rank: int = 0  # Gemma 3n: LAuReL's rank (0: none)
    activation_sparsity: list[float] = field(default_factory=list)  # Gemma 3n: per layer, 0 where dense
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int | None = None
    max_position_embeddings: int | None = None

    @property
    def attention_types(self) -> list[str]:
        """The layer types that attend over a KV cache (every type but LFM2's "conv" and the gated DeltaNet
        "linear_attention"), sorted."""
        return sorted(set(t for t in self.layer_types if t not in ("conv", "linear_attention")))

    def has_rope(self, layer: int) -> bool:
        return self.rope_layers[layer] if self.rope_layers else True

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    def layer_head_dim(self, layer: int) -> int:
        return self.layer_head_dims[layer] if self.layer_head_dims else self.head_dim

    def layer_kv_head_count(self, layer: int) -> int:
        return self.layer_kv_heads[layer] if self.layer_kv_heads else self.num_kv_heads

    def layer_intermediate_size(self, layer: int) -> int:
        return self.layer_intermediate_sizes[layer] if self.layer_intermediate_sizes else self.intermediate_size

    def kv_owner(self, layer: int) -> int:
        """The layer whose key and value caches `layer` attends over: itself, or for Gemma 4 and 3n's last
        layers the last earlier layer of its type that writes a cache."""
        return self.kv_owners[layer] if self.kv_owners else layer

    @classmethod
    def _language_model(cls, get, model_type: str) -> "LlmConfig":
        """The language model of a Qwen 3.5 image+text checkpoint: its `text_config`, its weights under
        `model.language_model.` (the output layer `lm_head`), tied as the top-level `tie_word_embeddings` says."""
        text = get("text_config")
        if text is None:
            raise UnsupportedModelError(f"config.text_config is missing ({model_type})")
        if not isinstance(text, dict):
            text = text.to_dict() if hasattr(text, "to_dict") else dict(vars(text))
        text = {**text, "model_type": f"{model_type}_text"}
        if get("tie_word_embeddings") is not None:
            text["tie_word_embeddings"] = get("tie_word_embeddings")
        cfg = cls.from_hf(text)
        cfg.weight_prefix = "model.language_model."
        return cfg

    @classmethod
    def from_hf(cls, config: Any) -> "LlmConfig":
        """Read a transformers config (a PretrainedConfig or its dict); raise UnsupportedModelError naming the
        field for anything the exporter would not reproduce exactly."""
        if not isinstance(config, dict) and getattr(config, "model_type", None) == "gemma4_text":
            # Gemma 4's config object refuses to give a field that its layers may override (head_dim,
            # num_key_value_heads); its dict gives the global value and the overrides of each layer
            config = config.to_dict()
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        model_type = get("model_type")
        wrappers = {"gemma3": ("image+text", "Gemma3"), "gemma3n": ("image+audio+text", "Gemma3n"),
                    "gemma4": ("image+audio+text", "Gemma4")}
        if model_type in wrappers:  # the multimodal wrapper: its text config is the language model
            what, name = wrappers[model_type]
            raise UnsupportedModelError(
                f"config.model_type is {model_type!r} (the {what} model); export its language model "
                f"({name}ForCausalLM with a {name}TextConfig, model_type '{model_type}_text')")
        if model_type in ("qwen3_5", "qwen3_5_moe"):  # the image+text model: its language model, text_config
            return cls._language_model(get, model_type)
        if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
            raise UnsupportedModelError(
                f"config.model_type {model_type!r} is not an architecture the LLM exporter builds; supported: "
                f"{', '.join(sorted(ARCHITECTURES))}")
        family = ARCHITECTURES[model_type]

        def need(key: str) -> Any:
            value = get(key)
            if value is None:
                raise UnsupportedModelError(f"config.{key} is missing ({model_type})")
            return value

        def count(key: str, default: Any = None, minimum: int = 1) -> int:
            value = get(key)
            if value is None and default is not None:
                return default
            return integer(key, need(key), minimum)

        hidden, heads = count("hidden_size"), count("num_attention_heads")
        kv_heads = count("num_key_value_heads", heads)
        head_dim = count("head_dim", hidden // heads)
        if heads % kv_heads:
            raise UnsupportedModelError(f"config.num_attention_heads ({heads}) is not a multiple of "
                                        f"config.num_key_value_heads ({kv_heads})")
        act_key = "hidden_activation" if family in _HIDDEN_ACTIVATION else "hidden_act"
        act = "silu" if family == "lfm2" else get(act_key) or get("hidden_act")  # LFM2's MLP is SwiGLU always
        if act not in _ACTIVATIONS:
            raise UnsupportedModelError(f"config.{act_key} {act!r} is not supported; supported: "
                                        f"{', '.join(_ACTIVATIONS)}")
        layers = count("num_hidden_layers")
        rope_limit = _check_rope(get, family)
        softcap = get("attn_logit_softcapping")
        if softcap is not None and family not in ("gemma2", "gemma3"):
            raise UnsupportedModelError(f"config.attn_logit_softcapping = {softcap!r}: the {model_type} "
                                        "architecture has no attention logit soft-capping")
        if get("use_bidirectional_attention") and not (family == "gemma4"
                                                       and get("use_bidirectional_attention") == "vision"):
            # (Gemma 4's "vision" makes only image tokens attend both ways: its text decoder is causal)
            raise UnsupportedModelError("config.use_bidirectional_attention is set: the exporter builds causal "
                                        "decoders only")
        if get("pretraining_tp", 1) not in (1, None):
            raise UnsupportedModelError(f"config.pretraining_tp = {get('pretraining_tp')}: only 1 is supported")

        layer_types = _strings("layer_types", get("layer_types")) or ["full_attention"] * layers
        if len(layer_types) != layers:
            raise UnsupportedModelError(f"config.layer_types has {len(layer_types)} entries for {layers} layers")
        known = {"full_attention", "sliding_attention", *(("conv",) if family == "lfm2" else ()),
                 *(("linear_attention",) if family in LINEAR_ATTENTION else ())}
        unknown = sorted(set(layer_types) - known)
        if unknown:
            raise UnsupportedModelError(f"config.layer_types holds {unknown}: only {', '.join(sorted(known))} "
                                        "layers are supported")
        rope_layers = [True] * layers
        if model_type == "smollm3":
            # SmolLM3 leaves RoPE out of the layers no_rope_layers marks 0, and slides its window only when
            # use_sliding_window is set
            flags = get("no_rope_layers")
            if flags is not None:
                if len(flags) != layers:
                    raise UnsupportedModelError(f"config.no_rope_layers has {len(flags)} entries for {layers} "
                                                "layers")
                rope_layers = [bool(integer("no_rope_layers[]", f, 0)) for f in _sequence("no_rope_layers", flags)]
            if not get("use_sliding_window"):
                layer_types = ["full_attention"] * layers
        window = get("sliding_window")
        if family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "mixtral") or model_type == "mistral":
            # These read sliding_window only where use_sliding_window / layer_types say so.
            if family in ("phi3", "mixtral") or model_type == "mistral":
                if window is not None:
                    layer_types = ["sliding_attention"] * layers
        if "sliding_attention" in layer_types and not window:
            raise UnsupportedModelError("config.layer_types names sliding_attention layers but "
                                        "config.sliding_window is not set")

        scale = head_dim ** -0.5
        if family in PLE_GEMMA:  # their attention does not scale the scores
            scale = 1.0
        elif family in ("gemma2", "gemma3"):
            scale = number("query_pre_attn_scalar", need("query_pre_attn_scalar"), positive=True) ** -0.5
        embed_scale = hidden ** 0.5 if family in GEMMA + PLE_GEMMA else None
        residual_scale = logit_divisor = None
        if model_type == "granite":  # Llama with a multiplier at each of these places
            scale = number("attention_multiplier", need("attention_multiplier"))
            embed_scale = number("embedding_multiplier", need("embedding_multiplier"))
            residual_scale = number("residual_multiplier", need("residual_multiplier"))
            logit_divisor = number("logits_scaling", need("logits_scaling"))
            if logit_divisor == 0:
                raise ModelSourceError("config.logits_scaling = 0: the logits are divided by it")
        cfg = cls(
            model_type=model_type,
            family=family,
            vocab_size=count("vocab_size"),
            hidden_size=hidden,
            intermediate_size=(_intermediate_size(get, family, count("intermediate_size"))
                               if family != "gemma3n" else 0),  # Gemma 3n's: a list, read below
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=_norm_eps(get, family),
            activation=_ACTIVATIONS[act],
            tie_word_embeddings=bool(get("tie_word_embeddings", False)),
            attention_scale=scale,
            attn_softcap=number("attn_logit_softcapping", softcap, positive=True) if softcap is not None else None,
            qkv_bias=(bool(get("attention_bias", False)) or family in ("qwen2", "qwen2_moe", "phi")
                      or (family == "stablelm" and bool(get("use_qkv_bias", False)))),
            o_bias=(bool(get("attention_bias", False)) and family not in ("qwen2", "qwen2_moe")) or family == "phi",
            mlp_bias=bool(get("mlp_bias", False)),
            qk_norm=(family in ("qwen3", "qwen3_moe", "gemma3", "lfm2", *OLMO, *LINEAR_ATTENTION,
                             *PLE_GEMMA)
                     or (family in LAYER_NORM and bool(get("qk_layernorm", False)))),
            qk_norm_whole=family in OLMO,
            layer_norm=family in LAYER_NORM,
            parallel_residual=(family == "phi"
                               or (family == "stablelm" and bool(get("use_parallel_residual", False)))),
            gated_mlp=family != "phi",
            lm_head_bias=family == "phi",
            post_norms=family in OLMO,
            conv_kernel=count("conv_L_cache") if family == "lfm2" else 0,
            conv_bias=family == "lfm2" and bool(get("conv_bias", False)),
            norm_plus_one=family in GEMMA or family in LINEAR_ATTENTION,
            sandwich_norms=family in ("gemma2", "gemma3", *PLE_GEMMA),
            embed_scale=embed_scale,
            residual_scale=residual_scale,
            logit_divisor=logit_divisor,
            layer_types=layer_types,
            sliding_window=integer("sliding_window", window) if window and "sliding_attention" in layer_types
            else None,
            final_logit_softcap=(number("final_logit_softcapping", get("final_logit_softcapping"), positive=True)
                                 if get("final_logit_softcapping") else None),
            bos_token_id=get("bos_token_id"),
            eos_token_ids=token_ids(get("eos_token_id"), "config.eos_token_id"),
            pad_token_id=get("pad_token_id"),
            max_position_embeddings=get("max_position_embeddings"),
            rope_limit=rope_limit,
            rope_layers=rope_layers,
        )
        if family == "gpt_oss":  # experts of intermediate_size: softmax over the top-k router logits
            cfg.num_experts = count("num_local_experts")
            cfg.num_experts_per_tok = count("num_experts_per_tok")
            cfg.moe_intermediate_size = cfg.intermediate_size
            cfg.norm_topk_prob = True
            cfg.moe_layers = [True] * layers
            cfg.attention_sinks = True
            cfg.swiglu_limit = number("swiglu_limit", need("swiglu_limit"), positive=True)
            cfg.swiglu_alpha = number("swiglu_alpha", need("swiglu_alpha"))
        elif model_type == "lfm2_moe":  # the MLPs past the first num_dense_layers: sigmoid-routed experts
            cfg.num_experts = count("num_experts")
            cfg.num_experts_per_tok = count("num_experts_per_tok")
            cfg.moe_intermediate_size = count("moe_intermediate_size")
            cfg.norm_topk_prob = bool(get("norm_topk_prob", True))
            cfg.router_sigmoid = True
            cfg.expert_bias = bool(get("use_expert_bias", True))
            cfg.routed_scaling_factor = number("routed_scaling_factor", get("routed_scaling_factor", 1.0))
            dense = count("num_dense_layers", 2, minimum=0)  # (2 is the config class's default)
            cfg.moe_layers = [i >= dense for i in range(layers)]
        elif family == "mixtral":  # every layer's MLP: experts of intermediate_size, top-k weights renormalized
            cfg.num_experts = count("num_local_experts")
            cfg.num_experts_per_tok = count("num_experts_per_tok")
            cfg.moe_intermediate_size = cfg.intermediate_size
            cfg.norm_topk_prob = True
            cfg.moe_layers = [cfg.num_experts > 0] * layers
        elif model_type == "qwen3_5_moe_text":  # every MLP: routed experts (renormalised) and a shared expert
            cfg.shared_expert_intermediate_size = count("shared_expert_intermediate_size", minimum=0)
            cfg.num_experts = count("num_experts")
            cfg.num_experts_per_tok = count("num_experts_per_tok")
            cfg.moe_intermediate_size = count("moe_intermediate_size")
            cfg.norm_topk_prob = True
            cfg.moe_layers = [True] * layers
        elif family in ("qwen3_moe", "qwen2_moe", "qwen3_next"):
            if family in ("qwen2_moe", "qwen3_next"):  # a shared expert beside the routed ones, gated by sigmoid(x . g)
                cfg.shared_expert_intermediate_size = count("shared_expert_intermediate_size", minimum=0)
            cfg.num_experts = count("num_experts")
            cfg.num_experts_per_tok = count("num_experts_per_tok")
            cfg.moe_intermediate_size = count("moe_intermediate_size")
            cfg.norm_topk_prob = bool(get("norm_topk_prob", False))
            step = count("decoder_sparse_step", 1)
            mlp_only = {integer("mlp_only_layers[]", i, 0)
                        for i in _sequence("mlp_only_layers", get("mlp_only_layers"))}
            cfg.moe_layers = [i not in mlp_only and cfg.num_experts > 0 and (i + 1) % step == 0 for i in range(layers)]
        else:
            cfg.moe_layers = [False] * layers
        if family in LINEAR_ATTENTION:
            _linear_attention(cfg, count, get)
        if family in PLE_GEMMA:
            gemma_text_fields(cfg, get, config)
        if any(cfg.moe_layers) and cfg.num_experts_per_tok > cfg.num_experts:
            raise ModelSourceError(f"config.num_experts_per_tok = {cfg.num_experts_per_tok} is more than the "
                                        f"{cfg.num_experts} experts")
        return cfg


def _linear_attention(cfg: LlmConfig, count, get) -> None:
    """Qwen3-Next's and Qwen 3.5's gated DeltaNet sizes and their gated attention, read into `cfg`."""
    cfg.attn_output_gate = True
    cfg.linear_conv_kernel = count("linear_conv_kernel_dim")
    if cfg.linear_conv_kernel < 2:
        raise UnsupportedModelError(f"config.linear_conv_kernel_dim = {cfg.linear_conv_kernel}: the exporter keeps "
                                    "the convolution's last kernel - 1 inputs as a state, and needs a kernel of 2 "
                                    "or more")
    cfg.linear_key_heads = count("linear_num_key_heads")
    cfg.linear_value_heads = count("linear_num_value_heads")
    cfg.linear_key_dim = count("linear_key_head_dim")
    cfg.linear_value_dim = count("linear_value_head_dim")
    if cfg.linear_value_heads % cfg.linear_key_heads:
        raise UnsupportedModelError(f"config.linear_num_value_heads ({cfg.linear_value_heads}) is not a multiple of "
                                    f"config.linear_num_key_heads ({cfg.linear_key_heads})")
    if cfg.activation != "silu":  # the convolution's activation, and the gated norm's (always SiLU)
        raise UnsupportedModelError(f"config.hidden_act {get('hidden_act')!r}: the gated DeltaNet layers of "
                                    f"{cfg.model_type} are built with silu only")


def gemma_text_fields(cfg: LlmConfig, get, config: Any) -> None:
    """Read Gemma 4's and Gemma 3n's own fields into `cfg`: per-layer embeddings, the layers sharing caches
    (`num_kv_shared_layers`: each of the last layers attends over the caches of the last earlier layer of its
    type), Gemma 4's head sizes and key/value heads per layer (`per_layer_config`, `attention_k_eq_v`) and its
    double-wide MLPs on the sharing layers and its mixture-of-experts block beside every MLP
    (`enable_moe_block`: `num_experts`, `top_k_experts`, `moe_intermediate_size`), Gemma 3n's AltUp, LAuReL and
    activation sparsity."""
    layers, family = cfg.num_layers, cfg.family
    cfg.v_norm = True
    cfg.per_layer_input_size = integer("hidden_size_per_layer_input", get("hidden_size_per_layer_input") or 0, 0)
    if cfg.per_layer_input_size:
        cfg.per_layer_vocab_size = integer("vocab_size_per_layer_input", get("vocab_size_per_layer_input"))
        if family == "gemma4" and cfg.per_layer_vocab_size < cfg.vocab_size:
            raise UnsupportedModelError(
                f"config.vocab_size_per_layer_input = {cfg.per_layer_vocab_size} is below config.vocab_size = "
                f"{cfg.vocab_size}: Gemma 4 looks every token up in the per-layer table, and Hugging Face's model "
                "fails on the tokens past it")
    shared = integer("num_kv_shared_layers", get("num_kv_shared_layers") or 0, 0)
    first_shared = layers - shared
    if shared and first_shared <= 0:
        raise UnsupportedModelError(f"config.num_kv_shared_layers = {shared}: every layer would read a cache that "
                                    "no layer writes")
    owners = list(range(layers))
    for i in range(first_shared, layers):
        earlier = [j for j in range(first_shared) if cfg.layer_types[j] == cfg.layer_types[i]]
        if not earlier:
            raise ModelSourceError(f"config.num_kv_shared_layers = {shared}: layer {i} "
                                   f"({cfg.layer_types[i]}) has no earlier layer of its type to share caches with")
        owners[i] = earlier[-1]
    cfg.kv_owners = owners
    if family == "gemma4":
        if get("enable_moe_block"):  # every layer: routed experts beside its MLP, top-k weights renormalized
            cfg.num_experts = integer("num_experts", get("num_experts"))
            cfg.num_experts_per_tok = integer("top_k_experts", get("top_k_experts"))
            cfg.moe_intermediate_size = integer("moe_intermediate_size", get("moe_intermediate_size"))
            if cfg.num_experts_per_tok > cfg.num_experts:
                raise ModelSourceError(f"config.top_k_experts = {cfg.num_experts_per_tok} is more than the "
                                       f"{cfg.num_experts} experts")
            cfg.norm_topk_prob = True
            cfg.moe_layers = [True] * layers
        dims, kv_heads = [], []
        for i in range(layers):
            head_dim, kv = _gemma4_layer_attention(cfg, get, config, i)
            dims.append(head_dim)
            kv_heads.append(kv)
            if cfg.num_heads % kv:
                raise UnsupportedModelError(f"config.num_attention_heads ({cfg.num_heads}) is not a multiple of "
                                            f"layer {i}'s {kv} key/value heads")
        cfg.layer_head_dims, cfg.layer_kv_heads = dims, kv_heads
        cfg.k_eq_v_layers = [bool(get("attention_k_eq_v")) and t != "sliding_attention" for t in cfg.layer_types]
        wide = bool(get("use_double_wide_mlp"))
        cfg.layer_intermediate_sizes = [cfg.intermediate_size * (2 if wide and owners[i] != i else 1)
                                        for i in range(layers)]
        return
    sizes = get("intermediate_size")
    sizes = [sizes] * layers if not isinstance(sizes, (list, tuple)) else list(sizes)
    if len(sizes) != layers:
        raise ModelSourceError(f"config.intermediate_size has {len(sizes)} entries for {layers} layers")
    cfg.layer_intermediate_sizes = [integer("intermediate_size[]", n) for n in sizes]
    cfg.intermediate_size = max(cfg.layer_intermediate_sizes)
    cfg.altup_inputs = integer("altup_num_inputs", get("altup_num_inputs"))
    cfg.altup_active = integer("altup_active_idx", get("altup_active_idx"), 0)
    if cfg.altup_active >= cfg.altup_inputs:
        raise ModelSourceError(f"config.altup_active_idx = {cfg.altup_active}: AltUp has {cfg.altup_inputs} "
                               "streams")
    cfg.altup_correct_scale = bool(get("altup_correct_scale"))
    cfg.laurel_rank = integer("laurel_rank", get("laurel_rank"))
    sparsity = get("activation_sparsity_pattern")
    sparsity = [sparsity] * layers if not isinstance(sparsity, (list, tuple)) else list(sparsity)
    if len(sparsity) != layers:
        raise ModelSourceError(f"config.activation_sparsity_pattern has {len(sparsity)} entries for {layers} "
                               "layers")
    cfg.activation_sparsity = [number("activation_sparsity_pattern[]", s, minimum=0.0) for s in sparsity]
    if any(s >= 1.0 for s in cfg.activation_sparsity):
        raise ModelSourceError(f"config.activation_sparsity_pattern = {sparsity!r}: each entry must be below 1")


def _gemma4_layer_attention(cfg: LlmConfig, get, config: Any, layer: int) -> tuple[int, int]:
    """Gemma 4 layer `layer`'s head size and key/value heads: the config's, overridden by its `per_layer_config`
    (which Gemma4TextConfig fills for the full-attention layers with `global_head_dim`, and with
    `num_global_key_value_heads` when `attention_k_eq_v`)."""
    per_layer = getattr(config, "per_layer_config", None) if not isinstance(config, dict) \
        else config.get("per_layer_config")
    if per_layer is not None and not isinstance(per_layer, dict):  # transformers' view of the overrides
        view = per_layer[layer]
        return (integer("per_layer_config.head_dim", view.head_dim),
                integer("per_layer_config.num_key_value_heads", view.num_key_value_heads))
    overrides: dict = {}
    if isinstance(per_layer, dict):
        overrides = per_layer.get(str(layer)) or per_layer.get(layer) or {}
    elif cfg.layer_types[layer] == "full_attention":  # as Gemma4TextConfig fills per_layer_config
        overrides = {"head_dim": get("global_head_dim") or 512}
        if get("attention_k_eq_v") and get("num_global_key_value_heads") is not None:
            overrides["num_key_value_heads"] = get("num_global_key_value_heads")
    return (integer("per_layer_config.head_dim", overrides.get("head_dim", cfg.head_dim)),
            integer("per_layer_config.num_key_value_heads", overrides.get("num_key_value_heads",
                                                                            cfg.num_kv_heads)))


def _intermediate_size(get, family: str, size: int) -> int:
    """The MLP's inner size: `intermediate_size`, which LFM2 (not LFM2-MoE) adjusts as its MLP does (2/3 of it, times
    `block_ffn_dim_multiplier`, rounded up to a multiple of `block_multiple_of`) when `block_auto_adjust_ff_dim`."""
    if family != "lfm2" or get("model_type") == "lfm2_moe" or not get("block_auto_adjust_ff_dim", True):
        return size  # (LFM2-MoE's dense MLPs take intermediate_size as it is)
    size = int(2 * size / 3)
    multiplier = get("block_ffn_dim_multiplier")
    if multiplier is not None:
        multiple = integer("block_multiple_of", get("block_multiple_of", 256))
        size = int(number("block_ffn_dim_multiplier", multiplier, positive=True) * size)
        size = multiple * ((size + multiple - 1) // multiple)
    return size


def _norm_eps(get, family: str) -> float:
    """The norms' epsilon: `layer_norm_eps` for LayerNorm families, else `rms_norm_eps` (1e-6 when unset)."""
    if family in LAYER_NORM:
        key, value = "layer_norm_eps", get("layer_norm_eps")
    elif family == "lfm2":
        key, value = "norm_eps", get("norm_eps")
    else:
        key, value = "rms_norm_eps", get("rms_norm_eps")
    return number(key, value, minimum=0.0) if value is not None else 1e-6


def integer(key: str, value: Any, minimum: int = 1) -> int:
    """A config field that must be an integer of at least `minimum`, or an error naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelSourceError(f"config.{key} = {value!r}: expected an integer of at least {minimum}")
    return value


def number(key: str, value: Any, *, positive: bool = False, minimum: float | None = None) -> float:
    """A config field that must be a finite number (positive, or at least `minimum`, when asked), or an error
    naming it."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (positive and value <= 0) or (minimum is not None and value < minimum)):
        what = "a positive number" if positive else f"a number of at least {minimum}" if minimum is not None \
            else "a finite number"
        raise ModelSourceError(f"config.{key} = {value!r}: expected {what}")
    return float(value)


def _sequence(key: str, value: Any) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ModelSourceError(f"config.{key} = {value!r}: expected a list")
    return list(value)


def _strings(key: str, value: Any) -> list[str]:
    items = _sequence(key, value)
    if not all(isinstance(v, str) for v in items):
        raise ModelSourceError(f"config.{key} = {value!r}: expected a list of names")
    return items


def token_ids(value: Any, where: str = "a token id field") -> list[int]:
    """A config's token id field (one id, a list of them, or None) as a list."""
    if value is None:
        return []
    ids = [v for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in ids):
        raise ModelSourceError(f"{where} = {value!r}: expected token ids (integers of at least 0)")
    return ids


# RoPE parameters that are numbers (the first two positive), and those that are lists of numbers.
_ROPE_NUMBERS = ("rope_theta", "factor", "partial_rotary_factor", "low_freq_factor", "high_freq_factor",
                 "original_max_position_embeddings", "attention_factor", "mscale", "mscale_all_dim", "beta_fast",
                 "beta_slow")
_ROPE_LISTS = ("short_factor", "long_factor")


def _check_rope_numbers(params: dict, where: str) -> None:
    """Refuse a RoPE whose parameters are not numbers, naming the field."""
    for key in _ROPE_NUMBERS:
        if params.get(key) is not None:
            number(f"{where}.{key}", params[key], positive=key in ("rope_theta", "factor"))
    for key in _ROPE_LISTS:
        values = params.get(key)
        if values is not None and (not isinstance(values, list) or not values):
            raise ModelSourceError(f"config.{where}.{key} = {values!r}: expected a list of numbers")
        for value in values or ():
            number(f"{where}.{key}[]", value)


def _check_rope(get, family: str) -> tuple[int, str] | None:
    """Refuse RoPE types the exporter cannot reproduce; return the cache-length limit of a bounded one."""
    params = get("rope_parameters") or get("rope_scaling")
    if not params:
        return None
    if not isinstance(params, dict):
        raise ModelSourceError(f"config.rope_parameters = {params!r}: expected a mapping")
    per_type = params if family in ROPE_PER_LAYER_TYPE and all(isinstance(v, dict) for v in params.values()) \
        else {"": params}
    limit = None
    for layer_type, p in per_type.items():
        where = f"rope_parameters[{layer_type!r}]" if layer_type else "rope_parameters"
        if p is None:
            continue
        if not isinstance(p, dict):
            raise ModelSourceError(f"config.{where} = {p!r}: expected a mapping")
        rope_type = p.get("rope_type", p.get("type", "default"))
        _check_rope_numbers(p, where)
        if rope_type in BOUNDED_ROPE_TYPES:
            original = p.get("original_max_position_embeddings") or get("original_max_position_embeddings") \
                or get("max_position_embeddings")
            if not original:
                raise UnsupportedModelError(f"config.{where}.rope_type = {rope_type!r} without "
                                            "original_max_position_embeddings or max_position_embeddings")
            original = integer(f"{where}.original_max_position_embeddings", original)
            if limit is None or original < limit[0]:
                limit = (original, f"{where}.rope_type = {rope_type!r} (original_max_position_embeddings "
                                   f"{original})")
        elif rope_type not in STATIC_ROPE_TYPES:
            raise UnsupportedModelError(
                f"config.{where}.rope_type = {rope_type!r} is not supported (its tables change with the sequence "
                f"length at run time); supported: {', '.join(STATIC_ROPE_TYPES + BOUNDED_ROPE_TYPES)}")
    return limit


def check_cache_length(cfg: LlmConfig, cache_length: int) -> None:
    """Refuse a cache longer than the positions a bounded RoPE (LongRoPE, dynamic NTK) computes with fixed
    tables; warn when the cache holds positions past those the model was trained for (its RoPE tables are still
    exact there; what the model does with them is the model's affair)."""
    if cfg.rope_limit is not None and cache_length > cfg.rope_limit[0]:
        raise UnsupportedModelError(
            f"config.{cfg.rope_limit[1]}: Hugging Face changes these RoPE tables once a sequence is longer than "
            f"{cfg.rope_limit[0]} tokens, which a converted model cannot follow; use cache_length <= "
            f"{cfg.rope_limit[0]} (asked for {cache_length})")
    if cfg.max_position_embeddings and cache_length > cfg.max_position_embeddings:
        log.warning("cache_length %d exceeds the model's max_position_embeddings (%d)", cache_length,
                    cfg.max_position_embeddings)


