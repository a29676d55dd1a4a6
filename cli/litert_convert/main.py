"""The `litert-convert` command: a thin client of litert_torch."""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from typing import Any, Callable

import click

from litert_convert.errors import BadInput, Failure
from litert_convert.export_tasks import export_asr_bundle, export_embedding_bundle, export_vlm_bundle
from litert_convert.output import ProgressBar, handled, make_console, open_status, quiet_torch

EXIT_CODES = """Exit codes: 0 success; 1 conversion or validation failed; 2 bad usage or bad input (missing or
malformed file, source, option; corrupt .tflite; existing output without --force)."""


def _show_runtime_logs(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        from litert_torch import logs

        logs.set_level("info")
    return value


def common_options(fn: Callable) -> Callable:
    fn = click.option("--debug", is_flag=True, callback=_show_runtime_logs,
                      help="Show the Python traceback of an error (and what --verbose shows).")(fn)
    fn = click.option("--verbose", "-v", is_flag=True, expose_value=False, callback=_show_runtime_logs,
                      help="Show the runtimes' own log lines (LiteRT, LiteRT-LM: warnings and errors otherwise) "
                           "and third-party progress bars and warnings.")(fn)
    fn = click.option("--quiet", "-q", is_flag=True, help="Print nothing but results and errors.")(fn)
    return fn


@click.group(help="Convert PyTorch models to LiteRT (.tflite), inspect, validate and time them.\n\n" + EXIT_CODES,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="litert-torch-direct", prog_name="litert-convert")
def cli() -> None:
    pass


# ---- convert ---------------------------------------------------------------------------------------------------
@cli.command(help="Convert SOURCE (path/to/file.py:name, package.module:name, or a torch.export .pt2 file) to "
                  "a .tflite file.\n\n" + EXIT_CODES)
@click.argument("source")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The .tflite file to write.")
@click.option("--input", "input_specs", multiple=True, metavar="NAME=DIMS:DTYPE",
              help="A sample input, e.g. x=1x3x224x224:float32 (repeatable); needed when SOURCE gives none.")
@click.option("--dynamic", "dynamic_specs", multiple=True, metavar="NAME:AXIS=DIM:MAX",
              help="Keep an input axis dynamic up to MAX, e.g. input_ids:1=seq:512 (repeatable; inputs naming the "
                   "same DIM share it).")
@click.option("--channel-last-io", is_flag=True, help="NHWC image inputs and outputs (no TRANSPOSE at the edges).")
@click.option("--target", default="cpu,gpu,npu", show_default=True,
              help="Delegate targets to plan for (cpu, gpu, npu); the plan is printed and stored in the model.")
@click.option("--npu", "npu_target", metavar="VENDOR:SOC",
              help="Also compile for an NPU ahead of time (e.g. qualcomm:SM8650), written next to the output; "
                   "needs the vendor's SDK package.")
@click.option("--quantize", metavar="MODE|RECIPE.json",
              help="fp16, dynamic-int8, int8 (needs --calibration), or an ai-edge-quantizer recipe file.")
@click.option("--calibration", type=click.Path(exists=True), metavar="DIR_OR_NPZ",
              help="Calibration inputs for int8: an .npz whose arrays, named after the model's inputs, stack "
                   "one sample per leading index, or a directory of such .npz files (one sample each).")
@click.option("--quantized-io", is_flag=True, help="With --quantize int8: int8 model inputs and outputs.")
@click.option("--keep-float", multiple=True, metavar="PATTERN",
              help="Keep in float the ops whose PyTorch node, module path or source line matches (repeatable).")
@click.option("--validate", "validate_", is_flag=True, help="Check the numbers against PyTorch after converting.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@common_options
@handled
def convert(source, output, input_specs, dynamic_specs, channel_last_io, target, npu_target, quantize, calibration, quantized_io,
            keep_float, validate_, as_json, force, quiet, debug) -> None:
    from litert_convert.sources import OnnxSource, load_source, sample_inputs

    quiet_torch(debug)
    targets = tuple(t.strip() for t in target.split(",") if t.strip())
    if not targets or any(t not in ("cpu", "gpu", "npu") for t in targets):
        raise BadInput(f"malformed --target {target!r}", "give a comma-separated list of cpu, gpu, npu")
    if os.path.exists(output) and not force:
        raise BadInput(f"{output} exists", "pass --force to overwrite it")
    if (calibration or quantized_io or keep_float) and not quantize:
        raise BadInput("--calibration, --quantized-io and --keep-float apply only with --quantize")
    if quantize and quantize not in ("fp16", "dynamic-int8", "int8") and not os.path.isfile(quantize):
        raise BadInput(f"unknown --quantize {quantize!r}", "choose fp16, dynamic-int8 or int8, or give a recipe file")
    if quantize == "int8" and not calibration:
        raise BadInput("--quantize int8 needs --calibration DIR_OR_NPZ",
                       "int8 activations are calibrated on representative inputs")
    if os.path.isdir(output):
        raise BadInput(f"{output} is a directory")
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise BadInput(f"no such directory: {directory}")
    if not os.access(directory, os.W_OK):
        raise BadInput(f"{directory} is not writable", "choose an output path in a folder you can write")
    console = make_console()
    with open_status(console, quiet, "loading the model") as status:
        src = load_source(source)
        if isinstance(src.model, OnnxSource):
            from litert_convert.sources import parse_input_spec

            shapes = {name: tuple(value.shape) for name, value in map(parse_input_spec, input_specs)}
            src.args = ()
        given = sample_inputs(src, [] if isinstance(src.model, OnnxSource) else list(input_specs))
        if given is None:
            raise BadInput(f"{source} gives no sample inputs", "pass them with --input NAME=1x3x224x224:float32")
        args, kwargs = given
        import litert_torch

        stages = {"export": "tracing with torch.export", "lower": "lowering ATen ops", "optimize": "optimizing",
                  "write": "writing the flatbuffer", "quantize": "quantizing"}
        start = time.perf_counter()
        validation_inputs = None  # a quantized model is checked on its calibration data, not random draws
        dynamic = _parse_dynamic(dynamic_specs)
        if isinstance(src.model, OnnxSource):
            edge = litert_torch.convert_onnx(src.model.path, input_shapes=shapes or None,
                                             dynamic_dims=_dynamic_shapes(dynamic) or None,
                                             channel_last_io=channel_last_io, target=targets,
                                             progress=lambda stage: status.update(stages.get(stage, stage)))
        elif isinstance(src.model, litert_torch.SignatureSet):
            if input_specs or quantize or validate_:
                raise BadInput(f"{source} gives several signatures ({', '.join(src.model.names)}); --input, "
                               "--quantize and --validate take one", "convert and check each from Python, or "
                               "name a source with one signature")
            edge = src.model.convert(channel_last_io=channel_last_io, target=targets,
                                     progress=lambda stage: status.update(stage))
        else:
            edge = litert_torch.convert(src.model, args, kwargs, channel_last_io=channel_last_io, target=targets,
                                        dynamic_shapes=_dynamic_shapes(dynamic),
                                        progress=lambda stage: status.update(stages.get(stage, stage)))
        if isinstance(src.model, OnnxSource):  # calibration files are checked against these shapes
            import numpy as np
            import torch

            args = tuple(torch.from_numpy(np.zeros([d if d >= 0 else 1 for d in t.shape], t.dtype))
                         for t in next(iter(edge.signatures.values())).inputs)  # -1: a dynamic size
        if quantize:
            status.update(stages["quantize"])
            samples = None
            if calibration:
                from litert_convert.calibration import load_calibration

                names = [t.name for t in next(iter(edge.signatures.values())).inputs]
                samples = load_calibration(calibration, args, kwargs, names, edge.io_spec.get("parameters"))
            edge = litert_torch.quantize_model(edge, quantize, calibration_data=samples, quantized_io=quantized_io,
                                         keep_float=keep_float)
            if samples:
                validation_inputs = _as_pytorch_inputs(edge, samples[:8])
        seconds = time.perf_counter() - start
        try:
            edge.export(output)
        except OSError as exc:  # a folder that refuses the file (read-only mount, full disk, ...)
            raise BadInput(f"cannot write {output}: {exc.strerror or exc}") from None
    summary: dict[str, Any] = {"source": source, "output": output, "bytes": len(edge.flatbuffer),
                               "seconds": round(seconds, 3)}
    from litert_torch.flatbuffer.reader import read_model

    subgraphs = read_model(edge.flatbuffer).subgraphs
    graph = subgraphs[0]
    summary["ops"] = sum(len(g.ops) for g in subgraphs)
    summary["op_histogram"] = graph.op_counts()
    plan = edge.delegate_plan
    summary["delegate_plan"] = plan.to_json()
    plans = edge.delegate_plans
    summary["signatures"] = list(plans)
    if not quiet and not as_json:
        console.print(f"wrote {output}: {len(edge.flatbuffer) / 1e6:.2f} MB, {summary['ops']} ops, "
                      f"{seconds:.2f}s" + (f", signatures {', '.join(plans)}" if len(plans) > 1 else ""))
        for key, signature_plan in plans.items():
            prefix = f"delegate plan [{key}]: " if len(plans) > 1 else "delegate plan: "
            click.echo("\n".join(prefix + line for line in signature_plan.render().splitlines()))
    if edge.quantization is not None:
        summary["quantization"] = edge.quantization.to_json()
        if not quiet and not as_json:
            click.echo(edge.quantization.summary())
    if npu_target:
        compiled = litert_torch.aot_compile(edge, npu_target)
        npu_path = os.path.splitext(output)[0] + "." + npu_target.replace(":", "_").lower() + ".tflite"
        litert_torch.EdgeModel(compiled).export(npu_path)
        summary["npu_output"] = npu_path
        if not quiet and not as_json:
            console.print(f"wrote {npu_path} (compiled for {npu_target})")
    failed = False
    if validate_:
        tolerances = {}
        if edge.quantization is not None:
            from litert_torch.quantization.quantize import TOLERANCES

            tolerances = dict(zip(("rtol", "atol"), TOLERANCES[edge.quantization.mode]))
        if isinstance(src.model, OnnxSource):
            report = litert_torch.validate_onnx(src.model.path, edge, input_shapes=shapes or None,
                                                inputs=validation_inputs, **tolerances)
        else:
            report = _validate(src.model, edge, args, kwargs, inputs=validation_inputs, **tolerances)
        summary["validation"] = report.to_json()
        failed = not report.passed
        if not as_json:
            click.echo(report.render())
    if failed:  # a model that fails its validation is not left behind
        for path in (output, summary.get("npu_output")):
            if path and os.path.exists(path):
                os.unlink(path)
        summary["removed"] = [p for p in (output, summary.get("npu_output")) if p]
    if as_json:
        click.echo(json.dumps(summary, indent=1, sort_keys=True))
    if failed:
        raise Failure(f"the converted model departs from PyTorch beyond the tolerance (see the table above); "
                      f"{output} was removed")


_DYNAMIC = re.compile(r"^(?P<name>[A-Za-z_]\w*):(?P<axis>\d+)=(?P<dim>[A-Za-z_]\w*):(?P<max>\d+)$")


def _parse_dynamic(specs) -> dict[str, dict[int, tuple[str, int]]]:
    """--dynamic NAME:AXIS=DIM:MAX specs as {input: {axis: (dim name, max)}}."""
    out: dict[str, dict[int, tuple[str, int]]] = {}
    maxima: dict[str, int] = {}
    for spec in specs:
        match = _DYNAMIC.match(spec.strip())
        if not match:
            raise BadInput(f"malformed --dynamic {spec!r}", "write it as NAME:AXIS=DIM:MAX, e.g. input_ids:1=seq:512")
        dim, high = match.group("dim"), int(match.group("max"))
        if maxima.setdefault(dim, high) != high:
            raise BadInput(f"--dynamic gives {dim} two maxima ({maxima[dim]} and {high})")
        if high < 2:
            raise BadInput(f"--dynamic {spec!r}: the maximum must be at least 2")
        out.setdefault(match.group("name"), {})[int(match.group("axis"))] = (dim, high)
    return out


def _dynamic_shapes(dynamic: dict[str, dict[int, tuple[str, int]]]):
    """torch.export dynamic_shapes for the parsed --dynamic specs (one Dim per name, shared by inputs)."""
    if not dynamic:
        return None
    from torch.export import Dim

    dims: dict[str, Any] = {}  # Dim name -> torch.export Dim
    for axes in dynamic.values():
        for name, high in axes.values():
            dims.setdefault(name, Dim(name, min=1, max=high))
    return {inp: {axis: dims[name] for axis, (name, _) in axes.items()} for inp, axes in dynamic.items()}


def _validate(model, edge, args, kwargs, per_layer=None, **options):
    import torch

    import litert_torch

    module = model.module() if isinstance(model, torch.export.ExportedProgram) else model
    return litert_torch.validate(module, tuple(args), edge, sample_kwargs=kwargs, per_layer=per_layer, **options)


def _as_pytorch_inputs(edge, samples: list[tuple]) -> list[tuple]:
    """Calibration samples (laid out as the model's inputs) as the PyTorch module takes them: NHWC image
    inputs of a channel-last model back to NCHW."""
    import numpy as np
    import torch

    io = edge.io_spec
    nhwc = set(io.get("channel_last_inputs", []))
    names = io.get("inputs", [])
    out = []
    for sample in samples:
        out.append(tuple(torch.from_numpy(np.ascontiguousarray(
            np.transpose(a, (0, 3, 1, 2)) if i < len(names) and names[i] in nhwc else a))
            for i, a in enumerate(sample)))
    return out


def _write_text(path: str, text: str) -> None:
    from litert_torch.files import write_atomic

    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise BadInput(f"no such directory: {directory}")
    write_atomic(path, text.encode("utf-8"))


# ---- inspect ---------------------------------------------------------------------------------------------------
@cli.command(help="Show what MODEL (.tflite) holds: signatures, op histogram, tensor and buffer sizes, and our "
                  "metadata; for a .litertlm bundle, also its tokens, chat template and KV-cache state buffers. "
                  "Reads any file without running it.\n\n" + EXIT_CODES)
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@common_options
@handled
def inspect(model, as_json, quiet, debug) -> None:
    from litert_convert.describe import BUNDLE_MAGIC, describe, describe_bundle, render

    data = _read_file(model)
    summary = describe_bundle(model) if data[:len(BUNDLE_MAGIC)] == BUNDLE_MAGIC else describe(data, model)
    click.echo(json.dumps(summary, indent=1, sort_keys=True, default=str) if as_json else render(summary))


def _read_file(path: str) -> bytes:
    if not os.path.exists(path):
        raise BadInput(f"no such file: {path}")
    if os.path.isdir(path):
        raise BadInput(f"{path} is a directory")
    with open(path, "rb") as f:
        return f.read()


def _read_model(path: str) -> bytes:
    """The .tflite bytes MODEL names: the file itself, or the model inside a .litertlm bundle."""
    from litert_convert.describe import BUNDLE_MAGIC

    data = _read_file(path)
    if data[:len(BUNDLE_MAGIC)] != BUNDLE_MAGIC:
        return data
    from litert_torch.errors import ModelFileError
    from litert_torch.generative.bundle import read_bundle

    try:
        return read_bundle(path).tflite
    except ModelFileError as exc:
        raise BadInput(f"{path}: {exc}") from None


# ---- validate --------------------------------------------------------------------------------------------------
@cli.command(help="Check a converted MODEL (.tflite) against its PyTorch SOURCE on the sample and random "
                  "inputs.\n\n" + EXIT_CODES)
@click.argument("model")
@click.argument("source")
@click.option("--input", "input_specs", multiple=True, metavar="NAME=DIMS:DTYPE", help="Sample inputs (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report with the per-layer error plot.")
@click.option("--prompt", default="Once upon a time", show_default=True,
              help="LLMs and image+text bundles (MODEL a .litertlm bundle or the exporter's .tflite, SOURCE the "
                   "Hugging Face model directory): the prompt both models continue.")
@click.option("--tokens", "new_tokens", default=32, show_default=True, type=click.IntRange(1, 100000),
              help="Bundles against a Hugging Face model: how many greedy tokens to compare (speech: at most).")
@click.option("--accelerator", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="gpu: also run the model on LiteRT's GPU accelerator (SwiftShader where there is no GPU) and "
                   "report its error, with its own tolerance, beside the CPU's.")
@click.option("--audio", "audio_path", type=click.Path(dir_okay=False), metavar="FILE.wav",
              help="Speech-to-text bundles: the utterance to transcribe (16-bit PCM WAV at the feature "
                   "extractor's rate) [default: a seeded synthetic 2 s clip].")
@click.option("--image", "image_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Image+text bundles: the image (any format PIL reads) [default: seeded random pixels at the "
                   "encoder's size]; placed where --prompt marks it, else first.")
@common_options
@handled
def validate(model, source, input_specs, as_json, html_path, prompt, new_tokens, accelerator, audio_path, image_path,
             quiet, debug) -> None:
    from litert_convert.check import open_edge_model

    quiet_torch(debug)
    if os.path.isdir(source) and os.path.isfile(os.path.join(source, "config.json")):
        if model.endswith(".litertlm") and os.path.isfile(model):
            from litert_torch.generative.asr_runner import is_asr_bundle

            if is_asr_bundle(model):
                from litert_convert.validate_tasks import validate_asr_bundle

                if image_path:
                    raise BadInput(f"--image applies to image+text bundles; {model} is a speech-to-text one")

                return validate_asr_bundle(model, source, audio_path, new_tokens, as_json)
            from litert_torch.generative.bundle import section_types

            if "tf_lite_vision_encoder" in section_types(model):
                from litert_convert.validate_tasks import validate_vlm_bundle

                if audio_path:
                    raise BadInput(f"--audio applies to speech-to-text bundles; {model} is an image+text one")
                return validate_vlm_bundle(model, source, image_path, prompt, new_tokens, as_json)
        if audio_path:
            raise BadInput(f"--audio applies to speech-to-text bundles; {model} is not one")
        if image_path:
            raise BadInput(f"--image applies to image+text bundles; {model} is not one")
        return _validate_llm(model, source, prompt, new_tokens, as_json)
    if audio_path or image_path:
        raise BadInput("--audio and --image apply to a bundle validated against a Hugging Face model directory")
    edge = open_edge_model(_read_model(model), model)
    report = _validate_against_source(edge, source, input_specs, quiet, per_layer=True if html_path else None,
                                      backends=("xnnpack", "reference", "gpu", "cloud") if accelerator == "gpu"
                                      else None)
    click.echo(json.dumps(report.to_json(), indent=1) if as_json else report.render())
    if html_path:
        _write_text(html_path, report.to_html())
    if not report.passed:
        raise Failure(f"{model} departs from {source} beyond the tolerance")


def _validate_against_source(edge, source: str, input_specs, quiet: bool, per_layer: bool | None,
                             backends: tuple[str, ...] | None = None):
    """The ValidationReport of `edge` against the module SOURCE builds, on its sample inputs (or --input, or
    inputs drawn to the model's signature)."""
    from litert_convert.check import inputs_for_model
    from litert_convert.sources import load_source, sample_inputs

    with open_status(make_console(), quiet, "loading the source") as status:
        src = load_source(source)
        _check_deterministic(source, src, load_source)
        args, kwargs = sample_inputs(src, list(input_specs)) or (inputs_for_model(edge), {})
        options = {"backends": backends} if backends else {}
        return _validate(src.model, edge, args, kwargs, per_layer=per_layer,
                         progress=lambda stage: status.update(f"validating: {stage}"), **options)


def _check_deterministic(source: str, src, load_source) -> None:
    """SOURCE must build the same weights each time: one that draws new random weights on every call cannot be
    compared with a file converted from an earlier call (every output would differ, which looks like a converter
    bug)."""
    import torch

    first = src.model.state_dict() if isinstance(src.model, torch.nn.Module) else None
    if not first:
        return
    second = load_source(source).model.state_dict()
    differing = [k for k, v in first.items()
                 if k not in second or not isinstance(v, torch.Tensor) or v.shape != second[k].shape
                 or not torch.equal(v, second[k])]
    if differing:
        raise BadInput(f"{source} builds different weights each time it is called ({len(differing)} of "
                       f"{len(first)} tensors differ, e.g. {differing[0]!r}), so it cannot be compared with a model "
                       "converted from an earlier call",
                       "build it from saved weights or a fixed seed (the CLI seeds torch's generator with 0 before "
                       "building a source; a generator seeded otherwise, numpy's or the clock's, differs)")


def _validate_llm(model: str, source: str, prompt: str, new_tokens: int, as_json: bool) -> None:
    """A converted LLM against its Hugging Face model: greedy tokens, per-step logit error, top-1 agreement.
    A float model must decode exactly like Hugging Face; a quantized one is reported (exit 0)."""
    from litert_torch import generative
    from litert_torch.generative.hf import reference_model
    from litert_torch.quantization.report import QUANTIZATION_KEY

    if not os.path.isfile(model):
        raise BadInput(f"no such file: {model}")
    llm = generative.load(model)
    hf = reference_model(source)
    ids = llm.encode(prompt)
    if len(ids) + new_tokens - 1 > llm.cache_length:
        raise BadInput(f"the prompt ({len(ids)} tokens) and {new_tokens} new tokens do not fit the model's cache of "
                       f"{llm.cache_length}", "use a shorter --prompt or fewer --tokens")
    report = generative.validate_llm(llm, hf, ids, new_tokens)
    quantized = QUANTIZATION_KEY in llm.metadata
    if as_json:
        click.echo(json.dumps({**report.__dict__, "first_divergence": report.first_divergence,
                               "first_divergent_layer": report.first_divergent_layer,
                               "token_agreement": report.token_agreement, "quantized": quantized}, indent=1))
    else:
        click.echo(report.summary())
    if not quantized and not report.identical:
        raise Failure(f"{model} does not decode like {source}: the greedy tokens differ at step "
                      f"{report.first_divergence}")


# ---- view ------------------------------------------------------------------------------------------------------
@cli.command(help="Open MODEL (.tflite) in Google's Model Explorer with our overlays on every op: its placement "
                  "on each delegate target (cpu = XNNPACK, gpu, npu) and why it falls back, its PyTorch source "
                  "line and node, and with --validate SOURCE its per-layer error. Served on --host:--port until "
                  "Ctrl-C (the URL is printed); --export DIR writes the view to share instead: one HTML page that "
                  "opens from disk without a server, the model, the overlays as node-data JSON files and a "
                  "README.txt. Needs the view extra: pip install 'litert-torch-direct[view]'.\n\n" + EXIT_CODES)
@click.argument("model")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port to serve on [default: the first free of 8080-8099; 0: any free port].")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on (127.0.0.1: this machine only).")
@click.option("--validate", "source", metavar="SOURCE",
              help="Validate MODEL against its PyTorch SOURCE layer by layer first and show the per-layer error "
                   "(SOURCE as for `validate`).")
@click.option("--input", "input_specs", multiple=True, metavar="NAME=DIMS:DTYPE",
              help="Sample inputs for --validate (repeatable).")
@click.option("--export", "export_dir", type=click.Path(file_okay=False),
              help="Write the view to share into this folder instead of serving it.")
@click.option("--force", is_flag=True, help="With --export: replace an existing folder.")
@click.option("--no-browser", is_flag=True, help="Do not open the view in a web browser.")
@common_options
@handled
def view(model, port, host, source, input_specs, export_dir, force, no_browser, quiet, debug) -> None:
    import signal

    from litert_torch.errors import ModelFileError
    from litert_torch.explorer.page import check_folder, export, prepare
    from litert_torch.explorer.server import serve

    if input_specs and not source:
        raise BadInput("--input applies only with --validate SOURCE")
    if force and not export_dir:
        raise BadInput("--force applies only with --export DIR")
    if export_dir:
        check_folder(export_dir, force)
    data = _read_model(model)
    report = None
    if source:
        from litert_convert.check import open_edge_model

        quiet_torch(debug)
        report = _validate_against_source(open_edge_model(data, model), source, input_specs, quiet, per_layer=True)
        if not quiet:
            click.echo(report.render(), err=True)
    # the file itself for Model Explorer's adapter to read; a bundle's model is given as bytes, named as the bundle
    whole_file = os.path.getsize(model) == len(data)
    try:
        prepared = prepare(data, layers=report.layers if report else None,
                           name=os.path.splitext(os.path.basename(model))[0] + ".tflite",
                           path=os.path.abspath(model) if whole_file else None)
    except ModelFileError as exc:
        raise BadInput(f"{model}: {exc}") from None
    if export_dir:
        page = export(prepared, export_dir, overwrite=force)
        click.echo(page)
        if not quiet:
            click.echo(f"wrote {export_dir}: open {os.path.basename(page)} in a web browser (no server needed); "
                       "README.txt says how to load the files into any Model Explorer", err=True)
        return
    running = serve(prepared, host=host, port=port, open_browser=not no_browser)
    click.echo(running.url)
    sys.stdout.flush()
    if not quiet:
        click.echo(f"Model Explorer is showing {model} at http://{host}:{running.port}/ (Ctrl-C stops it)", err=True)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops the server, exit 0
    try:
        running.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if not quiet:
        click.echo("stopped", err=True)


# ---- bench -----------------------------------------------------------------------------------------------------
@cli.command(help="Convert (and validate) every model x variant of MANIFEST (TOML; see litert_torch/batch.py) as "
                  "Ray tasks, into OUT_DIR: one .tflite (a .litertlm bundle for a Hugging Face model directory), "
                  ".json and validation .html per task, and results.json / results.html for all. A local Ray instance unless --address names a cluster; a rerun does only "
                  "what is missing or changed. Exit 1 when any task failed.\n\n" + EXIT_CODES)
@click.argument("manifest")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--address", default=None, help="A Ray cluster to join (ray://host:10001 or host:6379).")
@common_options
@handled
def batch(manifest, out_dir, address, quiet, debug) -> None:
    from litert_torch import batch as fleet

    quiet_torch(debug)
    plan = fleet.read_manifest(manifest)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise BadInput(f"{out_dir} exists and is not a folder")

    def progress(done: int, total: int, result: dict) -> None:
        if quiet:
            return
        detail = (f"{result.get('bytes', 0) / 1e6:.2f} MB, {result.get('seconds', 0):.1f} s"
                  if result["status"] == "ok" else result.get("error", ""))
        click.echo(f"[{done}/{total}] {result['model']}/{result['variant']}: {result['status']} ({detail})", err=True)

    table = fleet.run(plan, out_dir, address, progress=progress)
    s = table["summary"]
    click.echo(f"{s['ok']} ok, {s['failed']} failed of {s['tasks']} ({s['ran']} run, {s['tasks'] - s['ran']} "
               f"already done): {os.path.join(out_dir, 'results.html')}")
    if s["failed"]:
        raise Failure(f"{s['failed']} task(s) failed: " + ", ".join(
            f"{r['model']}/{r['variant']}" for r in table["tasks"] if r["status"] != "ok"))


@cli.command(help="Time MODEL (.tflite) in the LiteRT runtime (XNNPACK) on random inputs.\n\n" + EXIT_CODES)
@click.argument("model")
@click.option("--threads", default="1", show_default=True, help="Thread counts to time, comma-separated.")
@click.option("--runs", default=50, show_default=True, type=click.IntRange(1, 100000))
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(0, 10000))
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@common_options
@handled
def bench(model, threads, runs, warmup, as_json, quiet, debug) -> None:
    import numpy as np

    from litert_convert.check import open_edge_model, random_feeds

    try:
        thread_counts = [int(t) for t in threads.split(",")]
        if any(t < 1 for t in thread_counts):
            raise ValueError
    except ValueError:
        raise BadInput(f"malformed --threads {threads!r}", "give positive integers, e.g. --threads 1,2") from None
    edge = open_edge_model(_read_model(model), model)
    from ai_edge_litert.interpreter import Interpreter

    from litert_torch import logs

    logs.apply_native()
    results = []
    console = make_console()
    for n in thread_counts:
        interpreter = Interpreter(model_content=edge.flatbuffer, num_threads=n)
        interpreter.allocate_tensors()
        for detail, value in zip(interpreter.get_input_details(), random_feeds(interpreter.get_input_details())):
            interpreter.set_tensor(detail["index"], value)
        for _ in range(warmup):
            interpreter.invoke()
        times = []
        with ProgressBar(console, quiet or as_json, f"{n} thread{'s' if n > 1 else ''}", runs) as advance:
            for _ in range(runs):
                interpreter.reset_all_variables()
                start = time.perf_counter()
                interpreter.invoke()
                times.append(time.perf_counter() - start)
                advance()
        ms = np.array(times) * 1e3
        results.append({"threads": n, "runs": runs, "median_ms": float(np.median(ms)),
                        "p90_ms": float(np.percentile(ms, 90)), "p99_ms": float(np.percentile(ms, 99)),
                        "min_ms": float(ms.min()), "mean_ms": float(statistics.fmean(ms))})
    if as_json:
        click.echo(json.dumps({"model": model, "results": results}, indent=1))
        return
    click.echo(f"{model}: LiteRT with XNNPACK, {runs} runs after {warmup} warm-up runs")
    click.echo(f"{'threads':>7} {'median ms':>10} {'p90 ms':>9} {'p99 ms':>9} {'min ms':>9}")
    for r in results:
        click.echo(f"{r['threads']:>7} {r['median_ms']:>10.3f} {r['p90_ms']:>9.3f} {r['p99_ms']:>9.3f} "
                   f"{r['min_ms']:>9.3f}")


# ---- export-hf -------------------------------------------------------------------------------------------------
@cli.command("export-hf", help="Export a Hugging Face causal LM (MODEL_DIR, saved with save_pretrained: config, "
                               "safetensors, tokenizer) to a LiteRT-LM bundle (.litertlm) with prefill/decode "
                               "signatures and a KV cache; or, with --task text_embedding, a text encoder (BERT, "
                               "ModernBERT, EmbeddingGemma) to an embedding bundle (docs/EMBEDDINGS.md); or, with "
                               "--task automatic_speech_recognition, Whisper or Moonshine to a speech-to-text bundle "
                               "(docs/ASR.md); or, with --task image_text_to_text, an image+text model (Gemma 3, "
                               "Idefics3, LLaVA, PaliGemma, LFM2-VL) to a bundle with vision sections "
                               "(docs/VLM.md).\n\n"
                               + EXIT_CODES)
@click.argument("model_dir")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The .litertlm bundle to write (a .tflite path writes the model alone).")
@click.option("--task", type=click.Choice(["text_generation", "text_embedding", "automatic_speech_recognition",
                                           "image_text_to_text"]),
              default=None, help="What to export; default: text_embedding when config.json is an encoder's, "
              "automatic_speech_recognition when it is Whisper's or Moonshine's, image_text_to_text when it is an "
              "image+text model's (docs/VLM.md), else text_generation.")
@click.option("--prefill", default=None, metavar="N[,N...]",
              help="Prefill signature lengths, comma-separated [default: 256]; for text_embedding the encoder's "
                   "input lengths [default: the model's limit, at most 512].")
@click.option("--cache", "cache_length", default=None, type=int,
              help="KV cache length: the longest prompt plus generated text [default: 4096].")
@click.option("--quantize", default="dynamic_wi8_afp32", show_default=True, metavar="RECIPE",
              help="none (float), fp16, dynamic-int8, an ai-edge-quantizer recipe name (dynamic_wi8_afp32, "
                   "dynamic_wi4b32_afp32, ...) or a recipe .json file.")
@click.option("--vision-quantize", default=None, metavar="RECIPE",
              help="image_text_to_text: the recipe of the vision encoder and adapter (the official "
                   "vision_encoder_quantization_recipe) [default: none, float]; --quantize applies to the decoder "
                   "and the embedder.")
@click.option("--audio-quantize", default=None, metavar="RECIPE",
              help="automatic_speech_recognition: the recipe of the audio encoder (the official "
                   "audio_encoder_quantization_recipe) [default: the --quantize recipe].")
@click.option("--keep-tflite", is_flag=True, help="Also write the .tflite model beside the bundle (for "
              "text_embedding: embedder.tflite, encoder.tflite and tokenizer.json; for "
              "automatic_speech_recognition: encoder.tflite, decoder.tflite, tokenizer.json and asr_config.json).")
@click.option("--trust-remote-code", is_flag=True, help="Let transformers run the model directory's own code.")
@click.option("--input-sec", type=float, default=None,
              help="automatic_speech_recognition: Moonshine's encoder window in seconds [default: 30].")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@common_options
@handled
def export_hf(model_dir, output, task, prefill, cache_length, quantize, vision_quantize, audio_quantize, keep_tflite,
              trust_remote_code, input_sec, force, quiet, debug) -> None:
    from litert_torch.generative.export_hf.export import (
        AUTOMATIC_SPEECH_RECOGNITION, IMAGE_TEXT_TO_TEXT, TEXT_EMBEDDING, export_files, resolve_task,
    )

    if os.path.isdir(output):
        raise BadInput(f"{output} is a directory")
    if os.path.exists(output) and not force:
        raise BadInput(f"{output} exists", "pass --force to overwrite it")
    if not os.path.isdir(model_dir):
        raise BadInput(f"{model_dir} is not a directory", "give a Hugging Face model directory (save_pretrained)")
    try:
        lengths = [int(p) for p in (prefill or "").split(",") if p.strip()] or None
    except ValueError:
        raise BadInput(f"malformed --prefill {prefill!r}", "give comma-separated token counts, e.g. 32,128") from None
    task = resolve_task(task, model_dir)
    for given, option, applies in ((vision_quantize, "--vision-quantize", IMAGE_TEXT_TO_TEXT),
                                   (audio_quantize, "--audio-quantize", AUTOMATIC_SPEECH_RECOGNITION),
                                   (input_sec, "--input-sec", AUTOMATIC_SPEECH_RECOGNITION)):
        if given is not None and task != applies:
            raise BadInput(f"{option} does not apply to --task {task}", f"it applies to --task {applies}")
    if task == AUTOMATIC_SPEECH_RECOGNITION:
        export_asr_bundle(model_dir, output, lengths, cache_length, (quantize, audio_quantize), keep_tflite,
                          trust_remote_code, input_sec, quiet, debug)
        return
    if task == TEXT_EMBEDDING:
        export_embedding_bundle(model_dir, output, lengths, cache_length, quantize, keep_tflite, trust_remote_code,
                                quiet, debug)
        return
    if task == IMAGE_TEXT_TO_TEXT:
        export_vlm_bundle(model_dir, output, lengths, cache_length, (quantize, vision_quantize), keep_tflite,
                          trust_remote_code, quiet, debug)
        return
    lengths = lengths or [256]
    cache_length = 4096 if cache_length is None else cache_length
    is_tflite = output.endswith(".tflite")
    tflite_path = output if is_tflite else (os.path.splitext(output)[0] + ".tflite" if keep_tflite else None)
    console = make_console()
    start = last = time.perf_counter()

    def progress(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        if stage == "trace":  # the exporter imports PyTorch next (a decoder read from a directory is built without it)
            quiet_torch(debug)
        if not quiet:
            console.print(f"[{now - start:6.1f} s] {stage}")
        last = now

    export_files(model_dir, bundle_path=None if is_tflite else output, tflite_path=tflite_path,
                 prefill_lengths=lengths, cache_length=cache_length, quantization_recipe=quantize,
                 trust_remote_code=trust_remote_code, progress=progress)
    if not quiet:
        size = os.path.getsize(output)
        console.print(f"wrote {output} ({size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")


def _interrupted(signum, frame) -> None:
    """Ctrl-C: remove the temporary files in use and exit 130 at once. An interrupt raised as an exception
    instead could land inside an import and leave a half-imported module behind (then reported as some other
    error), or inside a cleanup."""
    files = sys.modules.get("litert_torch.files")
    if files is not None:
        files.remove_pending()
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code. Ctrl-C anywhere exits 130 and leaves no temporary file (click's own
    handling would print "Aborted!" and exit 1)."""
    import signal

    previous = signal.signal(signal.SIGINT, _interrupted)
    try:
        return _run(argv)
    finally:
        signal.signal(signal.SIGINT, previous)


def entry() -> None:
    """The `litert-convert` command: main(), and once the command is done an interrupt can no longer change
    its outcome (a Ctrl-C during interpreter shutdown would otherwise kill the process after its output was
    complete and report a failure)."""
    import signal

    signal.signal(signal.SIGINT, _interrupted)
    code = _run(None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


def _run(argv: list[str] | None) -> int:
    try:
        result = cli.main(args=argv, prog_name="litert-convert", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return 130
    except click.exceptions.ClickException as exc:  # usage errors: bad option, missing argument
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    entry()
