"""Running a text-embedding bundle in LiteRT from Python, as LiteRT-LM's EmbeddingEngine runs it.

    from litert_torch import generative
    vectors = generative.load("out/model.litertlm").embed(["a sentence", "another one"])   # [2, D]

Each text is tokenized without the tokenizer's post-processor, the bundle's start and end tokens are put around
it, each token's row comes from the `embedder` signature, and the rows (padded with zeros) and the mask go to the
shortest `encoder_<N>` signature that holds them. The output is the encoder's, as the model computes it (with
the L2 normalisation its sentence-transformers modules ask for, and none otherwise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from litert_torch.errors import InvalidArgumentError, ModelFileError, ModelInputError, ModelLoadError, one_line

EMBEDDER_SIGNATURE = "embedder"
ENCODER_PREFIX = "encoder_"


class InputTooLongError(ModelInputError):
    """A text has more tokens (its start and end tokens included) than the longest encoder signature holds."""


@dataclass
class EmbeddingBundle:
    """What a text-embedding .litertlm bundle holds, read back."""

    embedder: bytes
    encoder: bytes
    tokenizer: str  # the tokenizer.json text
    bos_token_id: int | None
    eos_token_id: int | None
    max_input_length: int | None
    model_type: str  # "generic_model" or "embedding_gemma_v2"


def is_embedding_bundle(path: str) -> bool:
    """Whether the .litertlm file at `path` has an EmbeddingMetadata section (read from its header only)."""
    import struct

    from litert_lm_builder import litertlm_core as core
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    try:
        with open(path, "rb") as f:
            if f.read(8) != core.HEADER_MAGIC_BYTES:
                return False
            f.seek(core.HEADER_END_LOCATION_BYTE_OFFSET)
            end = struct.unpack("<Q", f.read(8))[0]
            f.seek(core.HEADER_BEGIN_BYTE_OFFSET)
            header = schema.LiteRTLMMetaData.GetRootAs(f.read(end - core.HEADER_BEGIN_BYTE_OFFSET), 0)
        sections = header.SectionMetadata()
        count = sections.ObjectsLength() if sections else 0
        return any(sections.Objects(i).DataType() == schema.AnySectionDataType.EmbeddingMetadataProto
                   for i in range(count))
    except (OSError, struct.error, ValueError, IndexError):  # not a bundle this reader knows: load() says why
        return False


def read_embedding_bundle(path: str) -> EmbeddingBundle:
    """Every section of a text-embedding bundle; ModelFileError when one is missing or damaged."""
    from litert_torch.generative.bundle import BundleFileError, _builder, _parsed, tokenizer_text, unpacked

    _builder()  # litert-lm-builder installed, or a clear error
    from litert_lm_builder.runtime.proto import embedding_metadata_pb2

    where = os.fspath(path)
    with unpacked(path) as scratch:
        found: dict[str, Any] = {}
        for name in sorted(os.listdir(scratch)):
            with open(os.path.join(scratch, name), "rb") as f:
                raw = f.read()
            if name.endswith("tf_lite_embedder.tflite"):
                found["embedder"] = raw
            elif name.endswith("tf_lite_text_encoder.tflite"):
                found["encoder"] = raw
            elif "HF_Tokenizer" in name:
                found["tokenizer"] = tokenizer_text(raw, name, where)
            elif name.startswith("EmbeddingMetadata"):
                found["meta"] = _parsed(embedding_metadata_pb2.EmbeddingMetadata(), raw, name, where)
    missing = [k for k in ("meta", "tokenizer", "embedder", "encoder") if k not in found]
    if missing:
        names = {"meta": "EmbeddingMetadata", "tokenizer": "tokenizer", "embedder": "TF_LITE_EMBEDDER model",
                 "encoder": "TF_LITE_TEXT_ENCODER model"}
        raise BundleFileError(f"{where} is not a text-embedding bundle: it has no "
                              f"{', '.join(names[k] for k in missing)}")
    meta = found["meta"]
    return EmbeddingBundle(
        found["embedder"], found["encoder"], found["tokenizer"],
        meta.bos_token.token_ids.ids[0] if meta.bos_token.token_ids.ids else None,
        meta.eos_token.token_ids.ids[0] if meta.eos_token.token_ids.ids else None,
        meta.max_input_length if meta.HasField("max_input_length") else None,
        meta.embedding_model_type.WhichOneof("model_type") or "generic_model")


class EmbeddingRunner:
    """A converted text-embedding model: `embed(texts)` -> float32 [len(texts), D]."""

    def __init__(self, bundle: EmbeddingBundle, *, num_threads: int | None = None):
        from tokenizers import Tokenizer

        self.bundle = bundle
        try:
            self.tokenizer = Tokenizer.from_str(bundle.tokenizer)
        except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception type
            raise ModelFileError(f"the bundle's tokenizer.json cannot be read: {one_line(exc)}") from None
        self._embedder = _signature_runner(bundle.embedder, EMBEDDER_SIGNATURE, num_threads)
        self._encoder_model = _interpreter(bundle.encoder, num_threads)
        signatures = self._encoder_model.get_signature_list()
        lengths = {}
        for key, io in signatures.items():
            if key.startswith(ENCODER_PREFIX) and key[len(ENCODER_PREFIX):].isdigit():
                if sorted(io["inputs"]) != ["embeddings", "input_mask"] or not io["outputs"]:
                    raise ModelFileError(f"encoder signature {key!r} does not take `embeddings` and `input_mask`")
                lengths[int(key[len(ENCODER_PREFIX):])] = key
        if not lengths:
            raise ModelFileError("the bundle's text encoder has no encoder_<N> signature")
        self.lengths = sorted(lengths)
        self._encoder_keys = lengths
        self._encoders: dict[str, Any] = {}

    @property
    def max_length(self) -> int:
        """The most tokens a text may have, its start and end tokens included."""
        return self.lengths[-1]

    def encode(self, text: str) -> list[int]:
        """The token ids the model sees for `text`: the start token, the text's tokens, the end token."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"a text to embed must be a str, got {type(text).__name__}")
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        bos, eos = self.bundle.bos_token_id, self.bundle.eos_token_id
        return ([bos] if bos is not None else []) + ids + ([eos] if eos is not None else [])

    def embed(self, texts: str | Sequence[str], *, truncate: bool = False) -> np.ndarray:
        """The embedding of each text, float32 [len(texts), D] (one text: [1, D]). A text longer than the
        longest input is an InputTooLongError, or with `truncate` cut to it, its end token kept (as LiteRT-LM's
        InputOverflowStrategy.TRUNCATE and a tokenizer's truncation do)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise InvalidArgumentError("embed needs at least one text")
        encoded = [self.encode(t) for t in texts]
        if truncate:
            encoded = [self.truncated(ids) for ids in encoded]
        return np.concatenate([self.embed_ids(ids) for ids in encoded], axis=0)

    def truncated(self, ids: Sequence[int]) -> list[int]:
        """`ids` cut to the longest input, the end token kept."""
        ids = list(ids)
        if len(ids) <= self.max_length:
            return ids
        eos = self.bundle.eos_token_id
        return ids[:self.max_length - 1] + [eos] if eos is not None else ids[:self.max_length]

    def embed_ids(self, ids: Sequence[int]) -> np.ndarray:
        """The embedding of one tokenized text (its special tokens included), float32 [1, D]."""
        if not ids:
            raise ModelInputError("a text with no tokens has no embedding")
        if len(ids) > self.max_length:
            raise InputTooLongError(f"a text of {len(ids)} tokens (start and end tokens included) exceeds the "
                                    f"model's longest input, {self.max_length} tokens; export with longer "
                                    f"prefill_lengths or shorten the text")
        length = next(n for n in self.lengths if n >= len(ids))
        try:
            parts = [next(iter(self._embedder(token=np.array([t], np.int32)).values())) for t in ids]
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run the embedder: {one_line(exc)}") from None
        rows = np.concatenate(parts, axis=1).astype(np.float32)
        embeddings = np.zeros((1, length, rows.shape[-1]), np.float32)
        embeddings[:, :len(ids)] = rows
        mask = np.zeros((1, length), np.float32)
        mask[:, :len(ids)] = 1.0
        key = self._encoder_keys[length]
        try:
            if key not in self._encoders:
                self._encoders[key] = self._encoder_model.get_signature_runner(key)
            outputs = self._encoders[key](embeddings=embeddings, input_mask=mask)
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run signature {key!r}: {one_line(exc)}") from None
        return np.asarray(next(iter(outputs.values())), np.float32).reshape(1, -1)


def _interpreter(flatbuffer: bytes, num_threads: int | None):
    from ai_edge_litert.interpreter import Interpreter

    try:
        return Interpreter(model_content=flatbuffer, num_threads=num_threads)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"LiteRT could not load the model: {one_line(exc)}") from None


def _signature_runner(flatbuffer: bytes, key: str, num_threads: int | None):
    interpreter = _interpreter(flatbuffer, num_threads)
    signatures = interpreter.get_signature_list()
    if key not in signatures or list(signatures[key]["inputs"]) != ["token"]:
        raise ModelFileError(f"the bundle's embedder has no signature {key!r} taking `token`")
    try:
        return interpreter.get_signature_runner(key)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"LiteRT could not load the embedder: {one_line(exc)}") from None


def load_embedding(path: str, *, num_threads: int | None = None) -> EmbeddingRunner:
    """A runner for the text-embedding bundle at `path`."""
    return EmbeddingRunner(read_embedding_bundle(path), num_threads=num_threads)
