"""Tiny demo image+text models. A Gemma 3 (`Gemma3ForConditionalGeneration`: a 2-layer SigLIP vision tower, the
multimodal projector, a 2-layer Gemma 3 text model) with random weights, its processor (`Gemma3Processor` with a
`Gemma3ImageProcessor` for 32x32 images, 4 tokens per image) and a small byte-level BPE tokenizer trained offline
with Gemma 3's image tokens, saved as a model directory the exporter reads; an Idefics3 (a 2-layer vision tower,
the pixel-shuffle connector, a 2-layer Llama) with its processor (image splitting off); a LLaVA (a 2-layer CLIP
tower, the MLP projector, a 2-layer Llama) with CLIP's image processor; a PaliGemma (a 2-layer SigLIP tower, the
linear projector, a 2-layer Gemma) with its processor; an LFM2-VL (a 2-layer SigLIP2 NaFlex tower, the
pixel-unshuffle projector, a 3-layer LFM2) with its processor (image splitting off). Their text is noise; they are
for trying the export and the runner without downloading a model (docs/VLM.md uses them).

    from litert_torch.generative import vlm_examples
    model_dir = vlm_examples.save_tiny_gemma3("tiny_gemma3")
    model_dir = vlm_examples.save_tiny_idefics3("tiny_idefics3")
    model_dir = vlm_examples.save_tiny_llava("tiny_llava")
    model_dir = vlm_examples.save_tiny_paligemma("tiny_paligemma")
    model_dir = vlm_examples.save_tiny_lfm2_vl("tiny_lfm2_vl")

Needs `transformers`, `torch` and `torchvision` (the image processor).
"""

from __future__ import annotations

import os
from typing import Any

from litert_torch.generative.examples import CORPUS

# the ids the tokenizer gives its special tokens, in this order
GEMMA3_SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>", "<start_of_image>", "<end_of_image>",
                         "<image_soft_token>", "<start_of_turn>", "<end_of_turn>"]
IMAGE_SIZE = 32
TOKENS_PER_IMAGE = 4


def gemma3_tokenizer(vocab_size: int = 200) -> Any:
    """A byte-level BPE trained on `CORPUS` with Gemma 3's special tokens, as a transformers fast tokenizer
    that names its image tokens as `Gemma3Processor` reads them (boi_token, eoi_token, image_token)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_bpe(GEMMA3_SPECIAL_TOKENS, vocab_size, "<bos>"), bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                              "image_token": "<image_soft_token>"})


def gemma3_processor(tokenizer: Any = None) -> Any:
    """`Gemma3Processor` for `IMAGE_SIZE` images and `TOKENS_PER_IMAGE` image tokens, built from its
    constructors."""
    import transformers

    tokenizer = tokenizer if tokenizer is not None else gemma3_tokenizer()
    images = transformers.Gemma3ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return transformers.Gemma3Processor(image_processor=images, tokenizer=tokenizer,
                                        image_seq_length=TOKENS_PER_IMAGE)


def tiny_gemma3(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised `Gemma3ForConditionalGeneration` in eval mode: the vision tower takes `IMAGE_SIZE`
    images in 8x8 patches (16 patches, pooled to `TOKENS_PER_IMAGE` tokens); the text model has a sliding-window
    layer and a global one. Weights are drawn wider than the config's initializer and the norm scales moved off
    their initial value, so that the greedy continuation depends on the image."""
    import torch
    import transformers as T

    text = T.Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0,
                              bos_token_id=1, eos_token_id=2, max_position_embeddings=512, sliding_window=6,
                              query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention"])
    vision = T.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  image_size=IMAGE_SIZE, patch_size=8)
    config = T.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=TOKENS_PER_IMAGE,
                            boi_token_index=tokenizer.convert_tokens_to_ids("<start_of_image>"),
                            eoi_token_index=tokenizer.convert_tokens_to_ids("<end_of_image>"),
                            image_token_index=tokenizer.convert_tokens_to_ids("<image_soft_token>"))
    torch.manual_seed(seed)
    return _spread(T.Gemma3ForConditionalGeneration(config).eval(), text_part=None)


def save_tiny_gemma3(directory: str, seed: int = 0) -> str:
    """Save the tiny Gemma 3 image+text model, its processor and tokenizer into `directory` (created if
    needed) with `save_pretrained`, as a downloaded model directory is laid out, and return `directory`."""
    processor = gemma3_processor()
    return _save(directory, tiny_gemma3(processor.tokenizer, seed), processor)


IDEFICS3_SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<fake_token_around_image>", "<image>", "<global-img>",
                           "<end_of_utterance>"]


def _bpe(specials: list[str], vocab_size: int, bos: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 1)])
    return tok


def idefics3_processor() -> Any:
    """`Idefics3Processor` for `IMAGE_SIZE` images without splitting (`TOKENS_PER_IMAGE` image tokens), with a
    byte-level BPE trained on `CORPUS` holding Idefics3's image tokens."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_bpe(IDEFICS3_SPECIAL_TOKENS, 200, "<s>"), bos_token="<s>", eos_token="</s>",
        pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                              "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"})
    images = transformers.Idefics3ImageProcessor(size={"longest_edge": IMAGE_SIZE},
                                                 max_image_size={"longest_edge": IMAGE_SIZE}, do_image_splitting=False)
    return transformers.Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=TOKENS_PER_IMAGE)


def tiny_idefics3(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised `Idefics3ForConditionalGeneration` in eval mode: the vision tower takes `IMAGE_SIZE`
    images in 8x8 patches (16 patches, shuffled by 2 into `TOKENS_PER_IMAGE` tokens); the text model is a 2-layer
    Llama. The text model's weights are drawn wider, as for the tiny text LLMs, so that its logits are spread."""
    import torch
    import transformers as T

    text = T.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         max_position_embeddings=512)
    vision = T.Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                    image_size=IMAGE_SIZE, patch_size=8)
    config = T.Idefics3Config(vision_config=vision.to_dict(), text_config=text.to_dict(), scale_factor=2,
                              image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    torch.manual_seed(seed)
    return _spread(T.Idefics3ForConditionalGeneration(config).eval(), text_part="text_model")


def save_tiny_idefics3(directory: str, seed: int = 0) -> str:
    """Save the tiny Idefics3, its processor and tokenizer into `directory` (created if needed) with
    `save_pretrained`, and return `directory`."""
    processor = idefics3_processor()
    return _save(directory, tiny_idefics3(processor.tokenizer, seed), processor)


LLAVA_SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]


def llava_processor() -> Any:
    """`LlavaProcessor` with CLIP's image processor for `IMAGE_SIZE` images (shortest edge, then the centre crop)
    and 8x8 patches: 16 image tokens (the class token dropped), with a byte-level BPE trained on `CORPUS`."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_bpe(LLAVA_SPECIAL_TOKENS, 200, "<s>"), bos_token="<s>", eos_token="</s>",
        pad_token="<pad>", unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})
    images = transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                             crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return transformers.LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=8,
                                       vision_feature_select_strategy="default", num_additional_image_tokens=1)


def tiny_llava(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised `LlavaForConditionalGeneration` in eval mode: a 2-layer CLIP vision tower on
    `IMAGE_SIZE` images in 8x8 patches (its first layer's hidden states taken, the class token dropped), the MLP
    projector, a 2-layer Llama. The text model's weights are drawn wider, as for the tiny text LLMs."""
    import torch
    import transformers as T

    text = T.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         max_position_embeddings=512)
    vision = T.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                image_size=IMAGE_SIZE, patch_size=8, projection_dim=32)
    config = T.LlavaConfig(vision_config=vision, text_config=text, vision_feature_layer=-2,
                           vision_feature_select_strategy="default",
                           image_token_index=tokenizer.convert_tokens_to_ids("<image>"), image_seq_length=16)
    torch.manual_seed(seed)
    return _spread(T.LlavaForConditionalGeneration(config).eval(), text_part="language_model")


def save_tiny_llava(directory: str, seed: int = 0) -> str:
    """Save the tiny LLaVA, its processor and tokenizer into `directory` (created if needed) with
    `save_pretrained`, and return `directory`."""
    processor = llava_processor()
    return _save(directory, tiny_llava(processor.tokenizer, seed), processor)


def _spread(model: Any, text_part: str | None, text_std: float = 0.15) -> Any:
    """`model` with its norm scales moved off their initial value (by N(0, 0.1)) and its other weights drawn
    N(0, 0.05), those of its text model (parameters named with `text_part`, and the output layer) N(0, `text_std`)
    (0.15 as for the tiny text LLMs), so that the greedy continuation depends on the image."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                text = text_part is not None and (text_part in name or "lm_head" in name)
                p.normal_(0.0, text_std if text else 0.05)
    return model


def _save(directory: str, model: Any, processor: Any) -> str:
    """Save `model` (stopping at its tokenizer's end token), its processor and tokenizer into `directory`
    (created if needed) with `save_pretrained`, as a downloaded model directory is laid out; return it."""
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


PALIGEMMA_SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>", "<image>"]


def paligemma_processor() -> Any:
    """`PaliGemmaProcessor` with SigLIP's image processor for `IMAGE_SIZE` images and `TOKENS_PER_IMAGE` image
    tokens, with a byte-level BPE trained on `CORPUS` holding PaliGemma's image token."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_bpe(PALIGEMMA_SPECIAL_TOKENS, 200, "<bos>"), bos_token="<bos>", eos_token="<eos>",
        pad_token="<pad>", unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})
    images = transformers.SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    setattr(images, "image_seq_length", TOKENS_PER_IMAGE)  # what PaliGemmaProcessor reads
    return transformers.PaliGemmaProcessor(image_processor=images, tokenizer=tokenizer)


def tiny_paligemma(tokenizer: Any, seed: int = 0, gemma2: bool = False) -> Any:
    """A randomly initialised `PaliGemmaForConditionalGeneration` in eval mode: a 2-layer SigLIP tower on
    `IMAGE_SIZE` images in 16x16 patches (`TOKENS_PER_IMAGE` tokens), the linear projector, a 2-layer Gemma text
    model. The text model's weights are drawn wider, as for the tiny text LLMs. With `gemma2`, PaliGemma 2's text
    model: Gemma 2 (a 32-token sliding window in its first layer, soft-capped attention and logits), its weights
    drawn N(0, 0.02) from seed 3 unless `seed` is given, where its greedy continuation varies and depends on the
    prefix mask (wider weights saturate the soft caps into one repeated token)."""
    import torch
    import transformers as T

    shape: dict[str, Any] = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                 pad_token_id=0, bos_token_id=1, eos_token_id=2, max_position_embeddings=512)
    text = T.Gemma2Config(**shape, sliding_window=32, query_pre_attn_scalar=16) if gemma2 else T.GemmaConfig(**shape)
    vision = T.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  image_size=IMAGE_SIZE, patch_size=16)
    config = T.PaliGemmaConfig(vision_config=vision.to_dict(), text_config=text.to_dict(), projection_dim=64,
                               image_token_index=tokenizer.convert_tokens_to_ids("<image>"))
    torch.manual_seed(3 if gemma2 and seed == 0 else seed)
    return _spread(T.PaliGemmaForConditionalGeneration(config).eval(), text_part="language_model",
                   text_std=0.02 if gemma2 else 0.3)


def save_tiny_paligemma(directory: str, seed: int = 0, gemma2: bool = False) -> str:
    """Save the tiny PaliGemma (with `gemma2`, PaliGemma 2), its processor and tokenizer into `directory`
    (created if needed) with `save_pretrained`, and return `directory`."""
    processor = paligemma_processor()
    return _save(directory, tiny_paligemma(processor.tokenizer, seed, gemma2), processor)


LFM2_VL_SPECIAL_TOKENS = ["<pad>", "<|startoftext|>", "<|im_end|>", "<unk>", "<image>", "<|image_start|>",
                          "<|image_end|>"]


def lfm2_vl_processor() -> Any:
    """`Lfm2VlProcessor` with its image processor set to one `IMAGE_SIZE` grid per image: no splitting into
    tiles, 8x8 patches downsampled by 2, at most `TOKENS_PER_IMAGE` image tokens (an `IMAGE_SIZE` square image
    keeps its size); with a byte-level BPE trained on `CORPUS` holding LFM2-VL's image tokens."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_bpe(LFM2_VL_SPECIAL_TOKENS, 200, "<|startoftext|>"), bos_token="<|startoftext|>",
        eos_token="<|im_end|>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>", "image_start_token": "<|image_start|>",
                              "image_end_token": "<|image_end|>"})
    images = transformers.Lfm2VlImageProcessor(do_image_splitting=False, encoder_patch_size=8, downsample_factor=2,
                                               min_image_tokens=1, max_image_tokens=TOKENS_PER_IMAGE)
    return transformers.Lfm2VlProcessor(image_processor=images, tokenizer=tokenizer)


def tiny_lfm2_vl(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised `Lfm2VlForConditionalGeneration` in eval mode: a 2-layer SigLIP2 NaFlex tower on
    `IMAGE_SIZE` images in 8x8 patches (a 4x4 grid, its position embeddings resized from a 6x6 table), the
    pixel-unshuffle projector (2x2 patches to a token: `TOKENS_PER_IMAGE` tokens), a 3-layer LFM2 text model
    (convolution, attention, convolution). The text model's weights are drawn wider, as for the tiny text LLMs."""
    import torch
    import transformers as T

    text = T.Lfm2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        max_position_embeddings=512, layer_types=["conv", "full_attention", "conv"])
    vision = T.Siglip2VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   patch_size=8, num_patches=36, vision_use_head=False)
    config = T.Lfm2VlConfig(vision_config=vision.to_dict(), text_config=text.to_dict(), projector_hidden_size=48,
                            downsample_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    torch.manual_seed(seed)
    return _spread(T.Lfm2VlForConditionalGeneration(config).eval(), text_part="language_model")


def save_tiny_lfm2_vl(directory: str, seed: int = 0) -> str:
    """Save the tiny LFM2-VL, its processor and tokenizer into `directory` (created if needed) with
    `save_pretrained`, and return `directory`."""
    processor = lfm2_vl_processor()
    return _save(directory, tiny_lfm2_vl(processor.tokenizer, seed), processor)
