"""Image + text -> text models (VLMs): a Hugging Face `Gemma3ForConditionalGeneration`,
`Idefics3ForConditionalGeneration`, `LlavaForConditionalGeneration`, `PaliGemmaForConditionalGeneration` or
`Lfm2VlForConditionalGeneration` directory (the families: vlm_families.py)
-> a .litertlm bundle for
`litert_torch.generative.load(bundle).generate(prompt, images=[...])`.

    from litert_torch.generative.export_hf import export
    bundle = export.export(model="gemma3_dir", output_dir="out", task="image_text_to_text")

The bundle's sections:

    LlmMetadata             start and stop tokens, maximum tokens, chat template; model type Gemma3 with its
                            start- and end-of-image tokens and the encoder's image size (Idefics3: generic)
    ExecutorMetadata        the KV-cache state buffers, as for a text LLM
    tokenizer               the Hugging Face tokenizer.json
    TF_LITE_EMBEDDER        `embedder`: `token` int32[1] -> `embeddings` float32[1, 1, H], the token's input
                            embedding as the model's embedding module gives it (Gemma: scaled by sqrt(H))
    TF_LITE_VISION_ENCODER  `vision_encoder`: `images` float32[1, S, S, 3] (the resized pixels / 255, channels
                            last, as LiteRT-LM's image preprocessor gives them) -> `features` [1, P, D]: the
                            processor's rescaling and normalisation, then the vision tower
    TF_LITE_VISION_ADAPTER  `vision_adapter`: `features` -> `embeddings` [1, T (+1), H], the multimodal
                            projector (Idefics3: the connector): one row per image token of the prompt (Gemma 3:
                            then its end-of-image token's row)
    TF_LITE_PREFILL_DECODE  the text decoder built by `direct.build_llm(..., embeddings_input=True)`: prefill and
                            decode take `embeddings` instead of `tokens`, and the attention masks `mask` (and
                            `local_mask` for sliding-window layers) that LiteRT-LM fills as ExecutorMetadata's
                            attention-mask settings say (Gemma 3: bidirectional over an image's tokens); its
                            metadata `litert_torch.vlm` holds the image preprocessing and prompt expansion
                            (`ImageSpec`)

The runner (vlm_runner.py) encodes an image only when a prompt has one. See docs/VLM.md.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable, Sequence

from litert_torch.errors import InvalidArgumentError, ModelFileError, one_line
from litert_torch.generative.vlm_families import (  # noqa: F401 (re-exported)
    EMBEDDER_SIGNATURE, FAMILIES, VISION_ADAPTER_SIGNATURE, VISION_ENCODER_SIGNATURE, Family, ImageSpec,
    UnsupportedVlmError, part,
)

IMAGE_TEXT_TO_TEXT = "image_text_to_text"
BUNDLE_NAME = "model.litertlm"
VLM_KEY = "litert_torch.vlm"
# model types of image+text models that this exporter does not convert (the task read from config.json)
OTHER_VLM_TYPES = ("smolvlm", "qwen2_5_vl", "qwen2_vl", "qwen3_vl",
                   "gemma3n", "fast_vlm", "mllama", "llava_next", "internvl", "mistral3")


def is_vlm_config(config: dict) -> bool:
    """Whether a config.json dict describes an image+text model (a vision config beside its text config)."""
    return config.get("model_type") in (*FAMILIES, *OTHER_VLM_TYPES) or (
        isinstance(config.get("vision_config"), dict) and isinstance(config.get("text_config"), dict))


def read_config(path: str) -> dict:
    """config.json of the model directory `path`, checked to be an image+text model this exporter converts."""
    config_file = os.path.join(path, "config.json")
    try:
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read {config_file}: {one_line(exc)}") from None
    if not isinstance(config, dict):
        raise ModelFileError(f"{config_file} is not a JSON object")
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        what = "an image+text model" if is_vlm_config(config) else "not an image+text model"
        raise UnsupportedVlmError(f"{path}: model_type {model_type!r} is {what} that task image_text_to_text "
                                  f"converts; it converts {', '.join(f.architecture for f in FAMILIES.values())}")
    return config


def export_vlm_task(model: Any, output_dir: str | os.PathLike, *, keep_temporary_files: bool = False,
                    trust_remote_code: bool = False, prefill_lengths: Sequence[int] | None = None,
                    cache_length: int | None = None, quantization_recipe: Any = None,
                    vision_encoder_quantization_recipe: Any = None, enable_dynamic_shape: bool | None = None,
                    auto_model_override: str | None = None, use_jinja_template: bool | None = None,
                    bundle_litert_lm: bool | None = None, tokenizer: Any = None,
                    progress: Callable[[str], None] | None = None) -> str:
    """`export(..., task="image_text_to_text")`: OUT/model.litertlm (with `keep_temporary_files`, also each
    section's .tflite and tokenizer.json in OUT). The official exporter's defaults: prefill (256,), cache 4096,
    int8 weights (`quantization_recipe`) for the decoder and the embedder; the vision encoder and adapter are
    float unless `vision_encoder_quantization_recipe` names a recipe."""
    refused = {"enable_dynamic_shape": bool(enable_dynamic_shape), "auto_model_override": auto_model_override is not None,
               "bundle_litert_lm=False": bundle_litert_lm is False, "tokenizer": tokenizer is not None}
    from litert_torch.generative.export_options import check_output_dir, refuse_options

    refuse_options("image_text_to_text", refused,
                   "it reads the model directory's own processor and always writes a bundle")

    output_dir = os.fspath(output_dir)
    check_output_dir(output_dir)
    return export_vlm(model, os.path.join(output_dir, BUNDLE_NAME),
                      prefill_lengths=(256,) if prefill_lengths is None else prefill_lengths,
                      cache_length=4096 if cache_length is None else cache_length,
                      quantization_recipe=quantization_recipe,
                      vision_encoder_quantization_recipe=vision_encoder_quantization_recipe,
                      keep_folder=output_dir if keep_temporary_files else None, trust_remote_code=trust_remote_code,
                      use_jinja_template=True if use_jinja_template is None else use_jinja_template,
                      progress=progress)


def export_vlm(model: Any, bundle_path: str, *, prefill_lengths: Sequence[int] = (256,), cache_length: int = 4096,
               quantization_recipe: Any = None, vision_encoder_quantization_recipe: Any = None,
               keep_folder: str | None = None, trust_remote_code: bool = False, use_jinja_template: bool = True,
               progress: Callable[[str], None] | None = None) -> str:
    """Convert the image+text model in the directory `model` and write the bundle `bundle_path` atomically.
    The config, arguments, processor and tokenizer are checked before any conversion. Returns `bundle_path`."""
    from litert_torch.generative.decoder_file import check_lengths
    from litert_torch.generative.export_options import DEFAULT_RECIPE, check_recipe

    report = progress or (lambda stage: None)
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidArgumentError("task image_text_to_text takes a model directory (save_pretrained, with its "
                                   "processor and tokenizer), not a model in memory")
    path = os.fspath(model)
    report("read")
    config = read_config(path)
    lengths = check_lengths(prefill_lengths, cache_length)
    quantization_recipe = DEFAULT_RECIPE if quantization_recipe is None else quantization_recipe
    recipe = check_recipe(quantization_recipe)
    vision_recipe = _section_recipe(vision_encoder_quantization_recipe)
    family = FAMILIES[config["model_type"]]
    processor = _load_processor(path, trust_remote_code)
    spec = family.image_spec(config, processor)
    if spec.tokens_per_image > lengths[-1]:
        raise InvalidArgumentError(f"an image takes {spec.tokens_per_image} tokens, more than the longest prefill "
                                   f"length {lengths[-1]}: the runtime prefills an image's tokens in one call")
    hf = _load_model(path, family, trust_remote_code)
    report("convert")
    _write(bundle_path, hf, family, spec, processor.tokenizer, cache_length, lengths, recipe, vision_recipe,
           use_jinja_template, keep_folder, report)
    return bundle_path


def _load_processor(path: str, trust_remote_code: bool) -> Any:
    import transformers

    try:
        processor = transformers.AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelFileError(f"transformers could not load the processor in {path} (preprocessor_config.json, "
                             f"processor_config.json, tokenizer): {one_line(exc)}") from None
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        raise ModelFileError(f"the processor in {path} has no fast (tokenizer.json) tokenizer: LiteRT-LM reads "
                             f"tokenizer.json")
    if getattr(processor, "image_processor", None) is None:
        raise ModelFileError(f"the processor in {path} has no image processor")
    return processor


def _load_model(path: str, family: Family, trust_remote_code: bool) -> Any:
    import torch
    import transformers

    from litert_torch.logs import third_party_output

    cls = getattr(transformers, family.architecture)
    try:
        with third_party_output():
            hf = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                     trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelFileError(f"transformers could not load the model in {path}: {one_line(exc)}") from None
    return hf.eval()


def text_weights(hf: Any, prefix: str) -> dict[str, Any]:
    """The language model's weights (those under `prefix`) under the names of its causal LM (`model.layers...`,
    `lm_head.weight`), as numpy arrays sharing the model's memory."""
    from litert_torch.generative.weights import numpy_weights

    state = {("model." + k[len(prefix):] if k.startswith(prefix) else k): v for k, v in hf.state_dict().items()
             if k.startswith(prefix) or k == "lm_head.weight"}
    arrays = numpy_weights(state)
    if isinstance(arrays, str):
        raise UnsupportedVlmError(f"the language model's weights cannot be read: {arrays}")
    return arrays


def _decoder(hf: Any, family: Family, tokenizer: Any, cache_length: int, lengths: Sequence[int], spec: ImageSpec,
             use_jinja_template: bool, report: Callable[[str], None]):
    from litert_torch import metadata
    from litert_torch.generative import direct, hf as hf_source
    from litert_torch.generative.config import LlmConfig, check_cache_length, token_ids
    from litert_torch.generative.source import widen

    text_config = hf.config.text_config
    if spec.prefix_lm and getattr(text_config, "use_bidirectional_attention", None):
        # PaliGemma's config marks its Gemma model bidirectional: its prefix-LM mask, which here is the
        # decoder's `mask` input, filled by the runner
        text_config = copy.copy(text_config)
        text_config.use_bidirectional_attention = None
    cfg = LlmConfig.from_hf(text_config)
    check_cache_length(cfg, cache_length)
    reason = direct.can_build(cfg)
    if reason is not None:
        raise UnsupportedVlmError(f"the language model cannot be built: {reason}")
    stops = token_ids(getattr(getattr(hf, "generation_config", None), "eos_token_id", None))
    info = hf_source.tokenizer_info(tokenizer, cfg, stops, cache_length, use_jinja_template)
    weights = direct.Weights(text_weights(hf, family.text_prefix), widen)
    spec.sliding_window = int(cfg.sliding_window) if cfg.sliding_window else None
    model, layout = direct.build_llm(weights, cfg, text_config.rope_parameters, cache_length, lengths,
                                     start_token_id=info.start_token_id, stop_token_ids=info.stop_token_ids,
                                     progress=report, embeddings_input=True)
    model.metadata[VLM_KEY] = metadata.encode(spec.to_json())
    return model, layout, info


def _section_recipe(recipe: Any) -> Any:
    """The vision sections' checked recipe: float (None) unless a recipe is given for them."""
    from litert_torch.generative.export_options import check_recipe

    return None if recipe is None else check_recipe(recipe)


def write_vision(hf: Any, family: Family, spec: ImageSpec, files: dict[str, str], recipe: Any,
                 vision_recipe: Any, release: Callable | None = None) -> None:
    """Write the embedder, the vision encoder and the adapter of `hf` to `files` (by section file name), quantized
    by the checked recipes (`recipe` the embedder's, `vision_recipe` the vision sections'), each converted and
    written in turn with its constants streamed from the model's tensors; the converter's typed errors propagate
    as they are."""
    import torch

    import litert_torch
    from litert_torch.generative.decoder_file import write_section
    from litert_torch.generative.embedding_modules import Lookup
    from litert_torch.generative.vlm_modules import Adapter

    write_section(litert_torch.signature(EMBEDDER_SIGNATURE, Lookup(hf.get_input_embeddings()).eval(),
                                         sample_kwargs={"token": torch.zeros(1, dtype=torch.int32)}),
                  files["embedder.tflite"], recipe)
    grid = _grid(spec)
    tower = vision_tower(hf, family, spec)
    images = torch.full((1, spec.height, spec.width, 3), 0.5)
    encoder = litert_torch.signature(VISION_ENCODER_SIGNATURE, tower, sample_kwargs={"images": images}
                                     ).to_ir(target="cpu")
    # the adapter is traced with features of the encoder's output shape (their values do not matter): running
    # the tower in PyTorch would read all of its weights once more
    features = torch.zeros(encoder.subgraphs[0].outputs[0].shape)
    write_section(encoder, files["vision_encoder.tflite"], vision_recipe, release)
    del encoder
    end_tokens = [spec.end_of_image_id] if spec.adapter_end_rows and spec.end_of_image_id is not None else []
    adapter_module = Adapter(part(hf, family.adapter), hf.get_input_embeddings(), end_tokens, grid).eval()
    write_section(litert_torch.signature(VISION_ADAPTER_SIGNATURE, adapter_module,
                                         sample_kwargs={"features": features}),
                  files["vision_adapter.tflite"], vision_recipe)


def _grid(spec: ImageSpec) -> tuple[int, int] | None:
    """The patch grid of a NaFlex encoder (a spec with a patch size), else None."""
    return (spec.height // spec.patch_size, spec.width // spec.patch_size) if spec.patch_size else None


def vision_tower(hf: Any, family: Family, spec: ImageSpec) -> Any:
    """The module the vision encoder section is converted from: the family's vision tower after the processor's
    rescaling and normalisation (a NaFlex tower on the spec's patch grid when it has a patch size)."""
    from litert_torch.generative.vlm_modules import NaflexVisionTower, VisionTower

    grid = _grid(spec)

    tower = part(hf, family.vision_tower)
    if grid is not None and spec.patch_size is not None:
        return NaflexVisionTower(tower, spec.rescale_factor, spec.image_mean, spec.image_std, grid,
                                 spec.patch_size).eval()
    return VisionTower(tower, spec.rescale_factor, spec.image_mean, spec.image_std,
                       family.tower_output(hf.config.to_dict())).eval()


SECTION_FILES = ("model.tflite", "embedder.tflite", "vision_encoder.tflite", "vision_adapter.tflite",
                 "tokenizer.json")


def _write(bundle_path: str, hf: Any, family: Family, spec: ImageSpec, tokenizer: Any, cache_length: int,
           lengths: Sequence[int], recipe: Any, vision_recipe: Any, use_jinja_template: bool,
           keep_folder: str | None, report: Callable[[str], None]) -> None:
    """Convert and write each section to a scratch folder in turn (a section's IR is dropped once written), then
    the bundle, atomically."""
    from litert_torch.files import copies_kept_with, scratch_folder
    from litert_torch.generative import bundle
    from litert_torch.generative.decoder_file import write_decoder
    from litert_torch.memory import FilePages

    folder = os.path.dirname(os.path.abspath(bundle_path))
    created = not os.path.isdir(folder)
    with scratch_folder("litert_vlm_") as scratch:
        files = {n: os.path.join(scratch, n) for n in SECTION_FILES}
        decoder, layout, info = _decoder(hf, family, tokenizer, cache_length, lengths, spec, use_jinja_template,
                                         report)
        # the weights' pages, where they are mapped from the model's safetensors, are handed back once written
        release = FilePages().release
        report("write decoder")
        write_decoder(decoder, files["model.tflite"], recipe, release)
        del decoder
        report("vision")
        write_vision(hf, family, spec, files, recipe, vision_recipe, release)
        tokenizer.backend_tokenizer.save(files["tokenizer.json"])
        report("bundle")
        try:
            os.makedirs(folder, exist_ok=True)
            with copies_kept_with(files, keep_folder):  # all the files or none
                bundle.write_bundle(bundle_path, files["model.tflite"], files["tokenizer.json"], layout, info,
                                    model_type=family.model_type(spec),
                                    attention_mask=("ATTENTION_MASK_TYPE_VISION_BIDIRECTIONAL" if spec.bidirectional
                                                    else "ATTENTION_MASK_TYPE_CAUSAL", spec.sliding_window),
                                    sections=[(files["embedder.tflite"], "EMBEDDER"),
                                              (files["vision_encoder.tflite"], "VISION_ENCODER"),
                                              (files["vision_adapter.tflite"], "VISION_ADAPTER")])
        except BaseException:
            if created and os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
            raise
