"""Op coverage measured with test suites nobody here wrote: PyTorch's OpInfo database (`opinfo`) and ONNX's
backend node tests (`onnx_node`, generated with onnx's own case generators). `runner` runs their cases in
worker processes, so that a runtime abort or a hang costs one case, not the run:

    python -m litert_torch.coverage opinfo --sample 0.1     # a run, results in bench/results/opinfo.json
    python -m litert_torch.coverage onnx-node               # then docs/COVERAGE.md shows them
"""

STATUSES = ("pass", "wrong", "refused", "runtime-error", "error", "crash", "timeout", "not-exported", "skipped")
# pass: matches the reference. wrong: ran and differs (values, shape or dtype): a silent wrong answer.
# refused: a typed conversion error before anything was written. runtime-error: converted, then the runtime
# refused to run it (a typed error). error: an untyped exception from the converter (a bug). crash: the process
# died (signal). timeout: no answer in time. not-exported: torch.export (not the converter) cannot trace it.
# skipped: the case is outside what the suite measures (non-tensor outputs, unsupported input dtypes).
