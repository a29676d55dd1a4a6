"""Converting and validating a fleet of models on Ray: models x variants from a manifest, one task each.

    litert-convert batch fleet.toml -o out/ [--address ray://head:10001]
    litert_torch.batch.run("fleet.toml", "out/", address=None)

The manifest (TOML):

    [defaults]                       # convert() options for every model (optional)
    target = ["cpu"]

    [resources]                      # what each task asks Ray for (optional)
    cpus = 1
    memory_gb = 2

    [[model]]
    name = "tiny_cnn"
    source = "samples/models/tiny_cnn.py:build"   # file.py:name | package.module:name | .onnx | .pt2
    options = { }                                 # convert() options for this model
    variants = ["float", "dynamic-int8"]          # which variants to make (optional: all of them)
    memory_gb = 4                                 # this model's own resources (optional)

    [[model]]
    name = "smollm"
    source = "models/smollm"                      # a Hugging Face model directory: the LLM exporter
    options = { prefill_lengths = [32], cache_length = 512 }

    [llm]                                         # export options for every Hugging Face directory (optional)
    cache_length = 1024

    [[variant]]
    name = "float"

    [[variant]]
    name = "dynamic-int8"
    quantize = "dynamic-int8"                     # any convert() option

    [validation]                                  # optional: validate each file against its source
    draws = 2                                     # random inputs besides the sample (models)
    prompt = "Once upon a time"                   # LLMs: greedy tokens against Hugging Face's generate
    tokens = 16

Each (model, variant) is a Ray task with the declared CPU and memory needs. Inside it the conversion runs in a
child process (`python -m litert_torch.batch task ...`), so a segfault or abort in the runtime marks that task
failed with the signal and the model's name while every other task finishes; Ray retries a task only when its
node is lost (a transient failure), never a model that failed. Results are keyed by a hash of the source's
bytes, the options and the toolkit version: a rerun (after Ctrl-C, a killed node, or an edited manifest) does
only what is missing or changed. Files land atomically: OUT/<model>/<variant>.tflite, .json (the task's
result) and .html (its validation report); OUT/results.json and OUT/results.html hold the table.

A source that is a Hugging Face model directory (config.json, weights, tokenizer) is exported with the LLM
exporter (`litert_torch.generative.export_hf`) to OUT/<model>/<variant>.litertlm. Its options are the
exporter's: `prefill_lengths`, `cache_length`, `quantize` (or `quantization_recipe`: "fp16", "dynamic-int8", an
ai-edge-quantizer recipe name), `use_jinja_template`, `trust_remote_code`; `[defaults]` hold convert() options
and do not apply to it, `[llm]` holds its defaults. A variant that names no quantization (or `quantize =
"none"`) is float for every source, LLMs included (the exporter's own default is int8). Its latency is the decode time per token in
the LiteRT runtime, and its validation the greedy continuation of `prompt` against Hugging Face's `generate`
(a float bundle must decode identically; a quantized one is reported with its token agreement).

Without `address` a local Ray instance starts (and stops at the end); with one, the run joins that cluster
(`ray` from PyPI: `pip install -e '.[fleet]'`).

Dataset-scale validation (`validate_dataset`, from `litert_torch.validation.dataset`) runs a dataset through PyTorch and each
converted model on Ray Data actors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import os
import subprocess
import sys
import time
import tomllib
from typing import Any, Callable

from litert_torch.validation.dataset import DatasetReport, VariantStats, validate_dataset  # noqa: F401 - public here too
from litert_torch.errors import InvalidArgumentError, LiteRTTorchError

RESULTS = "results.json"


class ManifestError(InvalidArgumentError):
    """A manifest that cannot be read or names something wrongly (exit code 2 in the CLI)."""


@dataclasses.dataclass(frozen=True)
class Task:
    model: str
    variant: str
    source: str
    options: dict[str, Any]
    validation: dict[str, Any] | None
    key: str  # hash of the source's bytes, the options and the toolkit version
    kind: str = "model"  # "model" (convert) or "llm" (a Hugging Face directory, through the LLM exporter)
    cpus: float | None = None  # this model's own [resources], when it gives them
    memory_gb: float | None = None

    @property
    def label(self) -> str:
        return f"{self.model}/{self.variant}"


@dataclasses.dataclass
class Manifest:
    tasks: list[Task]
    cpus: float = 1.0
    memory_gb: float = 2.0
    base: str = "."


# "quantize" values that mean float (no quantization) for any source.
FLOAT_MODES = ("", "none", "float", "fp32")

# The LLM exporter's options a manifest may give (quantize is quantization_recipe's short name).
LLM_OPTIONS = ("prefill_lengths", "cache_length", "quantize", "quantization_recipe", "use_jinja_template",
               "trust_remote_code")


def read_manifest(path: str) -> Manifest:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ManifestError(f"cannot read the manifest {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path} is not valid TOML: {exc}") from None
    base = os.path.dirname(os.path.abspath(path))
    defaults = data.get("defaults", {})
    llm_defaults = data.get("llm", {})
    models = data.get("model", [])
    variants = data.get("variant", [{"name": "float"}])
    if not isinstance(models, list) or not models:
        raise ManifestError(f"{path} lists no [[model]] entries")
    for table, value in (("[defaults]", defaults), ("[llm]", llm_defaults)):
        if not isinstance(value, dict):
            raise ManifestError(f"{table} must be a table of options, got {value!r}")
    for v in variants:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise ManifestError(f"each [[variant]] needs a name, got {v!r}")
    by_name = {v["name"]: v for v in variants}
    resources = data.get("resources", {})
    validation = data.get("validation")
    tasks, seen = [], set()
    for m in models:
        if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not isinstance(m.get("source"), str):
            raise ManifestError(f"each [[model]] needs a name and a source, got {m!r}")
        chosen = m.get("variants", list(by_name))
        if not isinstance(chosen, list) or not all(isinstance(n, str) for n in chosen):
            raise ManifestError(f"{m['name']}: variants must be a list of variant names, got {chosen!r}")
        unknown = [n for n in chosen if n not in by_name]
        if unknown:
            raise ManifestError(f"{m['name']}: no [[variant]] named {', '.join(map(repr, unknown))} "
                                f"(the manifest has {', '.join(map(repr, by_name))})")
        source = _resolve(m["source"], base)
        kind = "llm" if is_hf_directory(source) else "model"
        for v in (by_name[n] for n in chosen):
            label = f"{m['name']}/{v['name']}"
            if label in seen:
                raise ManifestError(f"{label} appears twice in the manifest")
            seen.add(label)
            own = {**m.get("options", {}), **{k: val for k, val in v.items() if k != "name"}}
            if kind == "llm":
                options = {**llm_defaults, **own}
                wrong = sorted(set(options) - set(LLM_OPTIONS))
                if wrong:
                    raise ManifestError(f"{label}: {m['source']} is a Hugging Face model directory, exported by the "
                                        f"LLM exporter, which takes {', '.join(LLM_OPTIONS)}; not "
                                        f"{', '.join(wrong)} (give the model a `variants` list to leave a "
                                        "variant out)")
                # a variant that names no quantization is float for every kind of source
                options.setdefault("quantize", options.pop("quantization_recipe", "none"))
            else:
                options = {**defaults, **own}
                if str(options.get("quantize", "")).lower() in FLOAT_MODES:
                    options.pop("quantize", None)
            key = _key(source, options, validation)
            tasks.append(Task(m["name"], v["name"], source, options, validation, key, kind,
                              _number(m, "cpus", label), _number(m, "memory_gb", label)))
    return Manifest(tasks, float(resources.get("cpus", 1)), float(resources.get("memory_gb", 2)), base)


def _number(entry: dict, key: str, label: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ManifestError(f"{label}: {key} must be a positive number, got {value!r}")
    return float(value)


def is_hf_directory(source: str) -> bool:
    """A folder saved with save_pretrained: a config.json beside the weights."""
    return os.path.isdir(source) and os.path.isfile(os.path.join(source, "config.json"))


def _resolve(source: str, base: str) -> str:
    """A file path in SOURCE relative to the manifest's folder."""
    if not os.path.isabs(source) and os.path.isdir(os.path.join(base, source)):
        return os.path.join(base, source)
    location, sep, name = source.rpartition(":")
    path = location if sep else source
    if path and not os.path.isabs(path) and (path.endswith((".py", ".onnx", ".pt2")) or "/" in path):
        path = os.path.join(base, path)
        return f"{path}:{name}" if sep else path
    return source


def _source_files(source: str) -> list[str]:
    """The files the result depends on: every file of a model directory, the file the source names (for a
    module, its file), or none (then the source string alone)."""
    if os.path.isdir(source):
        return sorted(os.path.join(root, n) for root, _, names in os.walk(source) for n in names)
    location = source.rpartition(":")[0] if ":" in source and not source.lower().endswith((".onnx", ".pt2")) \
        else source
    candidates = [location]
    if location and not os.path.exists(location):
        import importlib.util

        try:
            spec = importlib.util.find_spec(location)
            candidates = [spec.origin] if spec and spec.origin else []
        except (ImportError, ValueError):
            candidates = []
    return [p for p in candidates if p and os.path.isfile(p)][:1]


def _key(source: str, options: dict, validation: dict | None) -> str:
    from litert_torch import __version__

    h = hashlib.sha256()

    def part(data: bytes) -> None:
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)

    files = _source_files(source)
    for path in files:
        part(os.path.relpath(path, source).encode() if os.path.isdir(source) else b"")
        h.update(os.path.getsize(path).to_bytes(8, "little"))
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    if not files:
        part(source.encode())
    part(json.dumps([source, options, validation], sort_keys=True).encode())
    part(__version__.encode())
    return h.hexdigest()[:24]


# ---- one task (in a child process) ---------------------------------------------------------------------------
def run_task(task: Task, out_dir: str) -> dict[str, Any]:
    """Convert (and validate) one model variant; writes its files atomically and returns its result."""
    from litert_torch.files import write_atomic

    start = time.perf_counter()
    result: dict[str, Any] = {"model": task.model, "variant": task.variant, "key": task.key, "source": task.source,
                              "kind": task.kind}
    folder = os.path.join(out_dir, task.model)
    os.makedirs(folder, exist_ok=True)
    if task.kind == "llm":
        return _run_llm_task(task, out_dir, folder, result, start)
    model_path = os.path.join(folder, f"{task.variant}.tflite")
    edge, module, args, kwargs = _convert(task)
    edge.export(model_path)
    result.update(status="ok", file=os.path.relpath(model_path, out_dir), bytes=len(edge.flatbuffer),
                  convert_seconds=round(time.perf_counter() - start, 3))
    if args is not None:
        result["latency_ms"] = _latency(edge, args, kwargs)
    if task.validation is not None and module is not None and args is not None:
        import litert_torch

        from litert_torch.quantization.quantize import TOLERANCES

        draws = int(task.validation.get("draws", 2))
        mode = task.options.get("quantize")
        # a quantized variant is held to its mode's tolerance (docs/QUANTIZATION.md), a float one to validate's
        tolerance = {}
        if mode:
            rtol, atol = TOLERANCES[mode if isinstance(mode, str) and mode in TOLERANCES else "recipe"]
            tolerance = {"rtol": rtol, "atol": atol}
        report = litert_torch.validate(module, tuple(args), edge, sample_kwargs=kwargs, draws=draws,
                                       backends=("xnnpack",), per_layer=False, **tolerance)
        write_atomic(os.path.join(folder, f"{task.variant}.html"), report.to_html().encode())
        worst = max((o.max_rel_error for b in report.backends for o in b.outputs), default=0.0)
        result["validation"] = {"verdict": report.verdict, "max_rel_error": worst,
                                "report": os.path.relpath(os.path.join(folder, f"{task.variant}.html"), out_dir)}
        if not report.passed:
            result["status"] = "failed"
            result["error"] = f"validation: the converted model departs from the source (rel {worst:.2e})"
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def llm_export_options(options: dict[str, Any]) -> dict[str, Any]:
    """A manifest's LLM options as `export_files` keywords (quantize is quantization_recipe's short name)."""
    out = {k: v for k, v in options.items() if k not in ("quantize", "quantization_recipe")}
    recipe = options.get("quantization_recipe", options.get("quantize"))
    if recipe is not None:
        out["quantization_recipe"] = recipe
    return out


def _run_llm_task(task: Task, out_dir: str, folder: str, result: dict[str, Any], start: float) -> dict[str, Any]:
    """Export a Hugging Face directory to OUT/<model>/<variant>.litertlm; time decoding; validate its greedy
    continuation against Hugging Face's."""
    from litert_torch import generative
    from litert_torch.files import write_atomic
    from litert_torch.generative.export_hf.export import export_files
    from litert_torch.quantization.report import QUANTIZATION_KEY

    bundle = os.path.join(folder, f"{task.variant}.litertlm")
    export_files(task.source, bundle_path=bundle, **llm_export_options(task.options))
    result.update(status="ok", file=os.path.relpath(bundle, out_dir), bytes=os.path.getsize(bundle),
                  convert_seconds=round(time.perf_counter() - start, 3))
    runner = generative.load(bundle)
    result["latency_ms"] = _decode_latency(runner)
    if task.validation is not None:
        from litert_torch.generative.hf import reference_model

        prompt = str(task.validation.get("prompt", "Once upon a time"))
        tokens = int(task.validation.get("tokens", 16))
        ids = runner.encode(prompt)
        tokens = max(1, min(tokens, runner.cache_length - len(ids)))
        hf = reference_model(task.source, trust_remote_code=bool(task.options.get("trust_remote_code", False)))
        report = generative.validate_llm(runner, hf, ids, tokens)
        quantized = QUANTIZATION_KEY in runner.metadata
        verdict = "PASS" if report.identical else ("REPORTED" if quantized else "FAIL")
        page = os.path.join(folder, f"{task.variant}.html")
        write_atomic(page, _llm_report_html(task, report, verdict).encode())
        result["validation"] = {"verdict": verdict, "max_rel_error": report.max_relative_error,
                                "token_agreement": report.token_agreement, "tokens": len(report.tokens),
                                "first_divergence": report.first_divergence,
                                "first_divergent_layer": report.first_divergent_layer,
                                "layer_errors": report.layer_errors,
                                "report": os.path.relpath(page, out_dir)}
        if verdict == "FAIL":
            result["status"] = "failed"
            result["error"] = (f"validation: the float bundle does not decode like the Hugging Face model (the greedy "
                               f"tokens differ at step {report.first_divergence})")
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def _decode_latency(runner: Any, steps: int = 8) -> float:
    """The median time of one decode step, in ms, after a short prefill."""
    runner.reset()
    runner.prefill([0] * min(4, runner.cache_length - steps - 1))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        runner.decode(0)
        times.append(time.perf_counter() - t)
    runner.reset()
    return round(sorted(times)[len(times) // 2] * 1000, 3)


def _llm_report_html(task: Task, report: Any, verdict: str) -> str:
    def at(values: list, i: int, fmt: Callable[[Any], str]) -> str:
        return fmt(values[i]) if i < len(values) else ""

    rows = "".join(f"<tr><td>{i}</td><td>{at(report.reference_tokens, i, str)}</td><td>{at(report.tokens, i, str)}"
                   f"</td><td>{at(report.step_max_abs_error, i, lambda e: f'{e:.3g}')}</td>"
                   f"<td>{at(report.step_top1_agrees, i, lambda a: 'yes' if a else 'no')}</td></tr>"
                   for i in range(max(len(report.reference_tokens), len(report.tokens))))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>"
            f"{html.escape(task.label)}: {verdict}</title><style>body{{font-family:sans-serif}}"
            "td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style></head><body>"
            f"<h1>{html.escape(task.label)}: {verdict}</h1><pre>{html.escape(report.summary())}</pre>"
            "<table><tr><th>step</th><th>Hugging Face token</th><th>our token</th><th>max |logit error|</th>"
            "<th>top-1 agrees (teacher-forced)</th></tr>" + rows + "</table></body></html>\n")


def _convert(task: Task):
    import litert_torch
    from litert_convert.sources import OnnxSource, load_source

    src = load_source(task.source)
    options = dict(task.options)
    if isinstance(src.model, OnnxSource):
        return litert_torch.convert_onnx(src.model.path, **options), None, None, None
    if isinstance(src.model, litert_torch.Converter):
        return src.model.convert(**options), None, None, None
    if src.args is None:
        raise InvalidArgumentError(f"{task.source} gives no sample inputs: return (module, sample_args)")
    edge = litert_torch.convert(src.model, tuple(src.args), src.kwargs or None, **options)
    module = src.model.module() if hasattr(src.model, "module") and not hasattr(src.model, "forward") else src.model
    return edge, module, tuple(src.args), dict(src.kwargs or {})


def _latency(edge, args, kwargs, runs: int = 10) -> float:
    edge.call_like_module(*args, **kwargs)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        edge.call_like_module(*args, **kwargs)
        times.append(time.perf_counter() - t)
    return round(sorted(times)[len(times) // 2] * 1000, 3)


def _child(task_json: str, out_dir: str) -> int:
    """`python -m litert_torch.batch task TASK_JSON OUT_DIR`: one task, its result as the last stdout line."""
    task = Task(**json.loads(task_json))
    try:
        result = run_task(task, out_dir)
    except (LiteRTTorchError, Exception) as exc:  # noqa: BLE001 - any failure of this model is its result
        result = {"model": task.model, "variant": task.variant, "key": task.key, "source": task.source,
                  "status": "failed", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"}
    print("@@result " + json.dumps(result), flush=True)
    return 0


def _in_child(task: Task, out_dir: str, timeout: float) -> dict[str, Any]:
    """run_task in a child process: a crash there is this task's failure, named by its signal."""
    import signal

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path))
    try:
        proc = subprocess.run([sys.executable, "-m", "litert_torch.batch", "task",
                               json.dumps(dataclasses.asdict(task)), out_dir], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"model": task.model, "variant": task.variant, "key": task.key, "source": task.source,
                "status": "failed", "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("@@result "):
            return json.loads(line[len("@@result "):])
    if proc.returncode < 0:
        reason = f"the conversion process died ({signal.Signals(-proc.returncode).name})"
    else:
        tail = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or [f"exit {proc.returncode}"]
        reason = f"the conversion process failed: {tail[0][:300]}"
    return {"model": task.model, "variant": task.variant, "key": task.key, "source": task.source,
            "status": "failed", "error": reason}


# ---- the run ----------------------------------------------------------------------------------------------------
def run(manifest: str | Manifest, out_dir: str, address: str | None = None, *, timeout: float = 3600.0,
        progress: Callable[[int, int, dict], None] | None = None) -> dict[str, Any]:
    """Run every task of `manifest` not already done (same key, status ok) on Ray; returns the results table
    ({"tasks": [...], "summary": {...}}) also written to OUT/results.json and OUT/results.html."""
    plan = read_manifest(manifest) if isinstance(manifest, str) else manifest
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, dict] = {}
    todo = []
    for task in plan.tasks:
        done = _previous(task, out_dir)
        if done is not None:
            results[task.label] = {**done, "cached": True}
        else:
            todo.append(task)
    if todo:
        results.update(_run_on_ray(todo, out_dir, address, plan, timeout, progress, len(results), len(plan.tasks)))
    table = {"tasks": [results[t.label] for t in plan.tasks],
             "summary": {"tasks": len(plan.tasks), "ran": len(todo),
                         "ok": sum(r["status"] == "ok" for r in results.values()),
                         "failed": sum(r["status"] != "ok" for r in results.values())}}
    from litert_torch.files import write_atomic

    write_atomic(os.path.join(out_dir, RESULTS), json.dumps(table, indent=1).encode())
    write_atomic(os.path.join(out_dir, "results.html"), results_html(table).encode())
    return table


def _previous(task: Task, out_dir: str) -> dict | None:
    path = os.path.join(out_dir, task.model, f"{task.variant}.json")
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        return None
    model = os.path.join(out_dir, str(result.get("file", "")))
    if result.get("key") == task.key and result.get("status") == "ok" and os.path.isfile(model):
        return result
    return None


def _run_on_ray(todo: list[Task], out_dir: str, address: str | None, plan: Manifest, timeout: float,
                progress, already: int, total: int) -> dict[str, dict]:
    try:
        import ray
    except ImportError:
        raise LiteRTTorchError("litert_torch.batch needs Ray: pip install 'litert-torch-direct[fleet]'") from None
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}})
        started = True
    from litert_torch.files import write_atomic

    remote = ray.remote(num_cpus=plan.cpus, memory=int(plan.memory_gb * 2**30), max_retries=2,
                        retry_exceptions=False)(_in_child)
    pending = {}
    for task in todo:
        call = remote
        if task.cpus is not None or task.memory_gb is not None:
            cpus = plan.cpus if task.cpus is None else task.cpus
            memory = plan.memory_gb if task.memory_gb is None else task.memory_gb
            call = remote.options(num_cpus=cpus, memory=int(memory * 2**30))
        pending[call.remote(task, out_dir, timeout)] = task
    results: dict[str, dict] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            task = pending.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - Ray lost the task after its retries (nodes gone)
                result = {"model": task.model, "variant": task.variant, "key": task.key, "source": task.source,
                          "status": "failed", "error": f"Ray could not run the task: {type(exc).__name__}"}
            write_atomic(os.path.join(out_dir, task.model, f"{task.variant}.json"),
                         json.dumps(result, indent=1).encode())
            results[task.label] = result
            if progress is not None:
                progress(already + len(results), total, result)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
    return results


def results_html(table: dict) -> str:
    rows = []
    for r in table["tasks"]:
        v = r.get("validation") or {}
        report = f'<a href="{html.escape(v["report"])}">{html.escape(v.get("verdict", ""))}</a>' if v.get("report") \
            else ""
        status = html.escape(r["status"]) + (" (cached)" if r.get("cached") else "")
        rows.append(f"<tr class='{html.escape(r['status'])}'><td>{html.escape(r['model'])}</td>"
                    f"<td>{html.escape(r['variant'])}</td><td>{status}</td>"
                    f"<td>{r.get('bytes', 0) / 1e6:.2f}</td><td>{r.get('latency_ms', '')}"
                    f"{' per token' if r.get('kind') == 'llm' and 'latency_ms' in r else ''}</td>"
                    f"<td>{v.get('max_rel_error', '') if v else ''}</td><td>{report}</td>"
                    f"<td>{html.escape(r.get('error', ''))}</td></tr>")
    s = table["summary"]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>litert_torch fleet</title><style>"
            "body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
            ".failed{background:#fde8e8}</style></head><body>"
            f"<h1>Fleet: {s['ok']} ok, {s['failed']} failed of {s['tasks']}</h1><table><tr><th>model</th>"
            "<th>variant</th><th>status</th><th>MB</th><th>latency ms</th><th>max rel err</th><th>validation</th>"
            "<th>error</th></tr>" + "".join(rows) + "</table></body></html>\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "task":
        sys.exit(_child(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m litert_torch.batch task TASK_JSON OUT_DIR")
