"""Image+text speed: export(task="image_text_to_text") of a Gemma 3 image+text model with random weights, for the
tiny example (litert_torch.generative.vlm_examples) and for one with a SigLIP-400M-sized vision encoder (hidden
1152, 27 layers, 16 heads, intermediate 4304, patch 14) and a small Gemma 3 text decoder. Each conversion runs in
a fresh process (its time and peak RSS); then, on one thread, the vision encoder's latency, the time to the first
token of a prompt with one image (image encoding and prefill) and the decode time per token, in our runner and in
LiteRT-LM (`Engine(..., vision_backend=CPU)`). On the tiny model (float) the greedy tokens of our runner are
checked against Hugging Face's `generate`.

    python bench/vlm.py [--sizes tiny,siglip400m] [--image 448] [--tokens 16] [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PROMPT = "the robot <start_of_image> counts"
# per size: the recipe of the decoder and embedder, the vision sections' recipe, prefill lengths, cache length
EXPORT = {
    "tiny": ("none", None, [8, 16], 64),
    "siglip400m": ("dynamic_wi8_afp32", "dynamic_wi8_afp32", [32, 320], 512),
}


def save_siglip400m(directory: str, image: int) -> str:
    """A Gemma 3 image+text model with a SigLIP-400M-sized vision tower (so400m: hidden 1152, 27 layers, 16 heads,
    intermediate 4304, patch 14) for `image`-pixel images, pooled to 256 tokens, and a small Gemma 3 text
    decoder (hidden 640, 6 layers, 4 query heads, 1 KV head of 256, intermediate 2048, five sliding-window
    layers then a global one); the tiny example's tokenizer (its vocabulary is the model's); random weights
    (seeded, the configs' initialisers), saved as a model directory."""
    import torch
    import transformers as T

    from litert_torch.generative import vlm_examples

    tok = vlm_examples.gemma3_tokenizer()
    text = T.Gemma3TextConfig(vocab_size=len(tok), hidden_size=640, intermediate_size=2048, num_hidden_layers=6,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=256, pad_token_id=0,
                              bos_token_id=1, eos_token_id=2, max_position_embeddings=1024, sliding_window=512,
                              query_pre_attn_scalar=256, layer_types=["sliding_attention"] * 5 + ["full_attention"])
    vision = T.SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                                  num_attention_heads=16, image_size=image, patch_size=14)
    config = T.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=256,
                            boi_token_index=tok.convert_tokens_to_ids("<start_of_image>"),
                            eoi_token_index=tok.convert_tokens_to_ids("<end_of_image>"),
                            image_token_index=tok.convert_tokens_to_ids("<image_soft_token>"))
    torch.manual_seed(0)
    model = T.Gemma3ForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    processor = T.Gemma3Processor(image_processor=T.Gemma3ImageProcessor(size={"height": image, "width": image}),
                                  tokenizer=tok, image_seq_length=256)
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def _child(args) -> None:
    """The fresh process: save a model directory, or convert one and print its time and peak RSS as JSON."""
    if args.child == "save":
        if args.size == "tiny":
            from litert_torch.generative import vlm_examples

            vlm_examples.save_tiny_gemma3(args.dir)
        else:
            save_siglip400m(args.dir, args.image)
        return
    from litert_torch.generative.export_hf import export

    recipe, vision_recipe, prefill, cache = EXPORT[args.size]
    start = time.perf_counter()
    bundle = export.export(model=args.dir, output_dir=args.out, task="image_text_to_text", prefill_lengths=prefill,
                           cache_length=cache, quantization_recipe=recipe,
                           vision_encoder_quantization_recipe=vision_recipe)
    seconds = time.perf_counter() - start
    print(json.dumps({"bundle": bundle, "seconds": seconds,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _run_child(*argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *sys.path])}
    run = subprocess.run([sys.executable, os.path.abspath(__file__), *argv], capture_output=True, text=True, env=env)
    if run.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{run.stderr[-4000:]}")
    return run.stdout


def _image(size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def ours(bundle: str, image: np.ndarray, tokens: int, threads: int, repeats: int) -> dict:
    """Our runner on `threads` threads, after one untimed run of each: the vision encoder, the time to the first
    token (image encoding and prefill) and the decode ms/token over `tokens` tokens, each the median of
    `repeats` runs; the greedy ids."""
    from litert_torch.generative.vlm_runner import load_vlm

    vlm = load_vlm(bundle, num_threads=threads)
    vlm.encode_image(image)
    encoder = []
    for _ in range(repeats):
        start = time.perf_counter()
        vlm.encode_image(image)
        encoder.append(time.perf_counter() - start)
    ids = vlm.prompt_ids(PROMPT, 1)
    list(vlm.generate_ids(ids, 2, images=[image], stop=False))  # untimed
    first, decode, out = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        stamps, out = [], []
        for token in vlm.generate_ids(ids, tokens + 1, images=[image], stop=False):
            stamps.append(time.perf_counter())
            out.append(token)
        first.append(stamps[0] - start)
        decode.append((stamps[-1] - stamps[0]) / tokens)
    return {"encoder_ms": 1000 * float(np.median(encoder)), "ttft_ms": 1000 * float(np.median(first)),
            "decode_ms": 1000 * float(np.median(decode)), "ids": out, "prompt_tokens": len(ids)}


def litert_lm_times(bundle: str, image: np.ndarray, tokens: int, threads: int, max_tokens: int, repeats: int,
                    cache_dir: str) -> dict:
    """LiteRT-LM on `threads` threads (text and vision backends on the CPU), after one untimed reply: the time
    to the first streamed chunk of a greedy reply to the prompt with the image (image decoding, encoding and
    prefill) and the decode ms/token after it, medians of `repeats` replies; and the runtime's own prefill and
    decode tokens/s (its benchmark info) of the last reply."""
    import litert_lm

    from tests.generative.test_vlm import IMAGE_TEMPLATE, _png

    engine = litert_lm.Engine(bundle, backend=litert_lm.Backend.CPU(thread_count=threads),
                              vision_backend=litert_lm.Backend.CPU(thread_count=threads),
                              max_num_tokens=max_tokens, cache_dir=cache_dir, enable_benchmark=True)
    before, after = PROMPT.split("<start_of_image>")
    message = {"role": "user", "content": [{"type": "text", "text": before}, {"type": "image", "blob": _png(image)},
                                           {"type": "text", "text": after}]}
    first, decode, info = [], [], None
    for attempt in range(repeats + 1):  # the first one untimed
        conversation = engine.create_conversation(
            chat_template=IMAGE_TEMPLATE.replace("PLACEHOLDER", "<start_of_image>"), max_output_tokens=tokens + 1,
            sampler_config=litert_lm.SamplerConfig(top_k=1))
        start = time.perf_counter()
        stamps = []
        for _ in conversation.send_message_async(message):
            stamps.append(time.perf_counter())
        if attempt:
            first.append(stamps[0] - start)
            decode.append((stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1))
            info = conversation.get_benchmark_info()
        conversation.close()
    engine.close()
    return {"ttft_ms": 1000 * float(np.median(first)), "decode_ms": 1000 * float(np.median(decode)),
            "chunks": len(stamps), "prefill_tokens_per_s": info.last_prefill_tokens_per_second,
            "decode_tokens_per_s": info.last_decode_tokens_per_second}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,siglip400m")
    parser.add_argument("--image", type=int, default=448, help="the SigLIP-400M model's image size (448 or 896)")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["save", "convert"], help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    root = tempfile.mkdtemp(prefix="bench_vlm_")
    rows = []
    for size in args.sizes.split(","):
        model_dir = os.path.join(root, size)
        _run_child("--child", "save", "--size", size, "--dir", model_dir, "--image", str(args.image))
        converted = json.loads(_run_child("--child", "convert", "--size", size, "--dir", model_dir,
                                          "--out", os.path.join(root, f"{size}_out")).strip().splitlines()[-1])
        bundle = converted["bundle"]
        image = _image(args.image if size != "tiny" else 32)
        run = ours(bundle, image, args.tokens, args.threads, args.repeats)
        check = ""
        if size == "tiny":
            check = "equal" if run["ids"] == hf_greedy(model_dir, image, args.tokens + 1) else "DIFFERENT"
        engine = litert_lm_times(bundle, image, args.tokens, args.threads, EXPORT[size][3], args.repeats, root)
        rows.append((size, converted, os.path.getsize(bundle) / 2**20, run, engine, check))
        print(json.dumps({"size": size, "convert": converted, "ours": {k: v for k, v in run.items() if k != "ids"},
                          "litert_lm": engine, "hf_check": check}), flush=True)
    print()
    print("| model | recipe (decoder / vision) | convert s | peak RSS MB | bundle MB | prompt tokens | encoder ms (ours) "
          "| TTFT ms (ours / LiteRT-LM) | decode ms/token (ours / LiteRT-LM) | LiteRT-LM's own prefill / decode "
          "tokens/s | greedy vs Hugging Face |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for size, converted, mb, run, engine, check in rows:
        recipe, vision_recipe, _, _ = EXPORT[size]
        print(f"| {size} | {recipe} / {vision_recipe or 'none'} | {converted['seconds']:.1f} | "
              f"{converted['peak_rss_mb']:.0f} | {mb:.1f} | {run['prompt_tokens']} | {run['encoder_ms']:.1f} | "
              f"{run['ttft_ms']:.1f} / {engine['ttft_ms']:.1f} | {run['decode_ms']:.2f} / {engine['decode_ms']:.2f} | "
              f"{engine['prefill_tokens_per_s']:.0f} / {engine['decode_tokens_per_s']:.0f} | {check or '-'} |")


def hf_greedy(model_dir: str, image: np.ndarray, tokens: int) -> list[int]:
    """Hugging Face's greedy ids for the prompt with `image`."""
    import torch
    import transformers

    hf = transformers.Gemma3ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    inputs = processor(text=PROMPT, images=[image], return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


if __name__ == "__main__":
    main()
