"""A suite worker inside the official converter's own virtual environment (PyPI `litert-torch`, which shares our
import name): it answers the same case ids as `python -m litert_torch.suites.runner worker opinfo`, on the same
protocol, building each case with our suite's own code (loaded by file, without our package) and converting it
with the official `litert_torch.convert`.

    <official-venv>/bin/python bench/official_opinfo_worker.py     # started by bench/official_opinfo.py
"""

import importlib.util
import os
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name, relative):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relative))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def failed(exc):
    """The official package has no error hierarchy of ours: a failure inside torch.export (its innermost frame in
    torch, not in the converter) is not-exported, any other a refusal."""
    frames = traceback.extract_tb(exc.__traceback__)
    inner = [f.filename for f in frames if "/site-packages/" in f.filename]
    in_torch = bool(inner) and "/site-packages/torch/" in inner[-1] and any(
        "/torch/export/" in f or "/torch/_dynamo/" in f for f in inner)
    detail = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return {"status": "not-exported" if in_torch else "refused", "detail": detail}


def run(edge, inputs):
    return edge(*inputs)


def main():
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    opinfo = load("suite_opinfo", "litert_torch/suites/opinfo.py")
    common = load("suite_common", "litert_torch/suites/common.py")
    runner = load("suite_runner", "litert_torch/suites/runner.py")
    import litert_torch  # the official converter: this process runs in its environment only

    def run_case(case):
        built = opinfo.build(case)
        if isinstance(built, dict):
            return built
        module, inputs, outs = built
        return common.convert_run_compare(
            lambda: litert_torch.convert(module, inputs), inputs, lambda: [o.detach().numpy() for o in outs],
            lambda e: (opinfo.RTOL, opinfo.ATOL), "PyTorch", failed=failed, run=run)

    runner.serve(run_case)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
