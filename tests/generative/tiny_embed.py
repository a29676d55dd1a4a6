"""Tiny text-embedding models built from configs (random weights) with a small WordPiece tokenizer, saved as
model directories the exporter reads, optionally with sentence-transformers modules (modules.json, Pooling,
Dense, Normalize); and the reference embedding computed from them with transformers, as sentence-transformers
computes it."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import torch.nn.functional as F

WORDS = ("the quick brown fox jumps over lazy dog a small model runs on phone without server once upon time "
         "there was little robot who liked to count tokens hello world this is test of embeddings").split()

TEXTS = ["the quick brown fox jumps over the lazy dog", "a small model runs on the phone",
         "hello world", "once upon a time there was a little robot who liked to count tokens"]


def tokenizer(family: str = "bert"):
    """A WordPiece tokenizer in the family's fast tokenizer class: [CLS] text [SEP] for BERT-like models,
    <bos> text <eos> for Gemma."""
    import transformers as T
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    if family == "gemma3":
        special = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
        start, end = "<bos>", "<eos>"
    else:
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        start, end = "[CLS]", "[SEP]"
    vocab = {w: i for i, w in enumerate(dict.fromkeys(special + list(WORDS)))}
    unk = special[3] if family == "gemma3" else "[UNK]"
    tok = Tokenizer(models.WordPiece(vocab, unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{start} $A {end}", pair=f"{start} $A {end} $B {end}",
        special_tokens=[(start, vocab[start]), (end, vocab[end])])
    if family == "gemma3":
        return T.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                         pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    if family == "modernbert":
        return T.PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]",
                                         pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    return T.BertTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                               unk_token="[UNK]", mask_token="[MASK]")


def config(family: str, vocab_size: int, **overrides):
    import transformers as T

    if family == "bert":
        cfg = T.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    elif family == "roberta":
        cfg = T.RobertaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=66, pad_token_id=0)
    elif family == "modernbert":
        cfg = T.ModernBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                 intermediate_size=64, max_position_embeddings=64, local_attention=8,
                                 global_attn_every_n_layers=2, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                                 bos_token_id=2, eos_token_id=3)
    elif family == "gemma3":  # EmbeddingGemma: Gemma 3 with bidirectional attention
        cfg = T.Gemma3TextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=4,
                                 query_pre_attn_scalar=8, max_position_embeddings=64, pad_token_id=0,
                                 bos_token_id=2, eos_token_id=1, use_bidirectional_attention=True,
                                 layer_types=["sliding_attention", "full_attention"])
    else:
        raise ValueError(family)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def model(family: str, vocab_size: int, seed: int = 0, **overrides):
    import transformers as T

    torch.manual_seed(seed)
    cfg = config(family, vocab_size, **overrides)
    hf = T.AutoModel.from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():  # weights wider than the initializer's, norms off 1, so that every part matters
        for name, p in hf.named_parameters():
            if "norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.normal_(0.0, 0.1)
    return hf


def save(directory: str, family: str, *, pooling: dict | None = None, dense: list[tuple[int, str, bool]] = (),
         normalize: bool = False, max_seq_length: int | None = None, seed: int = 0, **overrides) -> str:
    """Save a tiny model and its tokenizer in `directory`. With `pooling` (sentence-transformers' Pooling
    config, e.g. {"pooling_mode_cls_token": True}), `dense` ((out_features, activation class name, bias) per
    Dense module) or `normalize`, also the sentence-transformers modules."""
    tok = tokenizer(family)
    hf = model(family, len(tok), seed, **overrides)
    os.makedirs(directory, exist_ok=True)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    if pooling is None and not dense and not normalize:
        return directory
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    width = hf.config.hidden_size
    pooling = {"word_embedding_dimension": width, **(pooling or {"pooling_mode_mean_tokens": True})}
    _module(directory, modules, "Pooling", pooling)
    width *= sum(1 for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
    generator = torch.Generator().manual_seed(seed + 1)
    for out, activation, bias in dense:
        folder = _module(directory, modules, "Dense", {"in_features": width, "out_features": out, "bias": bias,
                                                      "activation_function": activation})
        from safetensors.torch import save_file

        tensors = {"linear.weight": torch.randn(out, width, generator=generator) * 0.2}
        if bias:
            tensors["linear.bias"] = torch.randn(out, generator=generator) * 0.1
        save_file(tensors, os.path.join(folder, "model.safetensors"))
        width = out
    if normalize:
        _module(directory, modules, "Normalize", None)
    with open(os.path.join(directory, "modules.json"), "w") as f:
        json.dump(modules, f, indent=2)
    if max_seq_length is not None:
        with open(os.path.join(directory, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": max_seq_length, "do_lower_case": False}, f)
    return directory


def _module(directory: str, modules: list, kind: str, config: dict | None) -> str:
    idx = len(modules)
    path = f"{idx}_{kind}"
    modules.append({"idx": idx, "name": str(idx), "path": path, "type": f"sentence_transformers.models.{kind}"})
    folder = os.path.join(directory, path)
    os.makedirs(folder, exist_ok=True)
    if config is not None:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
    return folder


def reference(directory: str, texts: list[str]) -> np.ndarray:
    """The embedding of each text, as sentence-transformers computes it from the directory: the tokenizer with
    its special tokens, the transformers model, then the modules of modules.json (mean pooling alone without
    it)."""
    import transformers as T
    from safetensors.torch import load_file

    tok = T.AutoTokenizer.from_pretrained(directory)
    hf = T.AutoModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    modules_file = os.path.join(directory, "modules.json")
    modules = json.load(open(modules_file)) if os.path.exists(modules_file) else [
        {"type": "sentence_transformers.models.Pooling", "path": None}]
    out = []
    for text in texts:
        batch = tok(text, return_tensors="pt")
        with torch.no_grad():
            states = hf(**batch).last_hidden_state
            mask = batch["attention_mask"][..., None].float()
            x = None
            for module in modules:
                kind = module["type"].rsplit(".", 1)[-1]
                folder = os.path.join(directory, module["path"]) if module["path"] else None
                if kind == "Pooling":
                    cfg = json.load(open(os.path.join(folder, "config.json"))) if folder else {
                        "pooling_mode_mean_tokens": True}
                    parts = []
                    if cfg.get("pooling_mode_cls_token"):
                        parts.append(states[:, 0])
                    if cfg.get("pooling_mode_max_tokens"):
                        parts.append(states.masked_fill(mask == 0, -1e9).max(dim=1).values)
                    if cfg.get("pooling_mode_mean_tokens"):
                        parts.append((states * mask).sum(1) / mask.sum(1))
                    if cfg.get("pooling_mode_mean_sqrt_len_tokens"):
                        parts.append((states * mask).sum(1) / mask.sum(1).sqrt())
                    if cfg.get("pooling_mode_weightedmean_tokens"):
                        w = mask * torch.arange(1, states.shape[1] + 1)[None, :, None]
                        parts.append((states * w).sum(1) / w.sum(1))
                    if cfg.get("pooling_mode_lasttoken"):
                        parts.append(states[:, int(mask.sum()) - 1])
                    x = torch.cat(parts, dim=-1)
                elif kind == "Dense":
                    cfg = json.load(open(os.path.join(folder, "config.json")))
                    w = load_file(os.path.join(folder, "model.safetensors"))
                    x = F.linear(x, w["linear.weight"], w.get("linear.bias"))
                    x = {"Identity": x, "Tanh": torch.tanh(x), "ReLU": torch.relu(x), "GELU": F.gelu(x)}[
                        cfg["activation_function"].rsplit(".", 1)[-1]]
                elif kind == "Normalize":
                    x = F.normalize(x, p=2, dim=1)
        out.append(x[0].numpy())
    return np.stack(out)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
