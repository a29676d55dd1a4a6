"""The .litertlm bundle the LiteRT-LM runtime loads, assembled with the `litert-lm-builder` package.

A bundle holds LlmMetadata (start and stop tokens, the maximum token count, the model type and the chat
template), ExecutorMetadata (which prefill/decode inputs and outputs are KV-cache state buffers, their sequence
axis and maximum length), the Hugging Face tokenizer (tokenizer.json) and the .tflite model of type
prefill+decode. The builder takes its sections as files; they are written in a scratch folder removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from litert_torch.errors import ConversionError, ModelFileError
from litert_torch.files import atomic_file, scratch_folder
from litert_torch.generative.layout import UNPOSITIONED, LlmLayout


class BundleError(ConversionError):
    """The .litertlm bundle could not be assembled (the builder package missing, or a section it refused)."""


class BundleFileError(ModelFileError):
    """A .litertlm file is damaged or not a bundle: it cannot be read."""


@dataclass
class BundleInfo:
    """What LlmMetadata says of the model."""

    start_token_id: int | None = None  # prepended by the runtime to every prompt, when set
    stop_token_ids: list[int] = field(default_factory=list)
    stop_token_strs: list[str] = field(default_factory=list)
    chat_template: str | None = None
    max_num_tokens: int = 0


def _builder():
    try:
        import litert_lm_builder
        from litert_lm_builder.runtime.proto import executor_metadata_pb2, llm_metadata_pb2, llm_model_type_pb2
    except ImportError as exc:
        raise BundleError("reading or writing a .litertlm bundle needs the litert-lm-builder package: "
                          "pip install 'litert-torch-direct[llm]'") from exc
    return litert_lm_builder, executor_metadata_pb2, llm_metadata_pb2, llm_model_type_pb2


def write_bundle(path: str | os.PathLike, tflite_path: str, tokenizer_json: str, layout: LlmLayout,
                 info: BundleInfo, *, model_type: Any = None, sections: Sequence[tuple[str, str]] = (),
                 attention_mask: tuple[str, int | None] | None = None) -> None:
    """Write the bundle of the .tflite file `tflite_path` to `path` atomically (nothing is left behind when a
    section is refused). `model_type`: LlmMetadata's LlmModelType message (default: generic_model);
    `sections`: further models as (.tflite path, litert-lm-builder TfLiteModelType name such as
    "VISION_ENCODER"), written before the prefill/decode model; `attention_mask`: (AttentionMaskType name such as
    "ATTENTION_MASK_TYPE_VISION_BIDIRECTIONAL", sliding window or None), how LiteRT-LM fills the `mask` and
    `local_mask` inputs of a decoder that takes them."""
    lb, executor_pb, llm_pb, model_type_pb = _builder()
    meta = llm_pb.LlmMetadata()
    if info.start_token_id is not None:
        meta.start_token.token_ids.ids.append(int(info.start_token_id))
    for token in info.stop_token_ids:
        meta.stop_tokens.add().token_ids.ids.append(int(token))
    for text in info.stop_token_strs:
        meta.stop_tokens.add().token_str = text
    meta.max_num_tokens = int(info.max_num_tokens or layout.cache_length)
    meta.llm_model_type.CopyFrom(model_type if model_type is not None
                                 else model_type_pb.LlmModelType(generic_model=model_type_pb.GenericModel()))
    if info.chat_template:
        meta.jinja_prompt_template = info.chat_template

    executor = executor_pb.ExecutorMetadata()
    llm = executor.llm_executor_metadata
    # a recurrent state cannot be rolled back to an earlier position (the official exporter declares no history
    # for such models either)
    recurrent = any(name.startswith(UNPOSITIONED) for name in layout.cache_names)
    llm.max_history_size = 0 if recurrent else layout.cache_length
    for name in layout.cache_names:
        state = llm.state_buffers.add()
        state.prefill_input_name = state.prefill_output_name = name
        state.decode_input_name = state.decode_output_name = name
        is_key = name.startswith("kv_cache_k_")
        linear = name.startswith(("kv_cache_conv_", *UNPOSITIONED))
        state.type = (executor_pb.StateBuffer.TYPE_GLOBAL_KEY_CACHE if is_key
                      else executor_pb.StateBuffer.TYPE_LINEAR_ATTENTION if linear
                      else executor_pb.StateBuffer.TYPE_GLOBAL_VALUE_CACHE)
        if layout.sequence_axes[name] >= 0:  # (a recurrent state has no sequence axis)
            state.sequence_axis = layout.sequence_axes[name]
            state.maximum_sequence_length = layout.cache_length

    if attention_mask is not None:
        kind, window = attention_mask
        llm.attention_mask_settings.attention_mask_type = executor_pb.AttentionMaskType.Value(kind)
        llm.attention_mask_settings.local_attention_mask_type = executor_pb.AttentionMaskType.Value(kind)
        if window:
            llm.attention_mask_settings.sliding_window_size = int(window)

    with scratch_folder("litert_bundle_") as scratch:
        files = {"llm_metadata.pb": meta.SerializeToString(), "executor_metadata.pb": executor.SerializeToString()}
        for name, data in files.items():
            with open(os.path.join(scratch, name), "wb") as f:
                f.write(data)
        tokenizer_path = os.path.join(scratch, "tokenizer.json")
        shutil.copyfile(tokenizer_json, tokenizer_path)
        builder = lb.LitertLmFileBuilder()
        builder.add_system_metadata(lb.Metadata(key="Authors", value="litert_torch", dtype=lb.DType.STRING))
        builder.add_llm_metadata(os.path.join(scratch, "llm_metadata.pb"))
        builder.add_executor_metadata(os.path.join(scratch, "executor_metadata.pb"))
        builder.add_hf_tokenizer(tokenizer_path)
        for section, kind in sections:
            builder.add_tflite_model(section, getattr(lb.TfLiteModelType, kind))
        builder.add_tflite_model(tflite_path, lb.TfLiteModelType.PREFILL_DECODE)
        build(builder, path)


@dataclass
class StateBuffer:
    """One KV-cache pair of the executor metadata: the name its prefill and decode signatures give it (input and
    output alike), whether it holds keys or values, its sequence axis and its maximum length."""

    name: str
    # "key", "value", or "conv": a state typed TYPE_LINEAR_ATTENTION (an LFM2 or gated DeltaNet convolution state,
    # or a gated DeltaNet recurrent state, which has no sequence axis: -1 here)
    kind: str
    sequence_axis: int
    maximum_sequence_length: int


@dataclass
class Bundle:
    """What a .litertlm bundle holds, read back."""

    tflite: bytes
    tokenizer: str | None  # the tokenizer.json text
    info: BundleInfo | None  # from LlmMetadata (None when the bundle has none)
    state_buffers: list[StateBuffer] = field(default_factory=list)  # from ExecutorMetadata
    max_history_size: int | None = None
    sections: list[str] = field(default_factory=list)  # each section's kind (`section_types`)


def header_sections(path: str | os.PathLike) -> list[tuple[Any, dict[str, str]]]:
    """Each section of the .litertlm file at `path`, in order, read from its header only: its header entry (the
    flatbuffer object: `DataType()`, its items) and its string-valued items by key; empty when the file is not a
    bundle this reader knows (its reader then says why)."""
    import struct

    _builder()
    from litert_lm_builder import litertlm_core as core
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    try:
        with open(path, "rb") as f:
            if f.read(8) != core.HEADER_MAGIC_BYTES:
                return []
            f.seek(core.HEADER_END_LOCATION_BYTE_OFFSET)
            end = struct.unpack("<Q", f.read(8))[0]
            f.seek(core.HEADER_BEGIN_BYTE_OFFSET)
            header = schema.LiteRTLMMetaData.GetRootAs(f.read(end - core.HEADER_BEGIN_BYTE_OFFSET), 0)
        sections = header.SectionMetadata()
        found = []
        for i in range(sections.ObjectsLength() if sections else 0):
            section = sections.Objects(i)
            items = {}
            for j in range(section.ItemsLength()):
                item = section.Items(j)
                if item.ValueType() == schema.VData.StringValue:
                    value = schema.StringValue()
                    value.Init(item.Value().Bytes, item.Value().Pos)
                    items[item.Key().decode()] = (value.Value() or b"").decode()
            found.append((section, items))
        return found
    except (OSError, struct.error, ValueError, IndexError, AttributeError):
        return []


def section_types(path: str | os.PathLike) -> list[str]:
    """The kind of each section of the .litertlm file at `path`, in order, read from its header only: a model's
    `model_type` item (tf_lite_prefill_decode, tf_lite_vision_encoder, ...) or the section's data type
    (LlmMetadataProto, HF_Tokenizer_Zlib, ...); empty when the file is not a bundle this reader knows."""
    _builder()
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    names = {v: k for k, v in vars(schema.AnySectionDataType).items() if not k.startswith("_")}
    return [items.get("model_type") or names.get(section.DataType(), str(section.DataType()))
            for section, items in header_sections(path)]


def tokenizer_text(raw: bytes, name: str, where: str) -> str:
    """The tokenizer.json text of a bundle's tokenizer section file `name` (its bytes `raw`): a `.zlib` section
    is the uncompressed size (8 bytes, little-endian), then the zlib stream. BundleFileError when damaged."""
    try:
        return zlib.decompress(raw[8:]).decode("utf-8") if name.endswith(".zlib") else raw.decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise BundleFileError(f"the tokenizer in {where} is damaged: {exc}") from None


def unpack_bundle(path: str | os.PathLike) -> tuple[bytes, str | None]:
    """The .tflite model inside a .litertlm bundle, and its tokenizer.json text (None when it has none)."""
    bundle = read_bundle(path, metadata=False)
    return bundle.tflite, bundle.tokenizer


def build(builder: Any, path: str | os.PathLike) -> None:
    """Write the sections `builder` (a litert-lm-builder LitertLmFileBuilder) holds to `path`, atomically."""
    try:
        with atomic_file(path) as out:
            builder.build(out)
    except (ValueError, RuntimeError, OSError) as exc:
        raise BundleError(f"litert-lm-builder could not write {os.fspath(path)}: {exc}") from exc


@contextlib.contextmanager
def unpacked(path: str | os.PathLike) -> Iterator[str]:
    """A scratch folder holding every section of the bundle at `path`, removed afterwards; BundleFileError when
    the file is not a readable bundle."""
    lb = _builder()[0]
    where = os.fspath(path)
    with scratch_folder("litert_bundle_") as scratch:
        try:
            lb.litertlm_builder.unpack(where, scratch)
        except Exception as exc:  # noqa: BLE001 - the reader raises what its parser meets on a damaged file
            raise BundleFileError(f"{where} is not a readable .litertlm bundle: {exc}") from None
        yield scratch


def read_bundle(path: str | os.PathLike, metadata: bool = True) -> Bundle:
    """Every section of a .litertlm bundle we write, read back (`metadata`: the LLM and executor metadata
    too). BundleFileError when the file is damaged or holds no model."""
    lb, executor_pb, llm_pb, _ = _builder()
    where = os.fspath(path)
    with unpacked(path) as scratch:
        bundle = Bundle(b"", None, None)
        found = False
        for name in sorted(os.listdir(scratch)):
            with open(os.path.join(scratch, name), "rb") as f:
                raw = f.read()
            if name.endswith(".tflite") and (not found or name.endswith("tf_lite_prefill_decode.tflite")):
                bundle.tflite, found = raw, True  # the text decoder where there are several models
            elif "HF_Tokenizer" in name and bundle.tokenizer is None:
                bundle.tokenizer = tokenizer_text(raw, name, where)
            elif metadata and name.startswith("LlmMetadata"):
                bundle.info = _llm_info(_parsed(llm_pb.LlmMetadata(), raw, name, where))
            elif metadata and name.startswith("ExecutorMetadata"):
                executor = _parsed(executor_pb.ExecutorMetadata(), raw, name, where).llm_executor_metadata
                bundle.max_history_size = executor.max_history_size
                kinds = {executor_pb.StateBuffer.TYPE_GLOBAL_KEY_CACHE: "key",
                         executor_pb.StateBuffer.TYPE_LINEAR_ATTENTION: "conv"}
                bundle.state_buffers = [
                    StateBuffer(b.decode_input_name, kinds.get(b.type, "value"),
                                b.sequence_axis if b.HasField("sequence_axis") else -1, b.maximum_sequence_length)
                    for b in executor.state_buffers]
        if not found:
            raise BundleFileError(f"{where} holds no TFLite model")
        bundle.sections = section_types(where)
        return bundle


def _parsed(message, raw: bytes, name: str, where: str):
    """A metadata section, as the unpacker writes it (protobuf text format) or in binary."""
    from google.protobuf import text_format

    try:
        if name.endswith(".pbtext"):
            text_format.Parse(raw.decode("utf-8"), message)
        else:
            message.ParseFromString(raw)
    except Exception as exc:  # noqa: BLE001 - protobuf's parse errors have no common base
        raise BundleFileError(f"the {name} section of {where} is damaged: {exc}") from None
    return message


def _llm_info(meta) -> BundleInfo:
    stops = list(meta.stop_tokens)
    return BundleInfo(
        start_token_id=meta.start_token.token_ids.ids[0] if meta.start_token.token_ids.ids else None,
        stop_token_ids=[int(i) for t in stops for i in t.token_ids.ids],
        stop_token_strs=[t.token_str for t in stops if t.token_str],
        chat_template=meta.jinja_prompt_template or None,
        max_num_tokens=int(meta.max_num_tokens))
