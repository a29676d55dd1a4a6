"""Tiny demo models: a 2-layer Llama-style Hugging Face causal LM with random weights and a small byte-level BPE
tokenizer trained offline on a few sentences, saved as a model directory that the exporter reads. Its text is
noise; it is for trying the export and the runner without downloading a model (the README and docs use it).

    from litert_torch.generative import examples
    model_dir = examples.save_tiny_llama("tiny_llama")     # config.json, model.safetensors, tokenizer.json, ...

Needs `transformers` (the `llm` extra).
"""

from __future__ import annotations

import os
from typing import Any

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a small model runs on the phone without a server",
    "once upon a time there was a little robot who liked to count tokens",
    "weights and caches live in memory while the model decodes one token at a time",
    "hello world, this is a test of the tokenizer and the language model",
] * 4

CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} </s>"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}")

# the ids the tokenizer gives its special tokens, in this order
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]


def tokenizer(vocab_size: int = 160) -> Any:
    """A byte-level BPE (every byte is a token, so any text encodes) trained on `CORPUS`, as a transformers
    `PreTrainedTokenizerFast` with a start token, a stop token and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def common_config(vocab_size: int) -> dict[str, Any]:
    """The sizes every tiny model shares: hidden 64, 2 layers, 4 query heads over 2 key/value heads."""
    return dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                max_position_embeddings=512)


def spread_weights(hf: Any, std: float = 0.15) -> Any:
    """Redraw `hf`'s weights wider than its config's initializer, so that the logits are spread and the greedy
    continuation is not one token repeated; move the norm scales off their initial value, so that they matter."""
    import torch

    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.normal_(0.0, std)
    return hf


def tiny_llama(vocab_size: int, seed: int = 0) -> Any:
    """A randomly initialised 2-layer `LlamaForCausalLM` (tied embeddings), in eval mode."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**common_config(vocab_size), tie_word_embeddings=True)
    return spread_weights(transformers.AutoModelForCausalLM.from_config(config).eval())


def save_tiny_llama(directory: str, seed: int = 0) -> str:
    """Save a tiny Llama and its tokenizer into `directory` (created if needed) with `save_pretrained`, as a
    downloaded model directory is laid out, and return `directory`."""
    tok = tokenizer()
    hf = tiny_llama(len(tok), seed)
    hf.generation_config.eos_token_id = tok.eos_token_id
    os.makedirs(directory, exist_ok=True)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory
