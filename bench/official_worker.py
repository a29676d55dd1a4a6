"""Runs inside the official converter's own virtual environment (PyPI `litert-torch`, which shares our import
name, so it never shares an environment with this project). Converts each job's model, with the weights and
inputs the benchmark saved, and reports the conversion time.

    <official-venv>/bin/python bench/official_worker.py jobs.json results.json
"""

import gc
import importlib.util
import json
import os
import sys
import time
import traceback


def load_zoo(path):
    spec = importlib.util.spec_from_file_location("bench_zoo", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_zoo"] = module
    spec.loader.exec_module(module)
    return module


def main():
    jobs_path, results_path = sys.argv[1], sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)
    import torch

    import litert_torch  # the official converter: this process runs in its environment only

    ours = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "litert_torch")
    if os.path.dirname(os.path.abspath(litert_torch.__file__)) == ours:
        sys.exit(f"official_worker: imported this checkout's litert_torch ({litert_torch.__file__}), not the "
                 "official package; run it without this checkout on PYTHONPATH")

    zoo = load_zoo(jobs["zoo"])
    cases = {c.name: c for c in zoo.MODELS}
    results = {}
    litert_torch.convert(zoo.MLP().eval(), (torch.randn(1, 32),))  # warm-up, as on our side
    for job in jobs["models"]:
        name = job["name"]
        try:
            saved = torch.load(job["weights"], weights_only=True)
            model = cases[name].build()
            model.load_state_dict(saved["state"])
            model.eval()
            inputs = tuple(saved["inputs"])
            gc.collect()  # as on our side, before each timed conversion
            start = time.perf_counter()
            edge = litert_torch.convert(model, inputs)
            edge.export(job["out"])
            results[name] = {"seconds": time.perf_counter() - start, "path": job["out"]}
        except Exception as exc:  # report and go on with the next model
            results[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                             "trace": traceback.format_exc()[-2000:]}
        print(f"official: {name}: {results[name].get('seconds', results[name].get('error'))}", flush=True)
    results["_version"] = getattr(litert_torch, "__version__", "unknown")
    with open(results_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
