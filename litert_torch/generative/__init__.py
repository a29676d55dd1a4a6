"""On-device LLMs: Hugging Face causal LMs to LiteRT with prefill/decode signatures and a KV cache.

    from litert_torch.generative.export_hf import export
    bundle = export.export(model="hf_model_dir", output_dir="out", prefill_lengths=[32], cache_length=1024)

    from litert_torch import generative
    llm = generative.load(bundle)               # the .litertlm (or the .tflite with tokenizer.json beside it)
    for piece in llm.generate("Once upon a time", max_new_tokens=32):
        print(piece, end="", flush=True)

See docs/LLM.md for the architectures, signatures, cache layout and options; docs/EMBEDDINGS.md for text
embeddings (`export.export(model=..., output_dir=..., task="text_embedding")`, then `load(bundle).embed(texts)`);
docs/ASR.md for speech to text (`task="automatic_speech_recognition"`, then `load(bundle).transcribe(audio)`);
docs/VLM.md for image+text models (`task="image_text_to_text"`, then `load(bundle).generate(prompt, images=[...])`).
"""

from litert_torch.generative.asr_runner import AsrRunner, AudioTooLongError
from litert_torch.generative.config import LlmConfig, UnsupportedModelError
from litert_torch.generative.embedding_runner import EmbeddingRunner, InputTooLongError
from litert_torch.generative.loading import load
from litert_torch.generative.runner import CacheFullError, LlmRunner, Sampling


def __getattr__(name: str):
    # validation runs the Hugging Face model beside the converted one: PyTorch is imported only when it is used
    if name in ("LlmValidationReport", "validate_llm"):
        from litert_torch.generative import validate

        return getattr(validate, name)
    if name in ("AsrValidationReport", "VlmValidationReport", "validate_asr", "validate_vlm"):
        from litert_torch.generative import validate_tasks

        return getattr(validate_tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AsrRunner", "AsrValidationReport", "AudioTooLongError", "CacheFullError", "EmbeddingRunner", "InputTooLongError", "LlmConfig", "LlmRunner", "LlmValidationReport", "Sampling", "UnsupportedModelError",
           "VlmValidationReport", "load", "validate_asr", "validate_llm", "validate_vlm"]
