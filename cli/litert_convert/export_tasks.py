"""`litert-convert export-hf` for the tasks that write a bundle of several sections (text embeddings, speech to
text, image + text): each checks its options, then writes the bundle with the stages printed as they start."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from litert_convert.errors import BadInput
from litert_convert.output import make_console, quiet_torch


def _export_bundle_task(what: str, output: str, quiet: bool, debug: bool,
                        write: Callable[[Callable[[str], None]], Any]) -> None:
    """A non-text-generation export (`what`: the task's words in errors): checks that `output` is a bundle path,
    then runs `write(progress)`, printing each stage as it starts and then the size and the time."""
    if not output.endswith(".litertlm"):
        raise BadInput(f"{output}: {what} export writes a .litertlm bundle", "give an output path ending in .litertlm")
    quiet_torch(debug)
    console = make_console()
    start = time.perf_counter()

    def progress(stage: str) -> None:
        if not quiet:
            console.print(f"[{time.perf_counter() - start:6.1f} s] {stage}")

    write(progress)
    if not quiet:
        console.print(f"wrote {output} ({os.path.getsize(output) / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")


def _keep_folder(output: str, keep_tflite: bool) -> str | None:
    return os.path.dirname(os.path.abspath(output)) if keep_tflite else None


def export_embedding_bundle(model_dir, output, lengths, cache_length, quantize, keep_tflite, trust_remote_code, quiet,
                      debug) -> None:
    from litert_torch.generative.embedding import export_embedding

    if cache_length is not None:
        raise BadInput("--cache does not apply to --task text_embedding", "an encoder has no KV cache")
    _export_bundle_task("a text-embedding", output, quiet, debug, lambda progress: export_embedding(
        model_dir, output, lengths=lengths, quantization_recipe=quantize, keep_folder=_keep_folder(output, keep_tflite),
        trust_remote_code=trust_remote_code, progress=progress))


def export_asr_bundle(model_dir, output, lengths, cache_length, recipes: tuple[Any, Any], keep_tflite,
                      trust_remote_code, input_sec, quiet, debug) -> None:
    """`recipes`: the decoder's and the audio encoder's (None: the decoder's)."""
    from litert_torch.generative.asr import export_asr

    for given, option, why in ((lengths, "--prefill", "the prompt length comes from the generation config"),
                               (cache_length, "--cache", "the cache length is the decoder's max_target_positions"),
                               (trust_remote_code or None, "--trust-remote-code",
                                "Whisper and Moonshine are built into transformers")):
        if given is not None:
            raise BadInput(f"{option} does not apply to --task automatic_speech_recognition", why)
    _export_bundle_task("a speech-to-text", output, quiet, debug, lambda progress: export_asr(
        model_dir, output, quantization_recipe=recipes[0], audio_encoder_quantization_recipe=recipes[1],
        input_sec=input_sec, keep_folder=_keep_folder(output, keep_tflite), progress=progress))


def export_vlm_bundle(model_dir, output, lengths, cache_length, recipes: tuple[Any, Any], keep_tflite,
                      trust_remote_code, quiet, debug) -> None:
    """`recipes`: the decoder's and embedder's, and the vision sections' (None: float)."""
    from litert_torch.generative.vlm import export_vlm

    _export_bundle_task("an image+text", output, quiet, debug, lambda progress: export_vlm(
        model_dir, output, prefill_lengths=lengths or [256], cache_length=4096 if cache_length is None else cache_length,
        quantization_recipe=recipes[0], vision_encoder_quantization_recipe=recipes[1],
        keep_folder=_keep_folder(output, keep_tflite), trust_remote_code=trust_remote_code, progress=progress))
