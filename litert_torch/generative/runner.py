"""Running a converted LLM in LiteRT from Python: prefill, decode, generate.

The KV caches live in LiteRT tensor buffers that are bound as both the input and the output of every prefill
and decode call (the signatures name them alike), so they stay in the runtime between calls: a decode step
writes its token's keys and values in place and copies nothing else in or out. Only the token, its position
and the logits cross into Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from litert_torch.errors import (
    InvalidArgumentError, LiteRTTorchError, ModelFileError, ModelInputError, ModelLoadError, one_line,
)
from litert_torch.generative.layout import DECODE, LAYOUT_KEY, UNPOSITIONED, LlmLayout, prefill_signature
from litert_torch.metadata import decode

if TYPE_CHECKING:
    from litert_torch.generative.embedding_runner import EmbeddingRunner


class CacheFullError(ModelInputError):
    """The tokens to process do not fit in the KV cache that is left."""


@dataclass
class Sampling:
    """Greedy when `temperature` is 0 or `top_k` is 1; otherwise temperature, then top-k, then top-p."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def check(self) -> None:
        if self.temperature < 0:
            raise InvalidArgumentError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise InvalidArgumentError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InvalidArgumentError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def pick(self, logits: np.ndarray, rng: np.random.Generator) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.temperature
        order = np.argsort(-z, kind="stable")
        if self.top_k is not None:
            order = order[: self.top_k]
        probs = np.exp(z[order] - z[order[0]])
        probs /= probs.sum()
        if self.top_p is not None:
            keep = int(np.searchsorted(np.cumsum(probs), self.top_p) + 1)
            order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
        return int(rng.choice(order, p=probs))


class LlmRunner:
    """A converted LLM (the .tflite inside a bundle, or the model `export_hf` writes) run step by step.

        llm = LlmRunner(tflite_bytes, tokenizer=tok)
        for text in llm.generate("Once upon a time", max_new_tokens=32):
            print(text, end="")
    """

    def __init__(self, flatbuffer: bytes, tokenizer: Any = None, *, num_threads: int | None = None,
                 stop_token_ids: Sequence[int] | None = None):
        from litert_torch.flatbuffer.reader import read_metadata
        from litert_torch.runtime.edge_model import checked_model

        meta = read_metadata(flatbuffer)
        if LAYOUT_KEY not in meta:
            raise ModelFileError("this model was not written by the LLM exporter (no litert_torch.llm metadata)")
        try:
            self.layout = LlmLayout.from_json(decode(meta[LAYOUT_KEY]))
            stops = [int(t) for t in self.layout.stop_token_ids]
            if self.layout.start_token_id is not None:
                self.layout.start_token_id = int(self.layout.start_token_id)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ModelFileError(f"the model's {LAYOUT_KEY} metadata is malformed ({exc})") from None
        self.stop_token_ids = set(stops if stop_token_ids is None else (int(t) for t in stop_token_ids))
        self.metadata = meta  # the model's metadata entries (name -> bytes)
        self.flatbuffer = flatbuffer
        self.tokenizer = tokenizer
        _check_layout(self.layout, checked_model(flatbuffer))
        try:
            self._compiled = _compiled_model(flatbuffer, num_threads)
            self._caches = {n: self._compiled.create_input_buffer_by_name(DECODE, n)
                            for n in self.layout.cache_names}
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not load this model: {one_line(exc)}") from None
        self._io: dict[str, tuple[dict, Any]] = {}
        self.position = 0
        self.reset()

    @property
    def cache_length(self) -> int:
        return self.layout.cache_length

    def reset(self) -> None:
        """Forget every token: the next call starts at position 0."""
        for name, buffer in self._caches.items():
            buffer.write(np.zeros(self.layout.cache_shapes[name], np.float32))
        self.position = 0

    def _signature_io(self, key: str):
        if key not in self._io:
            inputs = {n: self._compiled.create_input_buffer_by_name(key, n) for n in ("tokens", "input_pos")}
            outputs = {"logits": self._compiled.create_output_buffer_by_name(key, "logits")} if key == DECODE else {}
            self._io[key] = (inputs, outputs)
        return self._io[key]

    def _run(self, key: str, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray | None:
        try:
            inputs, outputs = self._signature_io(key)
            inputs["tokens"].write(tokens.reshape(1, -1).astype(np.int32))
            inputs["input_pos"].write(positions.astype(np.int32))
            self._compiled.run_by_name(key, {**inputs, **self._caches}, {**outputs, **self._caches})
            return outputs["logits"].read(self.layout.vocab_size, np.float32) if outputs else None
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run signature {key!r}: {one_line(exc)}") from None

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        """Process `token_ids` after what is already in the cache; return the logits after the last of them.
        As LiteRT-LM does, all tokens but the last go through the prefill signatures (in chunks of the largest
        length that fits; the last chunk takes the smallest length that holds it, padded past the real tokens with
        token 0 at position 0, where later tokens overwrite the padding in the caches, and which a recurrent state
        leaves out) and the last one through decode, which gives its logits."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ModelInputError("prefill needs at least one token")
        self._check_room(len(ids))
        start, body = 0, ids[:-1]
        while start < len(body):
            left = len(body) - start
            sizes = [n for n in self.layout.prefill_lengths if self.position + n <= self.cache_length]
            if not sizes:  # no prefill signature fits the room left: the rest one token at a time
                for token in body[start:]:
                    self.decode(token)
                break
            fitting = [n for n in sizes if n >= left]
            n = fitting[0] if fitting else sizes[-1]
            take = min(n, left)
            chunk, positions = np.zeros(n, np.int64), np.zeros(n, np.int64)  # padded with 0s, as LiteRT-LM pads
            chunk[:take] = body[start:start + take]
            positions[:take] = np.arange(self.position, self.position + take)
            self._run(prefill_signature(n), chunk, positions)
            self.position += take
            start += take
        return self.decode(ids[-1])

    def decode(self, token_id: int) -> np.ndarray:
        """Process one token at the current position; return its logits."""
        self._check_room(1)
        logits = self._run(DECODE, np.array([token_id]), np.array([self.position]))
        if logits is None:
            raise ModelFileError(f"the model's {DECODE!r} signature gives no logits")
        self.position += 1
        return logits

    def _check_room(self, count: int) -> None:
        if self.position + count > self.cache_length:
            raise CacheFullError(f"{count} more token(s) at position {self.position} do not fit the KV cache of "
                                 f"{self.cache_length}; reset() or convert with a larger cache_length")

    def generate_ids(self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling | None = None, *,
                     stop: bool = True) -> Iterator[int]:
        """Yield up to `max_new_tokens` new token ids after `prompt_ids` (from a fresh cache), stopping after a
        stop token (unless `stop` is False)."""
        sampling = sampling or Sampling()
        sampling.check()
        rng = np.random.default_rng(sampling.seed)
        self.reset()
        if len(prompt_ids) + max_new_tokens - 1 > self.cache_length:
            raise CacheFullError(f"a prompt of {len(prompt_ids)} tokens and {max_new_tokens} new tokens need "
                                 f"{len(prompt_ids) + max_new_tokens - 1} cache entries; the cache holds "
                                 f"{self.cache_length}")
        logits = self.prefill(prompt_ids)
        for i in range(max_new_tokens):
            token = sampling.pick(logits, rng)
            yield token
            if (stop and token in self.stop_token_ids) or i == max_new_tokens - 1:
                return
            logits = self.decode(token)

    def generate(self, prompt: str, max_new_tokens: int = 32, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None,
                 on_token: Callable[[str], None] | None = None) -> Iterator[str]:
        """Stream the new text after `prompt` (tokenized with the model's tokenizer), piece by piece as whole
        characters: a character that a byte-level tokenizer splits over several tokens comes out once its last
        token is there (see `stream_text`)."""
        ids = self.generate_ids(self.encode(prompt), max_new_tokens, Sampling(temperature, top_k, top_p, seed))
        for piece in stream_text(ids, self.decode_text):
            if on_token is not None:
                on_token(piece)
            yield piece

    def encode(self, text: str) -> list[int]:
        """The token ids the model sees for `text`: the start token (when the model has one) and the text's
        tokens, as LiteRT-LM tokenizes a prompt."""
        if self.tokenizer is None:
            raise LiteRTTorchError("this needs the model's tokenizer (a bundle carries it; with a .tflite pass "
                                   "tokenizer=)")
        if hasattr(self.tokenizer, "backend_tokenizer"):  # a transformers tokenizer
            ids = self.tokenizer.encode(text, add_special_tokens=False)
        else:  # a tokenizers.Tokenizer
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        start = self.layout.start_token_id
        return ([start] if start is not None else []) + list(ids)

    def decode_text(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            raise LiteRTTorchError("this needs the model's tokenizer")
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


REPLACEMENT_CHARACTER = "\ufffd"


def stream_text(token_ids: Iterable[int], decode: Callable[[list[int]], str]) -> Iterator[str]:
    """The text of `token_ids` in pieces, each piece as soon as its characters are complete.

    A byte-level BPE splits a character such as 'é' or '日' over several tokens; until its last byte arrives, the
    text of the tokens so far ends in U+FFFD. So a piece is what the text of all tokens so far adds to the text
    already given, up to the last complete character; the rest waits for the next token. Bytes that never
    complete a character come out at the end, as the tokenizer writes them."""
    ids: list[int] = []
    given = ""
    for token in token_ids:
        ids.append(token)
        ready = decode(ids).rstrip(REPLACEMENT_CHARACTER)
        # a tokenizer may also rewrite earlier text once it sees more (a leading space it drops): wait for that
        if len(ready) > len(given) and ready.startswith(given):
            yield ready[len(given):]
            given = ready
    if ids:
        text = decode(ids)
        if len(text) > len(given):
            yield text[len(given):]


def load(path: str, *, num_threads: int | None = None) -> LlmRunner | EmbeddingRunner:
    """A runner for a converted LLM: a .litertlm bundle (its model and tokenizer) or the exporter's .tflite (with
    the tokenizer.json beside it, when there is one). A text-embedding bundle gives an `EmbeddingRunner`
    (`embed(texts)`, see embedding_runner.py); a speech-to-text or image+text bundle is refused
    (`litert_torch.generative.load` gives its `AsrRunner` or `VlmRunner`)."""
    import os

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelInputError(f"{path} does not exist")
    tokenizer_text = None
    if path.endswith(".litertlm"):
        from litert_torch.generative import embedding_runner

        if embedding_runner.is_embedding_bundle(path):
            return embedding_runner.load_embedding(path, num_threads=num_threads)
        from litert_torch.generative.bundle import section_types

        sections = section_types(path)
        for section, kind in (("tf_lite_vision_encoder", "an image+text"),
                              ("tf_lite_audio_encoder_hw", "a speech-to-text")):
            if section in sections:
                raise ModelFileError(f"{path} is {kind} bundle: load it with litert_torch.generative.load")
        from litert_torch.generative.bundle import unpack_bundle

        flatbuffer, tokenizer_text = unpack_bundle(path)
    else:
        with open(path, "rb") as f:
            flatbuffer = f.read()
        beside = os.path.join(os.path.dirname(path), "tokenizer.json")
        if os.path.isfile(beside):
            with open(beside, encoding="utf-8") as f:
                tokenizer_text = f.read()
    tokenizer = None
    if tokenizer_text is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(tokenizer_text)
    return LlmRunner(flatbuffer, tokenizer, num_threads=num_threads)


def _check_layout(layout: LlmLayout, model) -> None:
    """The layout metadata must describe the model's own signatures: a runner sizes every buffer it writes
    from it. ModelFileError naming the first thing that differs; the layout's values are left as plain ints."""

    def bad(what: str) -> ModelFileError:
        return ModelFileError(f"the model's {LAYOUT_KEY} metadata does not match the model: {what}")

    try:
        names = [str(n) for n in layout.cache_names]
        shapes = {str(n): [int(d) for d in s] for n, s in layout.cache_shapes.items()}
        lengths = [int(n) for n in layout.prefill_lengths]
        vocab, cache = int(layout.vocab_size), int(layout.cache_length)
        hidden = 0
        if layout.embeddings_input:
            if layout.hidden_size is None:  # reported as malformed below
                raise TypeError("the signatures take embeddings but hidden_size is missing")
            hidden = int(layout.hidden_size)
        axes = {n: int(layout.sequence_axes[n]) for n in names}
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise bad(f"malformed ({exc})") from None
    if sorted(shapes) != sorted(names) or not names:
        raise bad("its cache names and cache shapes differ")
    signatures = {s.key: s for s in model.signatures}
    for key, logits in [(DECODE, True), *((prefill_signature(n), False) for n in lengths)]:
        sig = signatures.get(key)
        if sig is None:
            raise bad(f"no signature {key!r}")
        graph = model.subgraphs[sig.subgraph]
        inputs = dict(zip(sig.input_names, graph.inputs))
        outputs = dict(zip(sig.output_names, graph.outputs))
        length = 1 if key == DECODE else int(key.split("_")[-1])
        if layout.embeddings_input:  # an image+text model's decoder (vlm.py)
            expected = {"embeddings": ([1, length, hidden], np.float32), "input_pos": ([length], np.int32),
                        "mask": ([1, 1, length, cache], np.float32)}
        else:
            expected = {"tokens": ([1, length], np.int32), "input_pos": ([length], np.int32)}
        expected.update((n, (shapes[n], np.float32)) for n in names)
        for name, (shape, dtype) in expected.items():
            t = inputs.get(name)
            if t is None or list(t.shape) != list(shape) or np.dtype(t.dtype) != np.dtype(dtype):
                raise bad(f"signature {key!r} input {name!r} is not {dtype.__name__} {list(shape)}")
        for name in names:
            t = outputs.get(name)
            if t is None or list(t.shape) != shapes[name]:
                raise bad(f"signature {key!r} output {name!r} is not {shapes[name]}")
        if logits:
            t = outputs.get("logits")
            if t is None or not t.shape or t.shape[-1] != vocab or np.dtype(t.dtype) != np.float32:
                raise bad(f"signature {key!r} has no float32 logits over {vocab} tokens")
    positional = {n: s for n, s in shapes.items() if not (n.startswith(UNPOSITIONED) and axes[n] == -1)}
    if any(not 0 <= axes[n] < len(s) or s[axes[n]] != cache for n, s in positional.items()):
        raise bad(f"a cache is not {cache} positions long")
    layout.cache_names, layout.cache_shapes, layout.sequence_axes = names, shapes, axes
    layout.prefill_lengths, layout.vocab_size, layout.cache_length = lengths, vocab, cache


def _compiled_model(flatbuffer: bytes, num_threads: int | None):
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    from litert_torch import logs

    logs.apply_native()
    options = None
    if num_threads is not None:
        from ai_edge_litert.cpu_options import CpuOptions
        from ai_edge_litert.options import Options

        options = Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=CpuOptions(num_threads=num_threads))
    if options is None:
        return CompiledModel.from_buffer(flatbuffer, HardwareAccelerator.CPU, environment=_cpu_environment())
    return CompiledModel.from_buffer(flatbuffer, options=options, environment=_cpu_environment())


def _cpu_environment():
    """A LiteRT environment for the CPU alone. Left to itself, LiteRT tries every vendor's NPU compiler plugin
    and dispatch library in the ai-edge-litert wheel, warning for each one it cannot load (Intel's needs OpenVINO
    installed); the runner runs on the CPU, so both are looked for in an empty folder, read when the environment
    is made."""
    import tempfile

    from ai_edge_litert.environment import Environment

    with tempfile.TemporaryDirectory(prefix="litert_no_plugins_") as empty:
        return Environment.create(compiler_plugin_path=empty, dispatch_library_path=empty)
