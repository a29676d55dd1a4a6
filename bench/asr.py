"""Whisper decoding speed: our `decode` signature (one token against the self-attention KV cache, the
cross-attention keys and values computed once by `encode`) against a decoder that re-runs its whole token window
every step (no KV cache; the layout of the official exporter's ASR decode signature), both converted by us from
the same random Whisper with whisper-tiny's sizes, both given the same precomputed cross-attention keys and values,
timed per token in one run on the CPU (XNNPACK). It also checks that the bundle's greedy tokens equal Hugging
Face's `generate` on a 2 s clip.

    python bench/asr.py [--tokens 32] [--threads 1] [--size tiny|small-test]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# whisper-tiny's sizes (openai/whisper-tiny), and a smaller set for a quick run
SIZES = {
    "tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6, decoder_attention_heads=6,
                 encoder_ffn_dim=1536, decoder_ffn_dim=1536, max_target_positions=448),
    "small-test": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_target_positions=448),
}


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


def per_token_seconds(run, count: int) -> float:
    times = []
    for i in range(count):
        start = time.perf_counter()
        run(i)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    args = parser.parse_args()

    import torch
    import transformers

    import litert_torch
    from litert_torch.generative import asr_examples, asr_runner
    from litert_torch.generative.asr_modules import WhisperCrossKV
    from litert_torch.generative.export_hf import export
    from litert_torch.generative.runner import _compiled_model

    transformers.logging.set_verbosity_error()
    root = tempfile.mkdtemp(prefix="bench_asr_")
    model_dir = save_model(os.path.join(root, "model"), args.size)
    start = time.perf_counter()
    bundle = export.export(model=model_dir, output_dir=os.path.join(root, "out"), quantization_recipe="none")
    export_seconds = time.perf_counter() - start
    runner = asr_runner.load_asr(bundle, num_threads=args.threads)
    cfg = runner.config
    audio = asr_examples.noise(2.0)

    hf = transformers.WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    features = transformers.WhisperFeatureExtractor.from_pretrained(model_dir)(
        audio, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        reference = hf.generate(features, max_new_tokens=args.tokens)[0].tolist()
    ids = runner.transcribe_ids(audio, max_new_tokens=args.tokens)

    # ours: the decode signature, once per token, the caches and cross keys/values bound in LiteRT buffers
    runner.encode(runner.features(audio))
    runner._step(runner._prefill, cfg.prompt, 0)
    position = len(cfg.prompt)
    ours = per_token_seconds(lambda i: runner._step(asr_runner.DECODE_SIGNATURE, [ids[i % len(ids)]], position + i),
                             args.tokens)

    # the baseline: the whole window of max_target_positions tokens every step
    window = cfg.max_target_positions
    with torch.no_grad():
        cross = {k: v.contiguous() for k, v in WhisperCrossKV(hf)(features).items()}
    baseline_module = window_decoder(hf, window)
    sample = {"tokens": torch.zeros(1, window, dtype=torch.int32), "last": torch.zeros(1, dtype=torch.int32), **cross}
    start = time.perf_counter()
    baseline = litert_torch.signature("decode", baseline_module, sample_kwargs=sample).convert(target="cpu")
    baseline_convert = time.perf_counter() - start
    compiled = _compiled_model(baseline.model_content(), args.threads)
    inputs = {n: compiled.create_input_buffer_by_name("decode", n) for n in ["tokens", "last", *cross]}
    outputs = {"logits": compiled.create_output_buffer_by_name("decode", "logits")}
    for name, value in cross.items():
        inputs[name].write(value.numpy())
    tokens = np.zeros((1, window), np.int32)
    tokens[0, :len(cfg.prompt)] = cfg.prompt
    tokens[0, len(cfg.prompt):len(cfg.prompt) + len(ids)] = ids

    def window_step(i: int) -> None:
        inputs["tokens"].write(tokens)
        inputs["last"].write(np.array([len(cfg.prompt) + i - 1], np.int32))
        compiled.run_by_name("decode", inputs, outputs)
        outputs["logits"].read(cfg.vocab_size, np.float32)

    check = {}
    window_step(1)
    check["window"] = int(np.argmax(outputs["logits"].read(cfg.vocab_size, np.float32)))
    slow = per_token_seconds(window_step, args.tokens)
    print(f"Whisper ({args.size} sizes: d_model {hf.config.d_model}, {hf.config.decoder_layers} decoder layers, "
          f"vocab {cfg.vocab_size}, {window} decoder positions), float32, {args.threads} thread(s), "
          f"{args.tokens} tokens")
    print(f"  export (both signatures + encoder): {export_seconds:.1f} s; baseline conversion {baseline_convert:.1f} s")
    print(f"  greedy tokens equal Hugging Face generate: {ids == reference} ({len(ids)} tokens)")
    print(f"  baseline picks the same next token after the prompt + 1: {check['window'] == ids[1]}")
    print(f"  decode per token, KV cache (ours):           {ours * 1e3:8.2f} ms")
    print(f"  decode per token, whole {window}-token window:  {slow * 1e3:8.2f} ms")
    print(f"  speedup: {slow / ours:.1f}x")


if __name__ == "__main__":
    main()
