"""Text-embedding accuracy: each tiny encoder of tests/generative/test_embedding.py (random weights) exported in
float and with int8 weights, its embeddings of four texts compared with Hugging Face's (with the directory's
sentence-transformers modules), in our runner and in LiteRT-LM's EmbeddingEngine; with the export time and the
bundle size. The figures of docs/EMBEDDINGS.md come from it.

    python bench/embeddings.py [--recipes none,dynamic_wi8_afp32]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="none,dynamic_wi8_afp32")
    args = parser.parse_args()

    from litert_torch.generative import embedding_runner
    from litert_torch.generative.export_hf import export
    from tests.generative import tiny_embed
    from tests.generative.test_embedding import MODELS, _engine_embeddings, _save

    root = tempfile.mkdtemp(prefix="bench_embeddings_")
    print("| model | recipe | cosine vs Hugging Face (min-max) | max abs(EmbeddingEngine - ours) | export s | bundle KB |")
    print("|---|---|---|---|---|---|")
    for name in MODELS:
        path = _save(root, name)
        reference = tiny_embed.reference(path, tiny_embed.TEXTS)
        for recipe in args.recipes.split(","):
            start = time.perf_counter()
            bundle = export.export(path, os.path.join(root, f"{name}_{recipe}"), task="text_embedding",
                                   prefill_lengths=[8, 24], quantization_recipe=recipe)
            seconds = time.perf_counter() - start
            ours = embedding_runner.load_embedding(bundle).embed(tiny_embed.TEXTS)
            engine = _engine_embeddings(bundle, tiny_embed.TEXTS, root)
            cosines = tiny_embed.cosines(ours, reference)
            print(f"| {name} | {recipe} | {cosines.min():.7f}-{cosines.max():.7f} | "
                  f"{np.abs(engine - ours).max():.1e} | {seconds:.1f} | {os.path.getsize(bundle) / 1024:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
