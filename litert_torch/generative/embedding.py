"""Text embeddings: a Hugging Face encoder (BERT-like, ModernBERT, EmbeddingGemma) -> a .litertlm bundle for
LiteRT-LM's `EmbeddingEngine` and for `litert_torch.generative.load(bundle).embed(texts)`.

The bundle follows the layout the LiteRT-LM runtime reads for an embedding model:

    EmbeddingMetadata      model type (GenericEmbeddingModel), the start and end tokens the runtime puts
                           around every text (it does not run the tokenizer's post-processor), the longest input
    tokenizer              the Hugging Face tokenizer.json
    TF_LITE_EMBEDDER       signature `embedder`: `token` int32[1] -> float32[1, 1, H], one row of the token table
                           (the runtime calls it once per token)
    TF_LITE_TEXT_ENCODER   one signature `encoder_<N>` per input length N: `embeddings` float32[1, N, H] (the rows,
                           padded with zeros) and `input_mask` float32[1, N] (1 for a real token, 0 after) ->
                           `embedding` float32[1, D]; the runtime takes the shortest that holds the text

The encoder graph is the Hugging Face model run on `inputs_embeds` with the mask, then what sentence-transformers
does after it (pooling over the real tokens, Dense layers, L2 normalisation; mean pooling alone without
modules.json), converted with `litert_torch.Converter`; the embedder is the model's own input-embedding module
(Gemma's scaled by sqrt(hidden), as its `embed_tokens` returns it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from litert_torch.errors import InvalidArgumentError, ModelFileError, one_line
from litert_torch.files import copies_kept_with, scratch_folder
from litert_torch.generative.embedding_runner import EMBEDDER_SIGNATURE, ENCODER_PREFIX
from litert_torch.generative.export_options import check_recipe
from litert_torch.generative.embedding_source import Pipeline, UnsupportedEmbeddingError, read_config, read_pipeline

if TYPE_CHECKING:
    from litert_torch.converter import Converter

BUNDLE_NAME = "model.litertlm"
DEFAULT_MAX_LENGTH = 512  # the default input length when the model allows more


@dataclass
class EmbeddingTokens:
    """The special tokens the tokenizer puts around a text, which the runtime inserts itself."""

    bos_token_id: int | None
    eos_token_id: int | None


def export_embedding_task(model: Any, output_dir: str | os.PathLike, *, keep_temporary_files: bool = False,
                          trust_remote_code: bool = False, prefill_lengths: Sequence[int] | None = None,
                          cache_length: int | None = None, quantization_recipe: Any = None,
                          enable_dynamic_shape: bool | None = None, auto_model_override: str | None = None,
                          use_jinja_template: bool | None = None, bundle_litert_lm: bool | None = None,
                          tokenizer: Any = None, progress: Callable[[str], None] | None = None) -> str:
    """`export(..., task="text_embedding")`: the official exporter's arguments that mean something for an
    encoder, the others refused by name. `prefill_lengths` are the encoder's input lengths."""
    refused = {"cache_length": cache_length is not None, "enable_dynamic_shape": bool(enable_dynamic_shape),
               "auto_model_override": auto_model_override is not None,
               "use_jinja_template": use_jinja_template is not None, "bundle_litert_lm=False": bundle_litert_lm is False}
    from litert_torch.generative.export_options import check_output_dir as _check_output_dir, refuse_options

    refuse_options("text_embedding", refused,
                   "an encoder has no KV cache, chat template or prefill/decode model; it is always bundled")

    output_dir = os.fspath(output_dir)
    _check_output_dir(output_dir)
    return export_embedding(model, os.path.join(output_dir, BUNDLE_NAME), lengths=prefill_lengths,
                            quantization_recipe=quantization_recipe, tokenizer=tokenizer,
                            keep_folder=output_dir if keep_temporary_files else None,
                            trust_remote_code=trust_remote_code, progress=progress)


def export_embedding(model: Any, bundle_path: str, *, lengths: Sequence[int] | None = None,
                     quantization_recipe: Any = None, tokenizer: Any = None, keep_folder: str | None = None,
                     trust_remote_code: bool = False, progress: Callable[[str], None] | None = None) -> str:
    """Convert the text-embedding model in the directory `model` and write the bundle `bundle_path` atomically
    (with `keep_folder`, also `embedder.tflite`, `encoder.tflite` and `tokenizer.json` there). Arguments,
    config, modules and tokenizer are checked before any conversion. `lengths`: the
    encoder's input lengths in tokens, the start and end tokens included (default: the model's limit, at most
    512). Returns `bundle_path`."""
    report = progress or (lambda stage: None)
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidArgumentError("task text_embedding takes a model directory (save_pretrained, with its "
                                   "tokenizer and any sentence-transformers modules), not a model in memory")
    path = os.fspath(model)
    report("read")
    config = read_config(path)  # the architecture checked
    pipeline = read_pipeline(path)
    lengths = _check_lengths(lengths, config, pipeline)
    recipe = check_recipe(quantization_recipe)

    import torch
    import transformers

    tok = _check_tokenizer(tokenizer if tokenizer is not None else _load_tokenizer(path, trust_remote_code), path)
    tokens = special_tokens(tok)
    try:
        hf = transformers.AutoModel.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                    trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelFileError(f"transformers could not load the model in {path}: {one_line(exc)}") from None
    hf.eval()
    width = _output_width(hf.config, pipeline)
    report("convert")
    embedder, encoder = convert_embedding(hf, pipeline, lengths)
    folder = os.path.dirname(os.path.abspath(bundle_path))
    created = not os.path.isdir(folder)
    try:
        os.makedirs(folder, exist_ok=True)
        _write_files(bundle_path, embedder, encoder, recipe, tok, tokens, lengths, width, keep_folder, report)
    except BaseException:
        if created and os.path.isdir(folder) and not os.listdir(folder):  # a failed export leaves nothing behind
            os.rmdir(folder)
        raise
    return bundle_path


def _write_files(bundle_path: str, embedder: Converter, encoder: Converter, recipe: Any, tok,
                 tokens: EmbeddingTokens, lengths: Sequence[int], width: int, keep_folder: str | None,
                 report: Callable[[str], None]) -> None:
    """Lower and write the embedder and the encoder quantized by the checked `recipe`, then the bundle."""
    from litert_torch.generative.decoder_file import write_section
    from litert_torch.memory import FilePages

    with scratch_folder("litert_embedding_") as scratch:
        files = {name: os.path.join(scratch, name) for name in ("embedder.tflite", "encoder.tflite", "tokenizer.json")}
        release = FilePages().release  # the weights' pages mapped from safetensors, handed back once written
        write_section(embedder, files["embedder.tflite"], recipe, release)
        write_section(encoder, files["encoder.tflite"], recipe, release)
        report("bundle")
        with open(files["tokenizer.json"], "w", encoding="utf-8") as f:
            f.write(tok.backend_tokenizer.to_str())
        with copies_kept_with(files, keep_folder):  # all the files or none
            write_embedding_bundle(bundle_path, files["embedder.tflite"], files["encoder.tflite"],
                                   files["tokenizer.json"], tokens, max(lengths), width)


def _check_lengths(lengths: Sequence[int] | None, config: dict, pipeline: Pipeline) -> list[int]:
    limit = _position_limit(config)
    if lengths is None:
        default = min(x for x in (pipeline.max_seq_length, limit, DEFAULT_MAX_LENGTH) if x)
        return [int(default)]
    try:
        values = sorted({int(n) for n in lengths})
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"the input lengths must be token counts, got {lengths!r}") from None
    if not values or values[0] < 1:
        raise InvalidArgumentError(f"the input lengths must be positive token counts, got {list(lengths)!r}")
    if limit is not None and values[-1] > limit:
        raise InvalidArgumentError(f"input length {values[-1]} exceeds the model's limit of {limit} positions "
                                   f"(config.json max_position_embeddings)")
    return values


def _position_limit(config: dict) -> int | None:
    limit = config.get("max_position_embeddings")
    if limit is None:
        return None
    if config.get("model_type") in ("roberta", "xlm-roberta"):  # positions start after the padding index
        limit -= int(config.get("pad_token_id", 1)) + 1
    return int(limit)


def _load_tokenizer(path: str, trust_remote_code: bool):
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelFileError(f"the tokenizer in {path} cannot be loaded: {one_line(exc)}") from None


def _check_tokenizer(tok, path: str):
    if not getattr(tok, "is_fast", False) or not hasattr(tok, "backend_tokenizer"):
        raise ModelFileError(f"the tokenizer of {path} is not a fast (tokenizer.json) tokenizer: LiteRT-LM reads "
                             f"tokenizer.json")
    return tok


def special_tokens(tok) -> EmbeddingTokens:
    """The tokens the tokenizer adds around a text: at most one before and one after, which EmbeddingMetadata
    carries as the start and end tokens (the runtime adds them; it does not run the post-processor)."""
    probe = "hello world"
    plain = tok.encode(probe, add_special_tokens=False)
    full = tok.encode(probe, add_special_tokens=True)
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
    if at is None:
        raise UnsupportedEmbeddingError("the tokenizer's post-processor changes the text's tokens; only tokens "
                                        "added before and after the text are supported")
    before, after = full[:at], full[at + len(plain):]
    if len(before) > 1 or len(after) > 1:
        raise UnsupportedEmbeddingError(f"the tokenizer adds {len(before)} token(s) before and {len(after)} after "
                                        f"the text; LiteRT-LM's EmbeddingMetadata holds one start and one end token")
    return EmbeddingTokens(before[0] if before else None, after[0] if after else None)


def _output_width(config, pipeline: Pipeline) -> int:
    width = int(config.hidden_size)
    if pipeline.dense:
        first = pipeline.dense[0].weight.shape[1]
        if first != width * len(pipeline.pooling):
            raise ModelFileError(f"the first Dense module takes {first} features; the pooling gives "
                                 f"{width * len(pipeline.pooling)}")
        for a, b in zip(pipeline.dense, pipeline.dense[1:]):
            if b.weight.shape[1] != a.weight.shape[0]:
                raise ModelFileError(f"a Dense module takes {b.weight.shape[1]} features; the one before gives "
                                     f"{a.weight.shape[0]}")
        return int(pipeline.dense[-1].weight.shape[0])
    return width * len(pipeline.pooling)


def convert_embedding(hf: Any, pipeline: Pipeline, lengths: Sequence[int]) -> tuple[Converter, Converter]:
    """The embedder and the encoder (one `encoder_<N>` signature per length) as Converters, ready to be lowered
    and written (`decoder_file.write_section`; the converter's typed errors, an unsupported op with its source
    line, ..., propagate as they are)."""
    if not lengths:
        raise InvalidArgumentError("the encoder needs at least one input length")
    import torch

    import litert_torch
    from litert_torch.generative.embedding_modules import Lookup, TextEncoder

    table = hf.get_input_embeddings()
    hidden = int(hf.config.hidden_size)
    encoder = TextEncoder(hf, pipeline).eval()
    embedder = litert_torch.signature(EMBEDDER_SIGNATURE, Lookup(table).eval(),
                                      sample_kwargs={"token": torch.zeros(1, dtype=torch.int32)})

    def sample(n: int) -> dict[str, torch.Tensor]:
        return {"embeddings": torch.randn(1, n, hidden) * 0.02, "input_mask": torch.ones(1, n)}

    first, *rest = lengths
    converter = litert_torch.signature(f"{ENCODER_PREFIX}{first}", encoder, sample_kwargs=sample(first))
    for n in rest:
        converter = converter.signature(f"{ENCODER_PREFIX}{n}", encoder, sample_kwargs=sample(n))
    return embedder, converter


def write_embedding_bundle(path: str, embedder_tflite: str, encoder_tflite: str, tokenizer_json: str,
                           tokens: EmbeddingTokens, max_length: int, width: int) -> None:
    """Assemble the .litertlm bundle at `path` atomically from its files."""
    from litert_torch.generative.bundle import _builder, build

    lb = _builder()[0]
    from litert_lm_builder.runtime.proto import embedding_metadata_pb2

    meta = embedding_metadata_pb2.EmbeddingMetadata()
    meta.embedding_model_type.generic_model.SetInParent()
    if tokens.bos_token_id is not None:
        meta.bos_token.token_ids.ids.append(int(tokens.bos_token_id))
    if tokens.eos_token_id is not None:
        meta.eos_token.token_ids.ids.append(int(tokens.eos_token_id))
    meta.max_input_length = int(max_length)
    with scratch_folder("litert_bundle_") as scratch:
        meta_file = os.path.join(scratch, "embedding_metadata.pb")
        with open(meta_file, "wb") as f:
            f.write(meta.SerializeToString())
        builder = lb.LitertLmFileBuilder()
        builder.add_system_metadata(lb.Metadata(key="Authors", value="litert_torch", dtype=lb.DType.STRING))
        builder.add_system_metadata(lb.Metadata(key="embedding_dimension", value=int(width), dtype=lb.DType.INT32))
        builder.add_embedding_metadata(meta_file)
        builder.add_hf_tokenizer(tokenizer_json)
        builder.add_tflite_model(embedder_tflite, lb.TfLiteModelType.EMBEDDER)
        builder.add_tflite_model(encoder_tflite, lb.TfLiteModelType.TEXT_ENCODER)
        build(builder, path)
