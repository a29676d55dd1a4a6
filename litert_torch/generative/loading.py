"""`litert_torch.generative.load`: a runner for any bundle the exporters write, by what the bundle holds.

    text LLM (.litertlm, or the exporter's .tflite)   LlmRunner        generate(prompt)      runner.py
    text embedding                                    EmbeddingRunner  embed(texts)          embedding_runner.py
    speech to text                                    AsrRunner        transcribe(audio)     asr_runner.py
    image + text (a vision encoder section)           VlmRunner        generate(prompt, images=[...])  vlm_runner.py
"""

from __future__ import annotations

import os
from typing import Any


def load(path: str, *, num_threads: int | None = None) -> Any:
    """The runner of the converted model at `path`: a .litertlm bundle (text LLM, text embedding, speech to text or image+text)
    or the LLM exporter's .tflite (with the tokenizer.json beside it, when there is one)."""
    from litert_torch.generative import runner

    where = os.fspath(path)
    if where.endswith(".litertlm") and os.path.isfile(where):
        from litert_torch.generative import asr_runner
        from litert_torch.generative.bundle import section_types

        if asr_runner.is_asr_bundle(where):
            return asr_runner.load_asr(where, num_threads=num_threads)
        if "tf_lite_vision_encoder" in section_types(where):
            from litert_torch.generative.vlm_runner import load_vlm

            return load_vlm(where, num_threads=num_threads)
    return runner.load(where, num_threads=num_threads)
