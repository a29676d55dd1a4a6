"""What differs between the image+text families the image_text_to_text export takes: where the Hugging Face model
keeps its vision tower, its adapter and its language model; how its processor prepares an image and expands an
image placeholder in a prompt (`ImageSpec`, checked against the config); whether the decoder attends over an
image's tokens in both directions; the LiteRT-LM model type.

    Gemma 3  (`Gemma3ForConditionalGeneration`)   SigLIP tower, average-pooling projector, Gemma 3 text model;
             bidirectional over an image; placeholder `<start_of_image>`
    Idefics3 (`Idefics3ForConditionalGeneration`, SmolVLM's first release)   SigLIP-like tower, pixel-shuffle
             connector, Llama text model; causal; placeholder `<image>`; image splitting must be off
    LLaVA    (`LlavaForConditionalGeneration`)   CLIP tower (a chosen layer's hidden states, the class token
             dropped by the default strategy), MLP projector, Llama-style text model; causal; placeholder `<image>`
    PaliGemma (`PaliGemmaForConditionalGeneration`)   SigLIP tower, linear projector, Gemma or Gemma 2 text model;
             a prefix LM: the whole prompt (image tokens, then the start token, the text and "\n") attends in both
             directions, generated tokens causally; positions counted from 1; placeholder `<image>`
    LFM2-VL  (`Lfm2VlForConditionalGeneration`)   SigLIP2 NaFlex tower (the image cut into patches, its position
             embeddings resized to the patch grid), pixel-unshuffle MLP projector, LFM2 text model (short
             convolutions and attention); causal; placeholder `<image>`; image splitting must be off, one grid
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from litert_torch.generative.config import UnsupportedModelError

EMBEDDER_SIGNATURE = "embedder"
VISION_ENCODER_SIGNATURE = "vision_encoder"
VISION_ADAPTER_SIGNATURE = "vision_adapter"


class UnsupportedVlmError(UnsupportedModelError):
    """An image+text model (or a setting of its processor) that the image_text_to_text export does not take."""


@dataclass
class ImageSpec:
    """How a prompt's images become the decoder's input: the processor's preprocessing and the text it puts in
    place of each image (stored in the decoder's metadata as `litert_torch.vlm`)."""

    family: str  # config.json model_type
    height: int  # the encoder's input image size
    width: int
    resample: int  # PIL's resampling filter (PIL.Image.Resampling value)
    rescale_factor: float | None  # pixels times this (None: not rescaled)
    image_mean: list[float] | None  # then (x - mean) / std per channel (None: not normalised)
    image_std: list[float] | None
    convert_rgb: bool  # images with an alpha channel or in grey are converted to RGB first
    placeholder: str  # what marks an image in a prompt's text
    image_text: str  # what the processor puts in its place (the image tokens between their delimiters)
    image_token_id: int  # the token whose rows the adapter's output replaces
    tokens_per_image: int
    bidirectional: bool  # the decoder attends over an image's tokens in both directions
    # Idefics3: the image is first resized to this longest edge, keeping its aspect ratio (each side rounded
    # down, then up to an even number), then to height x width; None: straight to height x width
    longest_edge: int | None = None
    # LLaVA (CLIP's processor): the image's shortest edge resized to this, keeping the aspect ratio (the long side
    # rounded down), then its centre cropped to height x width; None: no such step
    shortest_edge: int | None = None
    sliding_window: int | None = None  # the decoder's sliding window, None without one
    # rows the adapter gives after the image tokens' rows: Gemma 3's end-of-image token, which LiteRT-LM does not
    # insert itself (the runner takes that row from the embedder, where it is the same)
    adapter_end_rows: int = 0
    start_of_image: str | None = None
    end_of_image: str | None = None
    end_of_image_id: int | None = None
    # PaliGemma: the prompt is a prefix attended in both directions (all of it in one prefill call), the start
    # token goes after the image tokens and "\n" ends the prompt
    prefix_lm: bool = False
    # the decoder's positions are the cache slots plus this (PaliGemma counts from 1; slot 0 stays unused)
    position_offset: int = 0
    prompt_start_id: int | None = None  # PaliGemma: the start token, put after the image tokens
    # LFM2-VL (NaFlex): the encoder cuts the image into patches of this size itself. Its processor resizes an
    # image to multiples of patch_size * downsample_factor holding image_token_range[0]..[1] tokens
    # (`lfm2_vl_size`); the runner takes an image only where that gives height x width
    patch_size: int | None = None
    downsample_factor: int | None = None
    image_token_range: list[int] | None = None
    signatures: dict[str, str] = field(default_factory=lambda: {
        "embedder": EMBEDDER_SIGNATURE, "encoder": VISION_ENCODER_SIGNATURE, "adapter": VISION_ADAPTER_SIGNATURE})

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ImageSpec":
        return cls(**data)


@dataclass(frozen=True)
class Family:
    """One image+text family: the transformers class, the attribute paths of its parts in that model, the prefix
    of its language model's weights, how its ImageSpec is read, its LiteRT-LM model type, and which of the vision
    tower's outputs its adapter takes (`tower_output(config)`: None for the last hidden state, else the layer
    whose hidden states it takes and whether the class token is dropped)."""

    architecture: str
    vision_tower: str
    adapter: str
    text_prefix: str
    image_spec: Callable[[dict, Any], ImageSpec]
    model_type: Callable[[ImageSpec], Any]
    tower_output: Callable[[dict], tuple[int, bool] | None] = lambda config: None


def part(model: Any, path: str) -> Any:
    """The submodule of `model` at the dotted attribute `path`."""
    for name in path.split("."):
        model = getattr(model, name)
    return model


def _common(ip: Any) -> dict[str, Any]:
    """The preprocessing settings every family's image processor has."""
    resample = getattr(ip, "resample", 2)
    resample = int(getattr(resample, "value", resample))
    if resample not in (0, 1, 2, 3, 4, 5):
        raise UnsupportedVlmError(f"the image processor's resample {ip.resample!r} is not a PIL filter")
    normalize = bool(getattr(ip, "do_normalize", False))
    return {"resample": resample,
            "rescale_factor": float(ip.rescale_factor) if getattr(ip, "do_rescale", False) else None,
            "image_mean": [float(v) for v in _triple(ip.image_mean)] if normalize else None,
            "image_std": [float(v) for v in _triple(ip.image_std)] if normalize else None,
            "convert_rgb": getattr(ip, "do_convert_rgb", True) is not False}


def _triple(value: Any) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * 3
    if len(values) != 3:
        raise UnsupportedVlmError(f"the image processor's mean/std {value!r} is not one value per RGB channel")
    return values


def _image_token(config: dict, tok: Any, token: str) -> int:
    image_token_id = int(config.get("image_token_id", config.get("image_token_index", -1)))
    if tok.convert_tokens_to_ids(token) != image_token_id:
        raise UnsupportedVlmError(f"the tokenizer's image token {token!r} is not the config's image_token_id "
                                  f"{image_token_id}")
    return image_token_id


def gemma3_spec(config: dict, processor: Any) -> ImageSpec:
    """A Gemma3Processor's preprocessing and prompt expansion, checked against the config."""
    ip, tok = processor.image_processor, processor.tokenizer
    if getattr(ip, "do_pan_and_scan", False):
        raise UnsupportedVlmError("the image processor crops with pan-and-scan (do_pan_and_scan), which the "
                                  "exporter does not reproduce: save the processor with do_pan_and_scan=False")
    size = getattr(ip, "size", None) or {}
    height, width = size.get("height"), size.get("width")
    if not isinstance(height, int) or not isinstance(width, int):
        raise UnsupportedVlmError(f"the image processor's size {dict(size)!r} is not a fixed height and width")
    vision = config.get("vision_config") or {}
    if vision.get("image_size") not in (None, height) or height != width:
        raise UnsupportedVlmError(f"the image processor resizes to {height}x{width}; the vision encoder takes "
                                  f"{vision.get('image_size')}x{vision.get('image_size')}")
    n = int(config.get("mm_tokens_per_image", 256))
    if getattr(processor, "image_seq_length", n) != n:
        raise UnsupportedVlmError(f"the processor puts {processor.image_seq_length} image tokens in a prompt; the "
                                  f"model's mm_tokens_per_image is {n}")
    return ImageSpec(family="gemma3", height=height, width=width, **_common(ip),
                     placeholder=str(processor.image_token), image_text=str(processor.full_image_sequence),
                     image_token_id=_image_token(config, tok, str(tok.image_token)), tokens_per_image=n,
                     bidirectional=True, adapter_end_rows=1, start_of_image=str(tok.boi_token),
                     end_of_image=str(tok.eoi_token), end_of_image_id=int(tok.convert_tokens_to_ids(tok.eoi_token)))


def idefics3_spec(config: dict, processor: Any) -> ImageSpec:
    """An Idefics3Processor's preprocessing (image splitting off: one image, resized to the encoder's size) and
    prompt expansion, checked against the config."""
    ip = processor.image_processor
    if getattr(ip, "do_image_splitting", False):
        raise UnsupportedVlmError("the image processor splits images into tiles (do_image_splitting), which the "
                                  "exporter does not reproduce: save the processor with do_image_splitting=False")
    if not getattr(ip, "do_resize", True):
        raise UnsupportedVlmError("the image processor does not resize (do_resize=False): the vision encoder "
                                  "takes one image size")
    vision = config.get("vision_config") or {}
    side = (getattr(ip, "max_image_size", None) or {}).get("longest_edge")
    longest = (getattr(ip, "size", None) or {}).get("longest_edge")
    if not isinstance(side, int) or not isinstance(longest, int) or vision.get("image_size") not in (None, side):
        raise UnsupportedVlmError(f"the image processor's max_image_size {ip.max_image_size!r} and size {ip.size!r} "
                                  f"do not give the vision encoder's {vision.get('image_size')} pixels")
    patches = (side // int(vision.get("patch_size", 14))) ** 2
    n = int(patches / int(config.get("scale_factor", 2)) ** 2)
    if processor.image_seq_len != n:
        raise UnsupportedVlmError(f"the processor puts {processor.image_seq_len} image tokens in a prompt; the "
                                  f"model gives {n} per image")
    fake, image = str(processor.fake_image_token), str(processor.image_token)
    text = f"{fake}{processor.global_image_tag}{image * n}{fake}"
    return ImageSpec(family="idefics3", height=side, width=side, **_common(ip), placeholder=image, image_text=text,
                     image_token_id=_image_token(config, processor.tokenizer, image), tokens_per_image=n,
                     bidirectional=False, longest_edge=longest)


def llava_tower_output(config: dict) -> tuple[int, bool]:
    """The layer whose hidden states LLaVA's projector takes, and whether the class token is dropped."""
    layer, strategy = config.get("vision_feature_layer", -2), config.get("vision_feature_select_strategy", "default")
    if not isinstance(layer, int) or strategy not in ("default", "full"):
        raise UnsupportedVlmError(f"vision_feature_layer {layer!r} with strategy {strategy!r}: the exporter takes one "
                                  f"layer, with the 'default' or 'full' strategy")
    return layer, strategy == "default"


def llava_spec(config: dict, processor: Any) -> ImageSpec:
    """A LlavaProcessor's preprocessing (CLIP's: shortest edge, centre crop) and prompt expansion, checked against
    the config."""
    ip = processor.image_processor
    vision = config.get("vision_config") or {}
    side = int(vision.get("image_size", 224))
    crop = getattr(ip, "crop_size", None) or {}
    shortest = (getattr(ip, "size", None) or {}).get("shortest_edge")
    if not getattr(ip, "do_center_crop", False) or crop.get("height") != side or crop.get("width") != side \
            or not isinstance(shortest, int) or not getattr(ip, "do_resize", True):
        raise UnsupportedVlmError(f"the image processor (size {ip.size!r}, crop {crop!r}) does not resize the shortest "
                                  f"edge and crop the centre to the vision encoder's {side} pixels")
    _, drop_first = llava_tower_output(config)
    patch = int(vision.get("patch_size", 14))
    n = (side // patch) ** 2 + 1 - int(drop_first)
    expected = (side // patch) ** 2 + int(getattr(processor, "num_additional_image_tokens", 0)) - int(
        getattr(processor, "vision_feature_select_strategy", "default") == "default")
    if expected != n or getattr(processor, "patch_size", patch) != patch:
        raise UnsupportedVlmError(f"the processor puts {expected} image tokens in a prompt; the model gives {n}")
    image = str(processor.image_token)
    return ImageSpec(family="llava", height=side, width=side, **_common(ip), placeholder=image, image_text=image * n,
                     image_token_id=_image_token(config, processor.tokenizer, image), tokens_per_image=n,
                     bidirectional=False, shortest_edge=shortest)


def paligemma_spec(config: dict, processor: Any) -> ImageSpec:
    """A PaliGemmaProcessor's preprocessing (SigLIP's: resized to a fixed size) and prompt, checked against the
    config."""
    ip = processor.image_processor
    size = getattr(ip, "size", None) or {}
    height, width = size.get("height"), size.get("width")
    vision = config.get("vision_config") or {}
    side = int(vision.get("image_size", 224))
    if not getattr(ip, "do_resize", True) or height != side or width != side:
        raise UnsupportedVlmError(f"the image processor resizes to {height}x{width}; the vision encoder takes "
                                  f"{side}x{side}")
    n = (side // int(vision.get("patch_size", 14))) ** 2
    if processor.image_seq_length != n:
        raise UnsupportedVlmError(f"the processor puts {processor.image_seq_length} image tokens in a prompt; the "
                                  f"model gives {n} per image")
    image = str(processor.image_token)
    return ImageSpec(family="paligemma", height=side, width=side, **_common(ip), placeholder=image,
                     image_text=image * n, image_token_id=_image_token(config, processor.tokenizer, image),
                     tokens_per_image=n, bidirectional=True, prefix_lm=True, position_offset=1,
                     prompt_start_id=int(processor.tokenizer.bos_token_id))


def lfm2_vl_size(height: int, width: int, factor: int, min_tokens: int, max_tokens: int) -> tuple[int, int]:
    """The (height, width) `Lfm2VlImageProcessor` resizes an image of `height` x `width` to without splitting
    (its `smart_resize`): each side rounded to a multiple of `factor` (patch size times downsample factor), then
    scaled, keeping the aspect ratio, into `min_tokens`..`max_tokens` tokens of factor x factor pixels."""
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_tokens * factor ** 2:
        beta = math.sqrt(height * width / (max_tokens * factor ** 2))
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_tokens * factor ** 2:
        beta = math.sqrt(min_tokens * factor ** 2 / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def lfm2_vl_spec(config: dict, processor: Any) -> ImageSpec:
    """An Lfm2VlProcessor's preprocessing with image splitting off (one grid per image: the largest square its
    `max_image_tokens` allow, which a square image of that size keeps) and its prompt expansion, checked against
    the config."""
    ip = processor.image_processor
    if getattr(ip, "do_image_splitting", True):
        raise UnsupportedVlmError("the image processor splits images into tiles and a thumbnail "
                                  "(do_image_splitting), which the exporter does not reproduce: save the processor "
                                  "with do_image_splitting=False")
    vision = config.get("vision_config") or {}
    patch, factor = int(ip.encoder_patch_size), int(ip.downsample_factor)
    if patch != int(vision.get("patch_size", 16)) or factor != int(config.get("downsample_factor", 2)):
        raise UnsupportedVlmError(f"the image processor's encoder_patch_size {patch} and downsample_factor {factor} "
                                  f"are not the model's patch_size {vision.get('patch_size')} and downsample_factor "
                                  f"{config.get('downsample_factor')}")
    low, high = int(ip.min_image_tokens), int(ip.max_image_tokens)
    side = math.isqrt(high) * patch * factor
    if low > high or lfm2_vl_size(side, side, patch * factor, low, high) != (side, side):
        raise UnsupportedVlmError(f"the image processor's min_image_tokens {low} and max_image_tokens {high} give "
                                  f"no square image grid")
    n = (side // (patch * factor)) ** 2
    image = str(processor.image_token)
    text = image * n
    if getattr(processor, "use_image_special_tokens", True):
        text = f"{processor.image_start_token}{text}{processor.image_end_token}"
    return ImageSpec(family="lfm2_vl", height=side, width=side, **_common(ip), placeholder=image, image_text=text,
                     image_token_id=_image_token(config, processor.tokenizer, image), tokens_per_image=n,
                     bidirectional=False, patch_size=patch, downsample_factor=factor, image_token_range=[low, high])


def gemma3_model_type(spec: ImageSpec) -> Any:
    """LlmMetadata's model type: Gemma3 with its image delimiter tokens and the encoder's image size."""
    from litert_lm_builder.runtime.proto import llm_model_type_pb2

    kind = llm_model_type_pb2.LlmModelType()
    kind.gemma3.start_of_image_token.token_str = spec.start_of_image or ""
    kind.gemma3.end_of_image_token.token_str = spec.end_of_image or ""
    kind.gemma3.image_tensor_height = spec.height
    kind.gemma3.image_tensor_width = spec.width
    return kind


def generic_model_type(spec: ImageSpec) -> Any:
    """LlmMetadata's model type for a family LiteRT-LM has no type for: generic_model with images on, the
    placeholder as the image delimiter, the encoder's image size, and the text the processor puts before and
    after the image tokens as the image prefix and suffix (the runtime puts the adapter's rows between them)."""
    import re

    from litert_lm_builder.runtime.proto import llm_model_type_pb2

    first, last = spec.image_text.index(spec.placeholder), spec.image_text.rindex(spec.placeholder)
    pattern = f"({re.escape(spec.placeholder)})"
    generic = llm_model_type_pb2.GenericModel(
        image_enabled=True, delimiter_regex=pattern, image_token_regex=pattern, image_tensor_height=spec.height,
        image_tensor_width=spec.width, image_prefix=spec.image_text[:first],
        image_suffix=spec.image_text[last + len(spec.placeholder):], add_image_end=False)
    return llm_model_type_pb2.LlmModelType(generic_model=generic)


# config.json model_type -> its family
FAMILIES = {
    "gemma3": Family("Gemma3ForConditionalGeneration", "model.vision_tower", "model.multi_modal_projector",
                     "model.language_model.", gemma3_spec, gemma3_model_type),
    "idefics3": Family("Idefics3ForConditionalGeneration", "model.vision_model", "model.connector",
                       "model.text_model.", idefics3_spec, generic_model_type),
    "llava": Family("LlavaForConditionalGeneration", "model.vision_tower", "model.multi_modal_projector",
                    "model.language_model.", llava_spec, generic_model_type, llava_tower_output),
    "paligemma": Family("PaliGemmaForConditionalGeneration", "model.vision_tower", "model.multi_modal_projector",
                        "model.language_model.", paligemma_spec, generic_model_type),
    "lfm2_vl": Family("Lfm2VlForConditionalGeneration", "model.vision_tower", "model.multi_modal_projector",
                      "model.language_model.", lfm2_vl_spec, generic_model_type),
}
