"""Image+text speed, side by side with the official exporter: export(task="image_text_to_text") of a Gemma 3
image+text model with random weights, for the tiny example (litert_torch.generative.vlm_examples) and for one
with a SigLIP-400M-sized vision encoder (hidden 1152, 27 layers, 16 heads, intermediate 4304, patch 14) and a
small Gemma 3 text decoder. Each conversion, ours and the official exporter's (litert-torch in
bench/.venv-official, the same keywords on the same model directory), runs in a fresh process (its time and peak
RSS, or how it failed); then, on one thread, the vision encoder's latency, the time to the first token of a
prompt with one image (image encoding and prefill) and the decode time per token, in our runner on our bundle
and in LiteRT-LM (`Engine(..., vision_backend=CPU)`) on both bundles, alternating. On the tiny model (float) the
greedy tokens of our runner are checked against Hugging Face's `generate`, and each bundle's LiteRT-LM reply
(to the prompt with the image, and to a text-only prompt) against Hugging Face's text.

    python bench/vlm.py [--sizes tiny,siglip400m] [--image 448] [--tokens 16] [--threads 1] [--repeats 3]
                        [--no-official]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

PROMPT = "the robot <start_of_image> counts"
TEXT_PROMPT = "the robot counts"  # the tiny model's check of the text path alone
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


def _save_child(args) -> None:
    """The fresh process that saves a model directory (the parent stays small)."""
    if args.size == "tiny":
        from litert_torch.generative import vlm_examples

        vlm_examples.save_tiny_gemma3(args.dir)
    else:
        save_siglip400m(args.dir, args.image)


def _save(size: str, directory: str, image: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *sys.path])}
    run = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "save", "--size", size, "--dir",
                          directory, "--image", str(image)], capture_output=True, text=True, env=env)
    if run.returncode:
        raise SystemExit(f"saving {size} failed:\n{run.stderr[-4000:]}")


def export_kwargs(size: str, model_dir: str, out: str) -> dict:
    """The export keywords of `size`, the same for both exporters."""
    recipe, vision_recipe, prefill, cache = EXPORT[size]
    return {"model": model_dir, "output_dir": out, "task": "image_text_to_text", "prefill_lengths": prefill,
            "cache_length": cache, "quantization_recipe": recipe, "vision_encoder_quantization_recipe": vision_recipe}


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


def _reply(engine, message: dict, max_tokens: int) -> tuple[float, str, object]:
    """One greedy reply of at most `max_tokens` tokens in a fresh conversation: its wall time, its text and the
    runtime's benchmark info."""
    import litert_lm

    from tests.generative.test_vlm import IMAGE_TEMPLATE

    conversation = engine.create_conversation(
        chat_template=IMAGE_TEMPLATE.replace("PLACEHOLDER", "<start_of_image>"), max_output_tokens=max_tokens,
        sampler_config=litert_lm.SamplerConfig(top_k=1))
    start = time.perf_counter()
    chunks = list(conversation.send_message_async(message))
    seconds = time.perf_counter() - start
    text = "".join(getattr(c, "text", "") for chunk in chunks for c in chunk.contents)
    info = conversation.get_benchmark_info()
    conversation.close()
    return seconds, text, info


def litert_lm_times(bundles: dict[str, str], image: np.ndarray, tokens: int, threads: int, max_tokens: int,
                    repeats: int, cache_dir: str, text_prompt: str | None = None) -> dict:
    """LiteRT-LM on `threads` threads (text and vision backends on the CPU), each bundle of `bundles` in its
    engine, the bundles alternating, after one untimed round: the time to the first token (the wall time of a
    one-token reply to the prompt with the image: PNG decoding, image encoding, prefill and the first token) and
    the decode ms/token of a reply of `tokens` + 1 tokens from the runtime's own decode tokens/s (LiteRT-LM may
    stream a reply as one chunk, so chunk times do not time tokens, and the difference of the two replies' wall
    times drowns in the image encoder's variation), medians of `repeats` rounds; the runtime's prefill tokens/s
    and the text of the last long reply; with `text_prompt`, the text of a reply to it alone (no image)."""
    import litert_lm

    from tests.generative.test_vlm import _png

    engines = {side: litert_lm.Engine(path, backend=litert_lm.Backend.CPU(thread_count=threads),
                                      vision_backend=litert_lm.Backend.CPU(thread_count=threads),
                                      max_num_tokens=max_tokens, cache_dir=cache_dir, enable_benchmark=True)
               for side, path in bundles.items()}
    before, after = PROMPT.split("<start_of_image>")
    message = {"role": "user", "content": [{"type": "text", "text": before}, {"type": "image", "blob": _png(image)},
                                           {"type": "text", "text": after}]}
    first: dict[str, list[float]] = {side: [] for side in bundles}
    decode: dict[str, list[float]] = {side: [] for side in bundles}
    result: dict[str, dict] = {}
    for attempt in range(repeats + 1):  # the first round untimed
        for side, engine in engines.items():
            one, _, _ = _reply(engine, message, 1)
            _, text, info = _reply(engine, message, tokens + 1)
            if attempt:
                first[side].append(one)
                decode[side].append(1 / info.last_decode_tokens_per_second)
            result[side] = {"text": text, "decode_tokens": info.last_decode_token_count,
                            "prefill_tokens_per_s": info.last_prefill_tokens_per_second}
    for side, engine in engines.items():
        if text_prompt is not None:
            result[side]["text_only"] = _reply(engine, {"role": "user", "content": [
                {"type": "text", "text": text_prompt}]}, tokens + 1)[1]
        engine.close()
        result[side].update(ttft_ms=1000 * float(np.median(first[side])),
                            decode_ms=1000 * float(np.median(decode[side])))
    return result


def hf_greedy(model_dir: str, image: np.ndarray | None, tokens: int) -> list[int]:
    """Hugging Face's greedy ids for the prompt with `image`, or for TEXT_PROMPT when `image` is None."""
    import torch
    import transformers

    hf = transformers.Gemma3ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    if image is None:
        inputs = processor.tokenizer(TEXT_PROMPT, return_tensors="pt")
    else:
        inputs = processor(text=PROMPT, images=[image], return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def measure(size: str, args, root: str, python: str | None) -> dict:
    """One size: both exports in fresh processes, then our runner and LiteRT-LM on one thread."""
    from task_export import export_official, export_ours

    model_dir = os.path.join(root, size)
    _save(size, model_dir, args.image)
    ours_export = export_ours(**export_kwargs(size, model_dir, os.path.join(root, f"{size}_out")))
    official = None
    if python:
        official = export_official(python, **export_kwargs(size, model_dir, os.path.join(root, f"{size}_official")))
    image = _image(args.image if size != "tiny" else 32)
    run = ours(ours_export["path"], image, args.tokens, args.threads, args.repeats)
    check, hf_text, hf_text_only = "", None, None
    if size == "tiny":
        reference = hf_greedy(model_dir, image, args.tokens + 1)
        check = "equal" if run["ids"] == reference else "DIFFERENT"
        hf_text = _text(model_dir, reference)
        hf_text_only = _text(model_dir, hf_greedy(model_dir, None, args.tokens + 1))
    bundles = {"ours": ours_export["path"]}
    if official and "error" not in official:
        bundles["official"] = official["path"]
    engine = litert_lm_times(bundles, image, args.tokens, args.threads, EXPORT[size][3], args.repeats, root,
                             TEXT_PROMPT if size == "tiny" else None)
    return {"size": size, "ours_export": ours_export, "official_export": official, "ours": run, "litert_lm": engine,
            "hf_check": check, "hf_text": hf_text, "hf_text_only": hf_text_only,
            "float_weights_mb": float_weights_mb(model_dir)}


def float_weights_mb(model_dir: str) -> float:
    """The model's float32 weights in MB: the size of its safetensors files (saved in float32)."""
    return sum(os.path.getsize(os.path.join(model_dir, n)) for n in os.listdir(model_dir)
               if n.endswith(".safetensors")) / 2**20


def memory_bound_mb(float_mb: float) -> float:
    """The conversion's peak RSS the project allows: 1.5x the float weights + 500 MB."""
    return 1.5 * float_mb + 500


def _text(model_dir: str, ids: list[int]) -> str:
    """Hugging Face's text of `ids`, the special tokens left out."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(model_dir).decode(ids, skip_special_tokens=True)


def _exports(r: dict) -> list[dict]:
    """The exports that wrote a bundle: ours, then the official one."""
    return [e for e in (r["ours_export"], r["official_export"]) if e and "error" not in e]


def _joined(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in values)


def conversion_table(rows: list[dict]) -> list[str]:
    from task_export import failure_line

    lines = ["| model | recipe (decoder / vision) | convert s (ours / official) | peak RSS MB (ours / official) "
             "| float weights MB | bound MB (1.5x + 500) | our peak / bound "
             "| bundle MB (ours / official) | official exporter |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        recipe, vision_recipe, _, _ = EXPORT[r["size"]]
        official, exports = r["official_export"], _exports(r)
        state = "not run" if official is None else failure_line(official) if "error" in official else "bundle written"
        bound = memory_bound_mb(r["float_weights_mb"])
        lines.append(f"| {r['size']} | {recipe} / {vision_recipe or 'none'} "
                     f"| {_joined([e['seconds'] for e in exports], '.1f')} "
                     f"| {_joined([e['peak_rss_mb'] for e in exports], '.0f')} "
                     f"| {r['float_weights_mb']:.0f} | {bound:.0f} | {r['ours_export']['peak_rss_mb'] / bound:.2f} "
                     f"| {_joined([os.path.getsize(e['path']) / 2**20 for e in exports], '.1f')} | {state} |")
    return lines


def speed_table(rows: list[dict]) -> list[str]:
    lines = ["| model | prompt tokens | encoder ms (our runner) | TTFT ms (our runner / LiteRT-LM: ours / official) "
             "| decode ms/token (our runner / LiteRT-LM: ours / official) | LiteRT-LM's own prefill tokens/s "
             "(ours / official) | greedy vs Hugging Face (our runner) | LiteRT-LM reply = Hugging Face's text "
             "(ours / official): with the image; text only |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        run, engine = r["ours"], r["litert_lm"]
        sides = list(engine.values())
        own = _joined([s["prefill_tokens_per_s"] for s in sides], ".0f")
        same = "-"
        if r["hf_text"] is not None:
            same = (f"{_joined([s['text'] == r['hf_text'] for s in sides], '')}; "
                    f"{_joined([s['text_only'] == r['hf_text_only'] for s in sides], '')}")
        lines.append(f"| {r['size']} | {run['prompt_tokens']} | {run['encoder_ms']:.1f} "
                     f"| {_joined([run['ttft_ms']] + [s['ttft_ms'] for s in sides], '.1f')} "
                     f"| {_joined([run['decode_ms']] + [s['decode_ms'] for s in sides], '.2f')} "
                     f"| {own} | {r['hf_check'] or '-'} | {same} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,siglip400m")
    parser.add_argument("--image", type=int, default=448, help="the SigLIP-400M model's image size (448 or 896)")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-official", action="store_true", help="Measure our exporter only.")
    parser.add_argument("--child", choices=["save"], help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _save_child(args)
        return
    from task_export import official_python

    python = None if args.no_official else official_python()
    root = tempfile.mkdtemp(prefix="bench_vlm_")
    rows = []
    for size in args.sizes.split(","):
        rows.append(measure(size, args, root, python))
        row = {**rows[-1], "ours": {k: v for k, v in rows[-1]["ours"].items() if k != "ids"}}
        print(json.dumps(row), flush=True)
    print()
    print("\n".join(conversion_table(rows) + [""] + speed_table(rows)))


if __name__ == "__main__":
    main()
