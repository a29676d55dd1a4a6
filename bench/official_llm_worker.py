"""Runs inside the official converter's own virtual environment (bench/.venv-official): one `export_hf` export,
reporting its time and the process's peak RSS as JSON on the last line of stdout.

    <official-venv>/bin/python bench/official_llm_worker.py MODEL_DIR OUT_DIR PREFILL CACHE RECIPE
"""

import json
import resource
import sys
import time
import types


def main():
    src, out, prefill, cache, recipe = sys.argv[1:6]
    # The official package (0.10.0) imports TensorFlow's copy of the TFLite schema bindings from one model
    # extension when export_hf loads; the same bindings ship with ai_edge_litert, which this environment has.
    # torch and transformers look for TensorFlow while importing: they are imported before the stand-in exists.
    import importlib.machinery

    import torch._dynamo  # noqa: F401
    import transformers  # noqa: F401
    from ai_edge_litert import schema_py_generated

    for name in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        sys.modules.setdefault(name, module)
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema_py_generated

    start = time.perf_counter()
    from litert_torch.generative.export_hf import export  # the official converter, in its own environment

    export.export(model=src, output_dir=out, prefill_lengths=[int(prefill)], cache_length=int(cache),
                  quantization_recipe=None if recipe == "none" else recipe)
    print(json.dumps({"seconds": time.perf_counter() - start,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
