"""Speech-to-text speed, side by side with the official exporter, for random Whispers of whisper-tiny's and
whisper-base's sizes (Whisper's 51865-token vocabulary) and a random Moonshine of moonshine-tiny's sizes, float32,
one thread, on the CPU (XNNPACK), on a 2 s clip:

- our export (`export(task="automatic_speech_recognition")`) in a fresh process: wall time and peak RSS;
- our runner on its bundle: the encoder's latency, the time to the first token (encoder, prompt prefill, argmax;
  the encoder's input computed beforehand), the decode time per token (one token against the self-attention
  KV cache, the cross-attention keys and values computed once by the encoder), and its greedy tokens against
  Hugging Face's `generate` (LiteRT-LM cannot run speech-to-text bundles: docs/ASR.md says why);
- for Whisper, a decoder that re-runs its whole token window every step (no KV cache, the layout of the official
  exporter's ASR decode signature), converted by us from the same model and given the same precomputed
  cross-attention keys and values: the KV cache's decode speedup over it, measured in the same run;
- the official exporter (litert-torch in bench/.venv-official) on the same model directory: its default export,
  and, where that fails, its non-bundle ASR export (`bundle_litert_lm=False`: one .tflite with an `encode`
  signature and a `decode` signature over a fixed window of ceil(input_sec * 8 / 32) * 32 tokens that takes the
  encoder's hidden states and re-runs every window token, the cross-attention projections included, each
  step), whose encoder latency, time to the first token, decode time per token and greedy tokens are measured
  here in the same runtime and on the same thread count as ours. Moonshine's encoder takes a fixed window of
  samples: both exporters get `input_sec` = the clip's length for it.

    python bench/asr.py [--sizes tiny,base,moonshine-tiny] [--tokens 32] [--threads 1] [--repeats 3]
                        [--official-input-sec 30] [--no-official]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

# whisper-tiny's and whisper-base's sizes (openai/whisper-tiny, openai/whisper-base), and a smaller set for a
# quick run
SIZES = {
    "tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6, decoder_attention_heads=6,
                 encoder_ffn_dim=1536, decoder_ffn_dim=1536, max_target_positions=448),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
                 encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_target_positions=448),
    "small-test": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_target_positions=448),
}
# moonshine-tiny's sizes (UsefulSensors/moonshine-tiny), with its 32768-token vocabulary
MOONSHINE = {
    "moonshine-tiny": dict(hidden_size=288, intermediate_size=1152, encoder_num_hidden_layers=6,
                           decoder_num_hidden_layers=6, encoder_num_attention_heads=8, decoder_num_attention_heads=8,
                           max_position_embeddings=194),
}
TASK = "automatic_speech_recognition"
CLIP_SECONDS = 2.0


def save_model(directory: str, size: str) -> str:
    """A random Whisper of `size` with Whisper's 51865-token output (the projection [vocab, d_model] weighs on every
    step) and the tiny example's tokenizer (which names fewer tokens: only the ids are compared here), saved as a
    model directory."""
    import torch
    import transformers

    from litert_torch.generative import asr_examples
    from litert_torch.generative.examples import spread_weights

    tok = asr_examples.whisper_tokenizer()
    ids = asr_examples.special_ids(tok)
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=51865, num_mel_bins=80, max_source_positions=1500, **SIZES[size],
        decoder_start_token_id=ids["<|startoftranscript|>"], bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    hf = spread_weights(transformers.WhisperForConditionalGeneration(config).eval(), std=0.08)
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"], no_timestamps_token_id=ids["<|notimestamps|>"],
        forced_decoder_ids=[[1, ids["<|en|>"]], [2, ids["<|transcribe|>"]]], max_length=448)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    asr_examples.feature_extractor().save_pretrained(directory)
    return directory


def save_moonshine(directory: str, size: str) -> str:
    """A random Moonshine of `size` with its 32768-token output and the tiny example's tokenizer and raw-audio
    feature extractor (asr_examples.save_tiny_moonshine's), saved as a model directory."""
    import torch
    import transformers

    from litert_torch.generative import asr_examples
    from litert_torch.generative.examples import spread_weights, tokenizer

    tok = tokenizer()
    torch.manual_seed(0)
    config = transformers.MoonshineConfig(vocab_size=32768, **MOONSHINE[size], decoder_start_token_id=tok.bos_token_id,
                                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                          pad_token_id=tok.pad_token_id)
    hf = spread_weights(transformers.MoonshineForConditionalGeneration(config).eval(), std=0.08)
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=tok.bos_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, max_length=config.max_position_embeddings)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=asr_examples.SAMPLING_RATE, padding_value=0.0,
                                          do_normalize=False, return_attention_mask=True).save_pretrained(directory)
    return directory


def window_decoder(hf, window: int):
    """The baseline: tokens [1, W] (the prompt and the tokens so far, padded), `last` int32 [1] (the index of the
    last real token), the cross keys and values -> `logits` [1, 1, V] of that token, recomputing every token's
    self-attention over the window at each call."""
    import torch

    from litert_torch.generative.asr_modules import WhisperDecoder
    from litert_torch.lower.aten.llm_ops import embedding_lookup

    class WindowDecoder(WhisperDecoder):
        def forward(self, tokens, last, **cross):
            x = embedding_lookup(self.embed, tokens) + self.positions[:window][None]
            slots = torch.arange(window)
            mask = torch.where(slots[None, :] <= slots[:, None], 0.0, torch.finfo(torch.float32).min)
            for i, layer in enumerate(self.layers):
                h = layer.self_attn_layer_norm(x)
                attn = layer.self_attn
                q = self._heads(attn.q_proj(h) * attn.scaling, window)
                k = self._heads(attn.k_proj(h), window)
                v = self._heads(attn.v_proj(h), window)
                x = x + attn.out_proj(self._attend(q, k, v.transpose(2, 3), mask, window))
                h = layer.encoder_attn_layer_norm(x)
                cross_attn = layer.encoder_attn
                q = self._heads(cross_attn.q_proj(h) * cross_attn.scaling, window)
                x = x + cross_attn.out_proj(self._attend(q, cross[f"cross_k_{i}"], cross[f"cross_v_{i}"], None, window))
                x = x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))
            picked = torch.index_select(x, 1, last)
            return {"logits": self.proj(self.norm(picked))}

    return WindowDecoder(hf, window).eval()



def _ms(seconds: list[float]) -> float:
    return 1000 * float(np.median(seconds))


def causal_mask(window: int) -> np.ndarray:
    """The official decode signature's mask [1, 1, W, W]: 0 on and below the diagonal, -inf above."""
    return np.where(np.tril(np.ones((window, window), bool)), 0.0, -np.inf).astype(np.float32)[None, None]


class OfficialAsr:
    """The official non-bundle ASR .tflite: `encode` (features -> the encoder's hidden states) and `decode` (the
    hidden states, the window's tokens [1, W] and a mask [1, 1, W, W] -> logits [1, W, V]), its buffers made once,
    the hidden states and the causal mask written once per utterance."""

    def __init__(self, path: str, threads: int):
        from litert_torch.generative.runner import _compiled_model

        with open(path, "rb") as f:
            self.model = _compiled_model(f.read(), threads)
        details = self.model.get_input_tensor_details("decode")
        self.window = details["args_1"]["shape"][1]
        self.hidden_size = int(np.prod(details["args_0"]["shape"]))
        self.encode_in = {"args_0": self.model.create_input_buffer_by_name("encode", "args_0")}
        self.encode_out = {"output_0": self.model.create_output_buffer_by_name("encode", "output_0")}
        self.decode_in = {n: self.model.create_input_buffer_by_name("decode", n) for n in ("args_0", "args_1", "args_2")}
        self.decode_out = {"output_0": self.model.create_output_buffer_by_name("decode", "output_0")}
        self.decode_in["args_2"].write(causal_mask(self.window))
        self.tokens = np.zeros((1, self.window), np.int32)

    def encode(self, features: np.ndarray) -> None:
        self.encode_in["args_0"].write(np.ascontiguousarray(features, np.float32))
        self.model.run_by_name("encode", self.encode_in, self.encode_out)
        self.decode_in["args_0"].write(self.encode_out["output_0"].read(self.hidden_size, np.float32))

    def step(self, tokens: list[int], vocab: int) -> int:
        """Run the window holding `tokens` (the rest padding, masked by causality): the greedy next token, read
        from the logits of the last one (the rows up to it are read, as a runner must)."""
        self.tokens[0, :len(tokens)] = tokens
        self.decode_in["args_1"].write(self.tokens)
        self.model.run_by_name("decode", self.decode_in, self.decode_out)
        rows = self.decode_out["output_0"].read(len(tokens) * vocab, np.float32)
        return int(np.argmax(rows[-vocab:]))


def first_token_times(runner, features: dict, official: OfficialAsr | None, official_features: np.ndarray,
                      repeats: int) -> dict:
    """Encoder ms and time to the first token (encoder, prompt, argmax) for our runner and the official file,
    alternating, medians of `repeats` after an untimed run of each."""
    prompt = list(runner.config.prompt)
    vocab = runner.config.vocab_size
    times: dict[str, list[float]] = {"ours_encoder": [], "ours_ttft": [], "official_encoder": [], "official_ttft": []}
    for attempt in range(repeats + 1):
        start = time.perf_counter()
        runner.encode(features)
        encoded = time.perf_counter()
        int(np.argmax(runner.prefill(prompt)))
        sides = [("ours", start, encoded, time.perf_counter())]
        if official is not None:
            start = time.perf_counter()
            official.encode(official_features)
            encoded = time.perf_counter()
            official.step(prompt, vocab)
            sides.append(("official", start, encoded, time.perf_counter()))
        if not attempt:
            continue
        for side, start, encoded, first in sides:
            times[f"{side}_encoder"].append(encoded - start)
            times[f"{side}_ttft"].append(first - start)
    return {k: _ms(v) for k, v in times.items() if v}


def ours_decode(runner, features: dict, ids: list[int], tokens: int) -> float:
    """Our decode signature's ms per token: one token at a time after the prompt, the median of `tokens` steps."""
    runner.encode(features)
    runner.prefill(runner.config.prompt)
    position = len(runner.config.prompt)
    times = []
    for i in range(tokens):
        start = time.perf_counter()
        runner.decode(ids[i % len(ids)], position + i)
        times.append(time.perf_counter() - start)
    return _ms(times)


def official_greedy(official: OfficialAsr, features: np.ndarray, prompt: list[int], tokens: int,
                    vocab: int) -> tuple[list[int], float]:
    """The official file's greedy tokens after `prompt` (as many of `tokens` as its window holds) and its decode
    ms per token (the median of the steps after the first)."""
    official.encode(features)
    sequence, times = list(prompt), []
    while len(sequence) - len(prompt) < tokens and len(sequence) <= official.window:
        start = time.perf_counter()
        token = official.step(sequence, vocab)
        times.append(time.perf_counter() - start)
        sequence.append(token)
    return sequence[len(prompt):], _ms(times[1:])


def window_baseline(hf, cfg, features, ids: list[int], tokens: int, threads: int) -> dict:
    """The whole-window decoder converted by us: its conversion time, whether it picks our second token, and its
    ms per token."""
    import torch

    import litert_torch
    from litert_torch.generative.asr_modules import WhisperCrossKV
    from litert_torch.generative.runner import _compiled_model

    window = cfg.max_target_positions
    with torch.no_grad():
        cross = {k: v.contiguous() for k, v in WhisperCrossKV(hf)(features).items()}
    sample = {"tokens": torch.zeros(1, window, dtype=torch.int32), "last": torch.zeros(1, dtype=torch.int32), **cross}
    start = time.perf_counter()
    converted = litert_torch.signature("decode", window_decoder(hf, window), sample_kwargs=sample).convert(target="cpu")
    convert_seconds = time.perf_counter() - start
    compiled = _compiled_model(converted.model_content(), threads)
    inputs = {n: compiled.create_input_buffer_by_name("decode", n) for n in ["tokens", "last", *cross]}
    outputs = {"logits": compiled.create_output_buffer_by_name("decode", "logits")}
    for name, value in cross.items():
        inputs[name].write(value.numpy())
    sequence = np.zeros((1, window), np.int32)
    sequence[0, :len(cfg.prompt)] = cfg.prompt
    sequence[0, len(cfg.prompt):len(cfg.prompt) + len(ids)] = ids[:window - len(cfg.prompt)]

    def step(i: int) -> int:
        inputs["tokens"].write(sequence)
        inputs["last"].write(np.array([len(cfg.prompt) + i - 1], np.int32))
        compiled.run_by_name("decode", inputs, outputs)
        return int(np.argmax(outputs["logits"].read(cfg.vocab_size, np.float32)))

    same = step(1) == ids[1]
    times = []
    for i in range(tokens):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    return {"window": window, "convert_s": convert_seconds, "same_next_token": same, "decode_ms": _ms(times)}


def official_attempts(python: str, model_dir: str, root: str, window_sec: float, **options: object) -> dict:
    """The official exporter on `model_dir` (with `options`): its default export, and where that fails its
    non-bundle one, whose decode window is sized for `window_sec` unless `options` set input_sec."""
    from task_export import export_official

    attempts = {"default": export_official(python, model=model_dir, output_dir=os.path.join(root, "official"),
                                           task=TASK, quantization_recipe="none", **options)}
    if "error" in attempts["default"]:
        attempts["bundle_litert_lm=False"] = export_official(
            python, model=model_dir, output_dir=os.path.join(root, "official_tflite"), task=TASK,
            quantization_recipe="none", bundle_litert_lm=False, keep_temporary_files=True,
            **{"input_sec": window_sec, **options})
    return attempts


def hf_reference(model_dir: str, audio: np.ndarray, tokens: int, moonshine: bool):
    """Hugging Face's model, its greedy ids for `audio` (the generated tokens only) and the encoder's input it
    used (Whisper's log-mel features, Moonshine's samples)."""
    import torch
    import transformers

    if moonshine:
        hf = transformers.MoonshineForConditionalGeneration.from_pretrained(model_dir).eval()
        inputs = torch.from_numpy(audio)[None]
        with torch.no_grad():
            out = hf.generate(inputs, max_new_tokens=tokens)[0].tolist()
        return hf, out[1:-1] if out[-1] == hf.generation_config.eos_token_id else out[1:], inputs
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    inputs = transformers.WhisperFeatureExtractor.from_pretrained(model_dir)(
        audio, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        return hf, hf.generate(inputs, max_new_tokens=tokens)[0].tolist(), inputs


def measure(size: str, args, python: str | None) -> dict:
    """Everything for one size: both exports, then the speeds in this process."""
    from litert_torch.generative import asr_examples, asr_runner
    from task_export import export_ours

    root = tempfile.mkdtemp(prefix=f"bench_asr_{size}_")
    moonshine = size in MOONSHINE
    # Moonshine's encoder takes a fixed window of samples: both exporters get the clip's length
    options = {"input_sec": CLIP_SECONDS} if moonshine else {}
    model_dir = (save_moonshine if moonshine else save_model)(os.path.join(root, "model"), size)
    ours = export_ours(model=model_dir, output_dir=os.path.join(root, "out"), task=TASK, quantization_recipe="none",
                       **options)
    official = official_attempts(python, model_dir, root, args.official_input_sec, **options) if python else {}
    runner = asr_runner.load_asr(ours["path"], num_threads=args.threads)
    cfg = runner.config
    audio = asr_examples.noise(CLIP_SECONDS)
    hf, reference, hf_inputs = hf_reference(model_dir, audio, args.tokens, moonshine)
    ids = runner.transcribe_ids(audio, max_new_tokens=args.tokens)
    features = runner.features(audio)
    layout = next((r for r in official.values() if "error" not in r), None)
    official_file = OfficialAsr(layout["path"], args.threads) if layout else None
    result = {"size": size, "config": (MOONSHINE if moonshine else SIZES)[size], "ours": ours, "official": official,
              "tokens": args.tokens, "greedy_equal": ids == reference, "greedy_tokens": len(ids),
              **first_token_times(runner, features, official_file, hf_inputs.numpy(), args.repeats),
              "ours_decode_ms": ours_decode(runner, features, ids, args.tokens)}
    if not moonshine:
        result["baseline"] = window_baseline(hf, cfg, hf_inputs, ids, args.tokens, args.threads)
    if official_file is not None:
        official_ids, result["official_decode_ms"] = official_greedy(official_file, hf_inputs.numpy(), cfg.prompt,
                                                                     args.tokens, cfg.vocab_size)
        result["official_window"] = official_file.window
        result["official_greedy"] = {"tokens": len(official_ids), "equal": official_ids == reference[:len(official_ids)]}
    return result


def _mb(path: str) -> str:
    return f"{os.path.getsize(path) / 2**20:.1f}"


def table(r: dict) -> list[str]:
    """One markdown table for one size's result."""
    ours = r["ours"]
    lines = ["| converter, layout | convert s | peak RSS MB | file MB | encoder ms | TTFT ms | decode ms/token "
             "| decode tokens/s | greedy = Hugging Face, or how it failed |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| ours, KV cache (bundle) | {ours['seconds']:.1f} | {ours['peak_rss_mb']:.0f} | {_mb(ours['path'])} "
             f"| {r['ours_encoder']:.1f} | {r['ours_ttft']:.1f} | {r['ours_decode_ms']:.2f} "
             f"| {1000 / r['ours_decode_ms']:.1f} | {r['greedy_equal']} ({r['greedy_tokens']} tokens) |"]
    if "baseline" in r:
        baseline = r["baseline"]
        lines.append(f"| ours, whole {baseline['window']}-token window (no KV cache) | {baseline['convert_s']:.1f} "
                     f"| | | | | {baseline['decode_ms']:.2f} | {1000 / baseline['decode_ms']:.1f} "
                     f"| next token {'same' if baseline['same_next_token'] else 'DIFFERENT'} |")
    from task_export import failure_line

    for name, attempt in r["official"].items():
        label = f"official, {name}"
        if "error" in attempt:
            lines.append(f"| {label} | fails after {attempt.get('seconds', 0):.1f} s | "
                         f"{attempt.get('peak_rss_mb', 0):.0f} | | | | | | {failure_line(attempt)} |")
            continue
        greedy = r.get("official_greedy")
        lines.append(f"| {label}, whole {r['official_window']}-token window | {attempt['seconds']:.1f} "
                     f"| {attempt['peak_rss_mb']:.0f} | {_mb(attempt['path'])} | {r['official_encoder']:.1f} "
                     f"| {r['official_ttft']:.1f} | {r['official_decode_ms']:.2f} | {1000 / r['official_decode_ms']:.1f} "
                     f"| {greedy['equal']} ({greedy['tokens']} tokens) |")
    return lines


def ratios(r: dict) -> str:
    """The ratios read from one size's result: the KV cache's speedups, and ours / official."""
    parts = []
    if "baseline" in r:
        parts.append(f"KV-cache decode speedup over our whole-window decoder: "
                     f"{r['baseline']['decode_ms'] / r['ours_decode_ms']:.1f}x")
    if "official_decode_ms" in r:
        layout = next(a for a in r["official"].values() if "error" not in a)
        parts.append(f"over the official window decode: {r['official_decode_ms'] / r['ours_decode_ms']:.1f}x; ours / "
                 f"official: convert {r['ours']['seconds'] / layout['seconds']:.2f}, peak RSS "
                 f"{r['ours']['peak_rss_mb'] / layout['peak_rss_mb']:.2f}, encoder "
                 f"{r['ours_encoder'] / r['official_encoder']:.2f}, TTFT {r['ours_ttft'] / r['official_ttft']:.2f}")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,base,moonshine-tiny",
                        help=f"of {', '.join([*SIZES, *MOONSHINE])}")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--official-input-sec", type=float, default=30.0,
                        help="the official non-bundle export's input_sec (its decode window: ceil(s * 8 / 32) * 32)")
    parser.add_argument("--no-official", action="store_true", help="Measure our exporter only.")
    args = parser.parse_args()
    import transformers

    from task_export import official_python

    transformers.logging.set_verbosity_error()
    python = None if args.no_official else official_python()
    results = []
    for size in args.sizes.split(","):
        results.append(measure(size, args, python))
        print(json.dumps(results[-1], default=str), flush=True)
    for r in results:
        sizes = ", ".join(f"{k} {v}" for k, v in r["config"].items())
        print(f"\n{r['size']} ({sizes}); float32, {args.threads} thread(s), {r['tokens']} tokens\n")
        print("\n".join(table(r)))
        print(f"\n{ratios(r)}")


if __name__ == "__main__":
    main()
