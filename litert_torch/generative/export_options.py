"""What every Hugging Face export (`export_hf.export`, the text-embedding export) checks of its options: the
quantization recipe and the output folder."""

from __future__ import annotations

import os
from typing import Any

from litert_torch.errors import InvalidArgumentError

# Recipe names of our own; anything else is an ai-edge-quantizer recipe name (ai_edge_quantizer.recipe.<name>)
# or a JSON recipe file. None means the default, as for the official exporter.
DEFAULT_RECIPE = "dynamic_wi8_afp32"
FLOAT_RECIPES = ("", "none", "null", "false", "float", "fp32")
# The int8 weights of our own pass (dense layers, embedding tables, gathered expert tables), as a recipe.
INT8_WEIGHTS = "int8-weights"


def check_recipe(recipe: Any) -> Any:
    """The quantization mode or recipe list to apply, or None for float."""
    if recipe is None:
        recipe = DEFAULT_RECIPE
    if isinstance(recipe, str) and recipe.strip().lower() in FLOAT_RECIPES:
        return None
    if recipe in ("dynamic_wi8_afp32", "dynamic-int8"):
        return INT8_WEIGHTS
    if recipe == "fp16":
        return recipe
    if isinstance(recipe, (str, os.PathLike)) and os.fspath(recipe).endswith(".json"):
        if not os.path.isfile(recipe):
            raise InvalidArgumentError(f"quantization recipe file {os.fspath(recipe)} does not exist")
        return os.fspath(recipe)
    if isinstance(recipe, str):
        try:
            from ai_edge_quantizer import recipe as recipes
        except ImportError as exc:
            raise InvalidArgumentError(f"quantization recipe {recipe!r} needs ai-edge-quantizer: "
                                  "pip install 'litert-torch-direct[quantize]'") from exc
        make = getattr(recipes, recipe, None)
        names = sorted(n for n in dir(recipes) if n.startswith(("dynamic_", "weight_only_")))
        if not callable(make) or recipe not in names:
            raise InvalidArgumentError(f"unknown quantization recipe {recipe!r}; use 'none', 'fp16', 'dynamic-int8', a "
                                  f"JSON recipe file, or one of: {', '.join(names)}")
        return make()
    if isinstance(recipe, list):
        return recipe
    raise InvalidArgumentError(f"quantization_recipe must be a name or a JSON file, got {type(recipe).__name__}")


def check_output_dir(path: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidArgumentError(f"output_dir {path} exists and is not a directory")
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(os.path.abspath(probe))
    if not os.access(probe, os.W_OK):
        raise InvalidArgumentError(f"output_dir {path} is not writable")


def refuse_options(task: str, refused: dict[str, bool], why: str) -> None:
    """Refuse, by name, the official exporter's options that were given (`refused`: name -> given) but mean
    nothing for `task`; `why` says what the task does instead."""
    given = [name for name, bad in refused.items() if bad]
    if given:
        raise InvalidArgumentError(f"option(s) {', '.join(given)} do not apply to task {task} ({why})")
