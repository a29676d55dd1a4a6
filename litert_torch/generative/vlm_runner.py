"""Running an image+text bundle (vlm.py) in LiteRT from Python: a prompt with images -> generated text.

    from litert_torch import generative
    vlm = generative.load("out/model.litertlm")
    text = "".join(vlm.generate("<start_of_image> What is in this image?", images=[rgb_uint8_array]))

Each image is preprocessed as the model's processor does it (resized to the encoder's size with the processor's
filter, rescaled, normalised), run through the vision encoder and the adapter, and its rows take the place of
the image tokens the processor's text puts where the prompt marks the image. Every other token's row comes from
the embedder; the decoder then prefills and decodes on embeddings, as for a text LLM (runner.py), with the
attention masks it takes as inputs. An image's tokens are prefilled in one call: with Gemma 3 each attends to all
of its image's tokens, later ones included.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from litert_torch.errors import ModelFileError, ModelInputError, ModelLoadError, one_line
from litert_torch.generative.layout import DECODE, prefill_signature
from litert_torch.generative.runner import CacheFullError, LlmRunner, Sampling, stream_text
from litert_torch.generative.vlm import VLM_KEY, ImageSpec
from litert_torch.metadata import decode as decode_metadata


class ImageInputError(ModelInputError):
    """The images given do not fit the prompt (their count, their array shape) or the model."""


@dataclass
class VlmBundle:
    """What an image+text bundle holds, read back."""

    decoder: bytes
    embedder: bytes
    vision_encoder: bytes
    vision_adapter: bytes
    tokenizer: str


SECTIONS = {"tf_lite_prefill_decode": "decoder", "tf_lite_embedder": "embedder",
            "tf_lite_vision_encoder": "vision_encoder", "tf_lite_vision_adapter": "vision_adapter"}


def _check_grid(spec: ImageSpec, height: int, width: int) -> None:
    """LFM2-VL: ImageInputError unless the processor resizes a `height` x `width` image to the encoder's size (it
    keeps the aspect ratio, so another image would be another grid of patches, with another number of tokens)."""
    from litert_torch.generative.vlm_families import lfm2_vl_size

    factor = int(spec.patch_size or 1) * int(spec.downsample_factor or 1)
    low, high = spec.image_token_range or (1, 1)
    size = lfm2_vl_size(height, width, factor, low, high)
    if size != (spec.height, spec.width):
        raise ImageInputError(f"the model's processor resizes a {width}x{height} image to {size[1]}x{size[0]} "
                              f"({size[0] * size[1] // factor ** 2} image tokens); the bundle's encoder takes "
                              f"{spec.width}x{spec.height}: give a square image of about that size or larger")


def read_vlm_bundle(path: str) -> VlmBundle:
    """Every model section of an image+text bundle and its tokenizer; ModelFileError when one is missing."""

    from litert_torch.generative.bundle import tokenizer_text, unpacked

    where = os.fspath(path)
    found: dict[str, Any] = {}
    with unpacked(path) as scratch:
        for name in sorted(os.listdir(scratch)):
            with open(os.path.join(scratch, name), "rb") as f:
                raw = f.read()
            kind = next((v for k, v in SECTIONS.items() if name.endswith(f"{k}.tflite")), None)
            if kind is not None:
                found[kind] = raw
            elif "HF_Tokenizer" in name:
                found["tokenizer"] = tokenizer_text(raw, name, where)
    missing = [k for k in (*SECTIONS.values(), "tokenizer") if k not in found]
    if missing:
        raise ModelFileError(f"{where} is not an image+text bundle: it has no {', '.join(missing)} section")
    return VlmBundle(**found)


class VlmRunner(LlmRunner):
    """A converted image+text model: `generate(prompt, images=[...])`, `generate_ids(ids, images=...)`."""

    def __init__(self, bundle: VlmBundle, tokenizer: Any, *, num_threads: int | None = None):
        from litert_torch.generative.embedding_runner import _interpreter, _signature_runner

        super().__init__(bundle.decoder, tokenizer, num_threads=num_threads)
        self.bundle = bundle
        if not self.layout.embeddings_input or VLM_KEY not in self.metadata:
            raise ModelFileError(f"the bundle's decoder does not take embeddings (no {VLM_KEY} metadata)")
        try:
            self.spec = ImageSpec.from_json(decode_metadata(self.metadata[VLM_KEY]))
        except (TypeError, ValueError) as exc:
            raise ModelFileError(f"the decoder's {VLM_KEY} metadata is malformed ({exc})") from None
        names = self.spec.signatures
        self._embedder = _signature_runner(bundle.embedder, names["embedder"], num_threads)
        self._encoder = self._signature(_interpreter(bundle.vision_encoder, num_threads), names["encoder"])
        self._adapter = self._signature(_interpreter(bundle.vision_adapter, num_threads), names["adapter"])
        self._rows: dict[int, np.ndarray] = {}

    @staticmethod
    def _signature(interpreter: Any, key: str) -> Any:
        if key not in interpreter.get_signature_list():
            raise ModelFileError(f"the bundle has no signature {key!r}")
        try:
            return interpreter.get_signature_runner(key)
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not load signature {key!r}: {one_line(exc)}") from None

    # -- images ---------------------------------------------------------------------------------------------
    def preprocess(self, image: Any) -> np.ndarray:
        """`image` (uint8 H x W x 3 or x 4, H x W grey, or a PIL image) as the encoder's input float32[1, S, S, 3]:
        converted to RGB, resized to the encoder's size with the processor's filter when it differs (Idefics3:
        first to its longest edge, keeping the aspect ratio; LLaVA: the shortest edge, then the centre crop;
        LFM2-VL: only an image that the processor resizes to that size, ImageInputError otherwise), divided by 255
        (the encoder rescales and normalises as the processor does)."""
        from PIL import Image

        spec = self.spec
        if not isinstance(image, Image.Image):
            array = np.asarray(image)
            if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (
                    1, 3, 4)):
                raise ImageInputError(f"an image must be a uint8 array H x W x 3 (RGB), H x W x 4 or H x W, got "
                                      f"{array.dtype} {list(array.shape)}")
            image = Image.fromarray(array[..., 0] if array.ndim == 3 and array.shape[2] == 1 else array)
        if image.mode != "RGB":
            if not spec.convert_rgb:
                raise ImageInputError(f"the model's processor takes RGB images; this one is {image.mode}")
            image = image.convert("RGB")
        resample = Image.Resampling(spec.resample)
        if spec.patch_size is not None and spec.image_token_range is not None:
            _check_grid(spec, image.height, image.width)
        if spec.shortest_edge is not None:  # LLaVA: the shortest edge, keeping the aspect ratio; the centre crop
            short, long = sorted(image.size)
            size = (spec.shortest_edge, int(spec.shortest_edge * long / short))
            size = size if image.width <= image.height else size[::-1]
            if image.size != size:
                image = image.resize(size, resample=resample)
            left, top = (image.width - spec.width) // 2, (image.height - spec.height) // 2
            if left < 0 or top < 0:
                raise ImageInputError(f"an image resized to {image.width}x{image.height} is smaller than the "
                                      f"{spec.width}x{spec.height} crop")
            image = image.crop((left, top, left + spec.width, top + spec.height))
        if spec.longest_edge is not None:  # Idefics3: first to the longest edge, keeping the aspect ratio
            width, height = _aspect_size(image.width, image.height, spec.longest_edge)
            if image.size != (width, height):
                image = image.resize((width, height), resample=resample)
        if image.size != (spec.width, spec.height):
            image = image.resize((spec.width, spec.height), resample=resample)
        return (np.asarray(image, np.float32) / np.float32(255.0))[None]

    def encode_image(self, image: Any) -> np.ndarray:
        """The input embeddings of `image`'s tokens, float32[T, H]: the vision encoder, then the adapter (the rows
        it gives after the image tokens' rows, Gemma 3's end-of-image token, are left out: that token's row comes
        from the embedder, as any token's)."""
        try:
            features = self._encoder(images=self.preprocess(image))["features"]
            rows = np.asarray(self._adapter(features=features)["embeddings"], np.float32)
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run the vision encoder: {one_line(exc)}") from None
        return rows.reshape(-1, rows.shape[-1])[:self.spec.tokens_per_image]

    def prompt_ids(self, prompt: str, num_images: int) -> list[int]:
        """The token ids of `prompt` with each image placeholder expanded as the processor expands it."""
        parts = prompt.split(self.spec.placeholder)
        if len(parts) - 1 != num_images:
            raise ImageInputError(f"the prompt marks {len(parts) - 1} image(s) with {self.spec.placeholder!r}; "
                                  f"{num_images} image(s) were given")
        if not self.spec.prefix_lm:
            return self.encode(self.spec.image_text.join(parts))
        # PaliGemma: the images (at the start when the prompt does not place them), the start token, the rest of
        # the prompt and "\n"
        if num_images and len(parts[0]) + sum(len(p) for p in parts[1:-1]):
            raise ImageInputError(f"the prompt has text before an image's {self.spec.placeholder!r}: this model's "
                                  f"processor puts the images first")
        ids = [self.spec.image_token_id] * (self.spec.tokens_per_image * num_images)
        text = self.encode(parts[-1] + "\n")
        if text[:1] == [self.layout.start_token_id]:
            text = text[1:]
        start = [] if self.spec.prompt_start_id is None else [self.spec.prompt_start_id]
        return ids + start + text

    # -- the decoder on embeddings -------------------------------------------------------------------------
    def _embed(self, token: int) -> np.ndarray:
        if token not in self._rows:
            try:
                out = self._embedder(token=np.array([token], np.int32))["embeddings"]
            except (RuntimeError, ValueError) as exc:
                raise ModelLoadError(f"LiteRT could not run the embedder: {one_line(exc)}") from None
            self._rows[token] = np.asarray(out, np.float32).reshape(-1)
        return self._rows[token]

    def _signature_io(self, key: str):
        if key not in self._io:
            inputs = {n: self._compiled.create_input_buffer_by_name(key, n) for n in ("embeddings", "input_pos", "mask")}
            outputs = {"logits": self._compiled.create_output_buffer_by_name(key, "logits")} if key == DECODE else {}
            self._io[key] = (inputs, outputs)
        return self._io[key]

    def _check_room(self, count: int) -> None:
        super()._check_room(count + self.spec.position_offset)

    def mask(self, ends: np.ndarray) -> np.ndarray:
        """The decoder's mask input [1, 1, N, C] for tokens that attend up to the cache slots `ends` (their own
        slots, or their image's or prefix's last): 0 where a token attends, MASKED elsewhere (and over the slots
        before `position_offset`, which are never written; sliding-window layers apply their window to it)."""
        from litert_torch.generative.direct import MASKED

        slots = np.arange(self.cache_length)[None, :]
        seen = (slots <= ends[:, None]) & (slots >= self.spec.position_offset)
        return np.where(seen, 0.0, MASKED).astype(np.float32)[None, None]

    def _run_embeddings(self, key: str, rows: np.ndarray, positions: np.ndarray,
                        ends: np.ndarray | None) -> np.ndarray | None:
        try:
            inputs, outputs = self._signature_io(key)
            inputs["embeddings"].write(rows.reshape(1, len(positions), -1).astype(np.float32))
            offset = self.spec.position_offset
            inputs["input_pos"].write((positions + offset).astype(np.int32))
            inputs["mask"].write(self.mask((positions if ends is None else ends) + offset))
            self._compiled.run_by_name(key, {**inputs, **self._caches}, {**outputs, **self._caches})
            return outputs["logits"].read(self.layout.vocab_size, np.float32) if outputs else None
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run signature {key!r}: {one_line(exc)}") from None

    def prefill(self, token_ids: Sequence[int], images: Sequence[Any] = ()) -> np.ndarray:  # type: ignore[override]
        """Process `token_ids` (the image tokens already expanded, one run of `tokens_per_image` per image in
        `images`) after what is in the cache; return the logits after the last token. As for text, all tokens
        but the last go through the prefill signatures and the last through decode; a chunk never splits an
        image's tokens. A prefix LM (PaliGemma) prefills the whole prompt in one call, each token attending to
        all of it, then decodes its last token again at its position for the logits (it attends to the same
        tokens, so it writes the same cache entries)."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ModelInputError("prefill needs at least one token")
        self._check_room(len(ids))
        rows = np.stack([self._embed(t) for t in ids])
        ends = np.arange(self.position, self.position + len(ids))
        runs = self._image_runs(ids, len(images))
        if runs and runs[-1][1] == len(ids) and self.spec.bidirectional:
            raise ImageInputError("the prompt ends with an image's tokens: its last token would be decoded alone, "
                                  "apart from the image's other tokens, which attend to it")
        for (start, stop), image in zip(runs, images):
            rows[start:stop] = self.encode_image(image)
            if self.spec.bidirectional:
                ends[start:stop] = self.position + stop - 1
        body = len(ids) - 1
        if self.spec.prefix_lm:
            self._check_prefix(len(ids))
            ends[:] = self.position + len(ids) - 1
            body = len(ids)
        start = 0
        while start < body:
            left = body - start
            sizes = [n for n in self.layout.prefill_lengths if self.position + self.spec.position_offset + n
                     <= self.cache_length]
            if not sizes:
                raise CacheFullError(f"no prefill signature fits the {self.cache_length - self.position} cache "
                                     f"positions left; reset() or convert with a larger cache_length")
            fitting = [n for n in sizes if n >= left]
            n = fitting[0] if fitting else sizes[-1]
            take = min(n, left)
            for a, b in runs:  # end the chunk before an image it would split
                if a < start + take < b and a > start:
                    take = a - start
                elif start <= a < start + take < b:
                    raise ImageInputError(f"an image's {b - a} tokens do not fit one prefill call of at most "
                                          f"{sizes[-1]} tokens here; convert with a longer prefill length")
            chunk = np.zeros((n, rows.shape[1]), np.float32)
            chunk[:take] = rows[start:start + take]
            positions = np.arange(self.position, self.position + n)
            chunk_ends = positions.copy()
            chunk_ends[:take] = ends[start:start + take]
            self._run_embeddings(prefill_signature(n), chunk, positions, chunk_ends)
            self.position += take
            start += take
        if self.spec.prefix_lm:
            self.position -= 1
        logits = self._run_embeddings(DECODE, rows[-1:], np.array([self.position]), None)
        self.position += 1
        return logits  # type: ignore[return-value]

    def _check_prefix(self, count: int) -> None:
        """A prefix LM's prompt of `count` tokens must be the cache's first and fit one prefill call (its tokens
        attend to each other), and within the sliding window where the decoder has one (the model's prefix is
        bidirectional over all of it, which the decoder's windowed layers would cut)."""
        if self.position:
            raise ImageInputError("this model's prompt is a prefix attended in both directions: it must start "
                                  "from an empty cache (reset())")
        fits = [n for n in self.layout.prefill_lengths if n >= count and n + self.spec.position_offset
                <= self.cache_length]
        if not fits:
            raise ImageInputError(f"this model's prompt of {count} tokens is a prefix attended in both directions "
                                  f"and must fit one prefill call; the longest is {self.layout.prefill_lengths[-1]}")
        if self.spec.sliding_window is not None and count > self.spec.sliding_window:
            raise ImageInputError(f"this model's prompt of {count} tokens is longer than the decoder's sliding "
                                  f"window {self.spec.sliding_window}, which would cut its bidirectional prefix")

    def _image_runs(self, ids: list[int], count: int) -> list[tuple[int, int]]:
        """The [start, stop) of each run of image tokens in `ids`; each must hold one image's tokens."""
        token, n = self.spec.image_token_id, self.spec.tokens_per_image
        runs, i = [], 0
        while i < len(ids):
            if ids[i] == token:
                j = i
                while j < len(ids) and ids[j] == token:
                    j += 1
                if (j - i) % n:
                    raise ImageInputError(f"the prompt has a run of {j - i} image tokens; an image takes {n}")
                runs += [(a, a + n) for a in range(i, j, n)]
                i = j
            else:
                i += 1
        if len(runs) != count:
            raise ImageInputError(f"the prompt has image tokens for {len(runs)} image(s); {count} were given")
        return runs

    def decode(self, token_id: int) -> np.ndarray:
        """Process one token at the current position; return its logits."""
        self._check_room(1)
        logits = self._run_embeddings(DECODE, self._embed(int(token_id))[None], np.array([self.position]), None)
        self.position += 1
        return logits  # type: ignore[return-value]

    def generate_ids(self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling | None = None, *,
                     stop: bool = True, images: Sequence[Any] = ()) -> Iterator[int]:
        """Yield up to `max_new_tokens` new token ids after `prompt_ids` (image tokens expanded, one run per image
        of `images`) from a fresh cache, stopping after a stop token (unless `stop` is False)."""
        sampling = sampling or Sampling()
        sampling.check()
        rng = np.random.default_rng(sampling.seed)
        self.reset()
        need = len(prompt_ids) + max_new_tokens - 1 + self.spec.position_offset
        if need > self.cache_length:
            raise CacheFullError(f"a prompt of {len(prompt_ids)} tokens and {max_new_tokens} new tokens need "
                                 f"{need} cache entries; the cache holds "
                                 f"{self.cache_length}")
        logits = self.prefill(prompt_ids, images)
        for i in range(max_new_tokens):
            token = sampling.pick(logits, rng)
            yield token
            if (stop and token in self.stop_token_ids) or i == max_new_tokens - 1:
                return
            logits = self.decode(token)

    def generate(self, prompt: str, max_new_tokens: int = 32, *, images: Sequence[Any] = (),  # type: ignore[override]
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, on_token: Callable[[str], None] | None = None) -> Iterator[str]:
        """Stream the new text after `prompt`, whose image placeholders (Gemma 3: `<start_of_image>`, Idefics3:
        `<image>`) mark where each of `images` goes, in order."""
        ids = self.generate_ids(self.prompt_ids(prompt, len(images)), max_new_tokens,
                                Sampling(temperature, top_k, top_p, seed), images=images)
        for piece in stream_text(ids, self.decode_text):
            if on_token is not None:
                on_token(piece)
            yield piece


def _aspect_size(width: int, height: int, longest: int) -> tuple[int, int]:
    """(width, height) with the longest side `longest` and the aspect ratio kept, the other side rounded down then
    up to an even number (Idefics3's image processor)."""
    ratio = width / height
    if width >= height:
        width, height = longest, int(longest / ratio)
        height += height % 2
    else:
        width, height = int(longest * ratio), longest
        width += width % 2
    return max(width, 1), max(height, 1)


def load_vlm(path: str, *, num_threads: int | None = None) -> VlmRunner:
    """A runner for the image+text bundle at `path`."""
    from tokenizers import Tokenizer

    bundle = read_vlm_bundle(path)
    try:
        tokenizer = Tokenizer.from_str(bundle.tokenizer)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception type
        raise ModelFileError(f"the bundle's tokenizer.json cannot be read: {one_line(exc)}") from None
    return VlmRunner(bundle, tokenizer, num_threads=num_threads)
