"""`inspect`: what a .tflite file (or the model and sections of a .litertlm bundle) holds, from our
bounds-checked readers (never the LiteRT runtime)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from litert_torch.errors import ModelFileError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.delegates.plan import PLAN_KEY, DelegatePlan
from litert_torch.metadata import IO_KEY, SOURCE_MAP_KEY, decode, decode_source_map

from litert_convert.errors import BadInput


def describe(data: bytes, path: str) -> dict[str, Any]:
    """A JSON-ready summary of the model in `data`."""
    try:
        model = read_model(data)
    except ModelFileError as exc:
        raise BadInput(f"{path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - anything the reader did not anticipate is still bad input, never a crash
        raise BadInput(f"{path}: unreadable TFLite model ({type(exc).__name__})") from None
    summary: dict[str, Any] = {"path": path, "bytes": len(data), "description": model.description,
                               "subgraphs": [], "signatures": [], "metadata": {}}
    for graph in model.subgraphs:
        tensors = graph.tensors()
        constant_bytes = sum(t.data.nbytes for t in tensors if t.data is not None)
        activation_bytes = sum(t.size * t.dtype.itemsize for t in tensors if not t.is_constant)
        summary["subgraphs"].append({
            "name": graph.name, "ops": len(graph.ops), "tensors": len(tensors),
            "constant_bytes": int(constant_bytes), "activation_bytes": int(activation_bytes),
            "op_histogram": dict(Counter(op.opcode for op in graph.ops).most_common()),
            "largest_constants": [
                {"name": t.name, "shape": list(t.shape), "dtype": str(t.dtype), "bytes": int(t.values.nbytes)}
                for t in sorted((t for t in tensors if t.is_constant), key=lambda t: -t.values.nbytes)[:5]],
        })
    io = _io_metadata(model)
    for sig in model.signatures:
        if not 0 <= sig.subgraph < len(model.subgraphs):
            continue
        graph = model.subgraphs[sig.subgraph]
        axes = (io.get(sig.key) or {}).get("dynamic_axes") or {}
        summary["signatures"].append({
            "key": sig.key, "subgraph": sig.subgraph,
            "inputs": [_spec(n, t, axes.get(n)) for n, t in zip(sig.input_names, graph.inputs)],
            "outputs": [_spec(n, t) for n, t in zip(sig.output_names, graph.outputs)],
        })
    for key, raw in model.metadata.items():
        entry: dict[str, Any] = {"bytes": len(raw)}
        if key in (SOURCE_MAP_KEY, IO_KEY, PLAN_KEY):
            try:
                entry["value"] = decode(raw)
            except ValueError:
                entry["value"] = None
            if key == SOURCE_MAP_KEY and entry["value"] is not None:
                entry["ops"] = decode_source_map(entry["value"])
        summary["metadata"][key] = entry
    return summary


BUNDLE_MAGIC = b"LITERTLM"


def describe_bundle(path: str) -> dict[str, Any]:
    """describe() of the model inside the .litertlm bundle at `path`, with what its other sections say."""
    from dataclasses import asdict

    from litert_torch.generative.bundle import BundleInfo, read_bundle
    from litert_torch.generative.embedding_runner import is_embedding_bundle

    if is_embedding_bundle(path):
        return _describe_embedding_bundle(path)
    from litert_torch.generative.asr_runner import is_asr_bundle

    if is_asr_bundle(path):
        return _describe_asr_bundle(path)
    try:
        bundle = read_bundle(path)
    except ModelFileError as exc:
        raise BadInput(str(exc)) from None
    summary = describe(bundle.tflite, f"{path} (its model)")
    summary["bundle"] = {
        "path": path, "tokenizer_bytes": len(bundle.tokenizer.encode()) if bundle.tokenizer else 0,
        **asdict(bundle.info or BundleInfo()),  # start and stop tokens, chat template, maximum tokens
        "max_history_size": bundle.max_history_size,
        "state_buffers": [asdict(b) for b in bundle.state_buffers],
        "sections": bundle.sections,
    }
    return summary


def _describe_embedding_bundle(path: str) -> dict[str, Any]:
    """describe() of a text-embedding bundle's encoder, with its other sections (docs/EMBEDDINGS.md)."""
    from litert_torch.generative.embedding_runner import read_embedding_bundle

    try:
        bundle = read_embedding_bundle(path)
    except ModelFileError as exc:
        raise BadInput(str(exc)) from None
    summary = describe(bundle.encoder, f"{path} (its text encoder)")
    summary["bundle"] = {"path": path, "kind": "text_embedding", "model_type": bundle.model_type,
                         "tokenizer_bytes": len(bundle.tokenizer.encode()), "bos_token_id": bundle.bos_token_id,
                         "eos_token_id": bundle.eos_token_id, "max_input_length": bundle.max_input_length,
                         "embedder_bytes": len(bundle.embedder)}
    return summary


def _describe_asr_bundle(path: str) -> dict[str, Any]:
    """describe() of a speech-to-text bundle's decoder, with its encoder's signatures and its other sections
    (docs/ASR.md)."""
    from litert_torch.generative.asr_runner import read_asr_bundle

    try:
        bundle = read_asr_bundle(path)
    except ModelFileError as exc:
        raise BadInput(str(exc)) from None
    summary = describe(bundle.decoder, f"{path} (its decoder)")
    encoder = describe(bundle.encoder, f"{path} (its audio encoder)")
    cfg = bundle.config
    summary["bundle"] = {
        "path": path, "kind": "automatic_speech_recognition", "model_type": cfg.model_type,
        "sections": ["tokenizer", "tf_lite_audio_encoder_hw (encode)", "tf_lite_prefill_decode (prefill, decode)",
                     "asr configuration"],
        "tokenizer_bytes": len(bundle.tokenizer.encode()), "encoder_bytes": len(bundle.encoder),
        "encoder_signatures": encoder["signatures"], "prompt": cfg.prompt, "eos_token_ids": cfg.eos_token_ids,
        "suppress_tokens": cfg.suppress_tokens, "begin_suppress_tokens": cfg.begin_suppress_tokens,
        "max_length": cfg.max_length, "cache_length": cfg.max_target_positions,
        "frontend": cfg.frontend.to_json()}
    return summary


def _io_metadata(model) -> dict[str, Any]:
    from litert_torch.metadata import read_json

    try:
        return (read_json(model.metadata, IO_KEY) or {}).get("signatures", {}) or {}
    except Exception:  # noqa: BLE001 - the metadata is only a display aid here; a bad entry shows as -1 dims
        return {}


def _spec(name: str, tensor, axes: dict | None = None) -> dict[str, Any]:
    """A signature tensor: its shape (-1 where dynamic) and, for display, the dynamic axes as declared
    ("batch<=8", "2<=seq<=512")."""
    shape = [int(d) for d in (tensor.shape_signature if tensor.shape_signature is not None else tensor.shape)]
    dims: list[Any] = list(shape)
    for axis, entry in (axes or {}).items():
        try:
            dim, low, high = entry
            axis = int(axis)
        except (TypeError, ValueError):
            continue
        if 0 <= axis < len(dims) and dims[axis] < 0:
            dims[axis] = f"{dim}<={high}" if low <= 1 else f"{low}<={dim}<={high}"
    spec = {"name": name, "shape": shape, "dtype": str(tensor.dtype)}
    if dims != shape:
        spec["dims"] = dims
    return spec


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def render(summary: dict[str, Any]) -> str:
    lines = _render_bundle(summary["bundle"]) if "bundle" in summary else []
    lines.append(f"{summary['path']}: {_mb(summary['bytes'])}, {len(summary['subgraphs'])} subgraph(s)"
                 + (f", description {summary['description']!r}" if summary["description"] else ""))
    for sig in summary["signatures"]:
        lines.append(f"signature {sig['key']!r} (subgraph {sig['subgraph']})")
        for kind in ("inputs", "outputs"):
            for t in sig[kind]:
                dims = "[" + ", ".join(str(d) for d in t.get("dims", t["shape"])) + "]"
                lines.append(f"  {kind[:-1]:<7} {t['name']:<24} {dims:<20} {t['dtype']}")
    for i, graph in enumerate(summary["subgraphs"]):
        lines.append(f"subgraph {i} {graph['name']!r}: {graph['ops']} ops, {graph['tensors']} tensors, "
                     f"constants {_mb(graph['constant_bytes'])}, activations {_mb(graph['activation_bytes'])}")
        histogram = ", ".join(f"{op} {n}" for op, n in graph["op_histogram"].items())
        lines.append(f"  ops: {histogram or '(none)'}")
        for t in graph["largest_constants"]:
            lines.append(f"  constant {t['name']:<40} {str(t['shape']):<20} {t['dtype']:<8} {_mb(t['bytes'])}")
    if summary["metadata"]:
        lines.append("metadata:")
    for key, entry in summary["metadata"].items():
        value = entry.get("value")
        if key == SOURCE_MAP_KEY and isinstance(value, dict):
            ops = [e for g in decode_source_map(value) for e in g]
            mapped = [e for e in ops if e]
            lines.append(f"  {key}: {len(mapped)} of {len(ops)} ops traced to PyTorch source")
            for entry_ in mapped[:5]:
                lines.append(f"    {entry_.get('target')} <- {entry_.get('location')}")
            if len(mapped) > 5:
                lines.append(f"    ... ({len(mapped) - 5} more; --json for all)")
        elif key == PLAN_KEY and isinstance(value, dict):
            try:
                lines += [f"  {key}: {line}" for line in DelegatePlan.from_json(value).render().splitlines()]
            except (KeyError, TypeError):
                lines.append(f"  {key}: {entry['bytes']} bytes (unreadable)")
        elif key == IO_KEY and isinstance(value, dict):
            for sig, io in value.get("signatures", {}).items():
                lines.append(f"  {key}: {sig}: inputs {io.get('inputs')} ({io.get('input_dtypes')}), "
                             f"outputs {io.get('outputs')}")
        else:
            lines.append(f"  {key}: {entry['bytes']} bytes")
    return "\n".join(lines)


def _render_bundle(bundle: dict[str, Any]) -> list[str]:
    if bundle.get("kind") == "automatic_speech_recognition":
        return _render_asr_bundle(bundle)
    if bundle.get("kind") == "text_embedding":
        return [f"{bundle['path']}: LiteRT-LM text-embedding bundle ({bundle['model_type']})",
                f"  tokens: start {bundle['bos_token_id']}, end {bundle['eos_token_id']}, at most "
                f"{bundle['max_input_length']}",
                f"  tokenizer: {_mb(bundle['tokenizer_bytes'])}; embedder: {_mb(bundle['embedder_bytes'])}"]
    template = bundle["chat_template"]
    shown = "none" if not template else (repr(template[:60]) + (f" ... ({len(template)} characters)"
                                                                if len(template) > 60 else ""))
    stops = [*map(str, bundle["stop_token_ids"]), *map(repr, bundle["stop_token_strs"])]
    lines = [f"{bundle['path']}: LiteRT-LM bundle",
             f"  tokens: start {bundle['start_token_id']}, stop {', '.join(stops) or 'none'}, at most "
             f"{bundle['max_num_tokens']}",
             f"  tokenizer: {_mb(bundle['tokenizer_bytes'])}; chat template {shown}",
             f"  KV cache: {len(bundle['state_buffers'])} state buffers of {bundle['max_history_size']} positions"
             + (" (no rollback history)" if not bundle["max_history_size"] else "")]
    if bundle.get("sections"):
        lines.insert(1, f"  sections: {', '.join(bundle['sections'])}")
    for b in bundle["state_buffers"][:4]:
        axis = "no sequence axis" if b["sequence_axis"] < 0 else f"sequence axis {b['sequence_axis']}"
        lines.append(f"    {b['name']:<16} {b['kind']:<6} {axis}")
    if len(bundle["state_buffers"]) > 4:
        lines.append(f"    ... ({len(bundle['state_buffers']) - 4} more; --json for all)")
    return lines


def _render_asr_bundle(bundle: dict[str, Any]) -> list[str]:
    frontend = bundle["frontend"]
    shown = (f"raw samples, {frontend['sampling_rate']} Hz, windows of {frontend['samples']} samples"
             if frontend.get("kind") == "raw" else
             f"log-mel, {frontend['feature_size']} bins, {frontend['sampling_rate']} Hz, {frontend['chunk_length']} s "
             f"windows")
    lines = [f"{bundle['path']}: LiteRT-LM speech-to-text bundle ({bundle['model_type']})",
             f"  sections: {', '.join(bundle['sections'])}",
             f"  frontend: {shown}",
             f"  prompt {bundle['prompt']}, stop {bundle['eos_token_ids']}, max_length {bundle['max_length']}, "
             f"self-attention cache {bundle['cache_length']} positions",
             f"  suppressed tokens {len(bundle['suppress_tokens'])}, at the first step "
             f"{len(bundle['begin_suppress_tokens'])}",
             f"  tokenizer: {_mb(bundle['tokenizer_bytes'])}; audio encoder: {_mb(bundle['encoder_bytes'])}"]
    for sig in bundle["encoder_signatures"]:
        lines.append(f"  encoder signature {sig['key']!r}")
        for kind in ("inputs", "outputs"):
            for t in sig[kind]:
                lines.append(f"    {kind[:-1]:<7} {t['name']:<24} {str(t['shape']):<20} {t['dtype']}")
    return lines
