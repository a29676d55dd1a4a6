"""Hugging Face causal LMs to a LiteRT-LM bundle: `from litert_torch.generative.export_hf import export`,
then `export.export(model=DIR_OR_MODEL, output_dir=OUT, ...)` (see `export.export`)."""
