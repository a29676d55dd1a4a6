"""What `convert` and `validate` take as SOURCE, and the `--input` specs that give sample inputs.

SOURCE is one of:
  path/to/file.py:name      a name in a Python file
  package.module:name       a name in an importable module
  model.pt2                 an ExportedProgram saved with torch.export.save (loaded without unpickling)
where `name` is an nn.Module, an nn.Module class (built without arguments), or a callable returning a module
or `(module, sample_args)` / `(module, sample_args, sample_kwargs)` — or a `litert_torch.SignatureSet`
(`litert_torch.signature("encode", enc, args).signature("decode", dec, args)`) for a model with several
signatures.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from litert_convert.errors import BadInput

DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "float64": torch.float64, "int64": torch.int64,
    "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
_SPEC = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<dims>\d+(?:x\d+)*)?(?::(?P<dtype>[a-z0-9]+))?$")


@dataclass
class OnnxSource:
    """An .onnx file: converted by litert_torch.convert_onnx, checked against ONNX Runtime."""

    path: str


@dataclass
class Source:
    model: Any  # nn.Module or ExportedProgram
    args: tuple | None = None
    kwargs: dict = field(default_factory=dict)
    description: str = ""


MAX_SAMPLE_BYTES = 4 * 2**30  # one sample tensor built from --input


def parse_input_spec(spec: str) -> tuple[str, torch.Tensor]:
    """'x=1x3x224x224:float32' -> ("x", a random tensor of that shape and dtype)."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise BadInput(f"malformed --input {spec!r}", "write it as NAME=DIMxDIM...:DTYPE, e.g. x=1x3x224x224:float32")
    dtype_name = match.group("dtype") or "float32"
    if dtype_name not in DTYPES:
        raise BadInput(f"unknown dtype {dtype_name!r} in --input {spec!r}", f"use one of {', '.join(DTYPES)}")
    dims = [int(d) for d in match.group("dims").split("x")] if match.group("dims") else []
    dtype = DTYPES[dtype_name]
    count = 1
    for d in dims:
        count *= d
    size = count * torch.empty((), dtype=dtype).element_size()
    if size > MAX_SAMPLE_BYTES:
        raise BadInput(f"--input {spec!r} asks for a {size / 2**30:.0f} GiB sample tensor",
                       f"sample inputs are limited to {MAX_SAMPLE_BYTES // 2**30} GiB; give the shape the model "
                       "is called with")
    generator = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        value = torch.randn(dims, generator=generator).to(dtype)
    elif dtype == torch.bool:
        value = torch.zeros(dims, dtype=torch.bool)
    else:
        value = torch.zeros(dims, dtype=dtype)  # valid as indices for any table
    return match.group("name"), value


def inputs_from_specs(model: Any, specs: list[str]) -> tuple[tuple, dict]:
    """Sample inputs from --input specs: keyword arguments when every name is a parameter of forward,
    positional (in the order given) when forward takes *args; a name forward does not take is bad input."""
    parsed = [parse_input_spec(s) for s in specs]
    forward = getattr(model, "forward", None)
    try:
        params = inspect.signature(forward).parameters if forward is not None else {}
    except (TypeError, ValueError):
        params = {}
    kinds = {p.kind for p in params.values()}
    named = [name for name, p in params.items()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if parsed and (all(name in named for name, _ in parsed) or inspect.Parameter.VAR_KEYWORD in kinds):
        return (), dict(parsed)
    unknown = [name for name, _ in parsed if name not in named]
    if params and unknown and inspect.Parameter.VAR_POSITIONAL not in kinds:
        raise BadInput(f"--input {', '.join(unknown)}: not a parameter of {type(model).__name__}.forward",
                       f"name one of its parameters: {', '.join(named) or '(none)'}")
    return tuple(value for _, value in parsed), {}


def sample_inputs(src: Source, specs: list[str]) -> tuple[tuple, dict] | None:
    """Inputs from --input specs when given, else the source's own sample inputs, else None."""
    if specs:
        return inputs_from_specs(src.model, specs)
    if src.args is not None:
        return src.args, src.kwargs
    return None


@contextlib.contextmanager
def _no_unpickling():
    """Within the block torch.load only loads tensors (weights_only) and pickle.loads refuses outright: a .pt2
    file cannot run code while we read it."""
    import pickle

    from torch.export.pt2_archive import _package

    original_load = torch.load

    def tensors_only(*args, **kwargs):
        kwargs["weights_only"] = True
        return original_load(*args, **kwargs)

    class Refuse:
        def __getattr__(self, name):
            if name in ("loads", "load", "Unpickler"):
                def refuse(*args, **kwargs):
                    raise BadInput("the .pt2 file holds pickled Python objects; refusing to unpickle them")
                return refuse
            return getattr(pickle, name)

    torch.load = tensors_only
    saved_pickle = _package.pickle
    _package.pickle = Refuse()
    try:
        yield
    finally:
        torch.load = original_load
        _package.pickle = saved_pickle


def load_pt2(path: str) -> Source:
    if not os.path.isfile(path):
        raise BadInput(f"no such file: {path}")
    try:
        with _no_unpickling():
            program = torch.export.load(path)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - torch.export.load raises what the archive's damage leads to
        text = str(exc)
        if "weights_only" in text or "Unpickl" in type(exc).__name__:
            # torch's own message would suggest weights_only=False, which runs whatever the file holds
            raise BadInput(f"{path} holds pickled Python objects besides tensors; refusing to unpickle them",
                           "re-save the program with torch.export.save from a trusted environment") from None
        first = text.strip().splitlines()[0][:300] if text.strip() else ""
        raise BadInput(f"cannot read {path} as a torch.export archive: {type(exc).__name__}: {first}") from None
    args, kwargs = program.example_inputs if program.example_inputs is not None else (None, {})
    return Source(program, tuple(args) if args is not None else None, dict(kwargs or {}), path)


def _import_target(location: str):
    if location.endswith(".py") or os.sep in location or "/" in location:
        if not os.path.isfile(location):
            raise BadInput(f"no such file: {location}")
        module_name = "litert_convert_source_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(location))[0])
        spec = importlib.util.spec_from_file_location(module_name, location)
        if spec is None or spec.loader is None:
            raise BadInput(f"cannot load {location} as a Python file")
        module = importlib.util.module_from_spec(spec)
        directory = os.path.dirname(os.path.abspath(location))
        sys.path.insert(0, directory)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise BadInput(f"running {location} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if sys.path and sys.path[0] == directory:
                sys.path.pop(0)
        return module
    # Like `python -m`, look in the working directory first.
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(location)
    except ImportError as exc:
        raise BadInput(f"cannot import {location}: {exc}") from None
    finally:
        if sys.path and sys.path[0] == os.getcwd():
            sys.path.pop(0)


def load_source(source: str) -> Source:
    """Resolve SOURCE into a model and, where the source gives them, sample inputs."""
    lowered = source.lower()
    if lowered.endswith(".pt2"):
        return load_pt2(source)
    if lowered.endswith(".onnx"):
        if not os.path.isfile(source):
            raise BadInput(f"no such ONNX file: {source}")
        return Source(OnnxSource(source), (), {}, source)
    if ":" not in source:
        raise BadInput(f"malformed SOURCE {source!r}", "use path/to/file.py:name, package.module:name or model.pt2")
    location, _, name = source.rpartition(":")
    if not location or not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
        raise BadInput(f"malformed SOURCE {source!r}", "use path/to/file.py:name, package.module:name or model.pt2")
    # Built with torch's random generator seeded, so that a source drawing random weights
    # (torchvision.models:mobilenet_v3_small) builds the same model for `convert` and for `validate`.
    torch.manual_seed(0)
    target = _import_target(location)
    obj = target
    for part in name.split("."):
        if not hasattr(obj, part):
            raise BadInput(f"{location} has no attribute {name!r}")
        obj = getattr(obj, part)
    return _as_source(obj, source)


def _as_source(obj: Any, source: str) -> Source:
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - the user's constructor raises what it raises
            raise BadInput(f"{source}: cannot build {obj.__name__}() without arguments: {exc}") from None
    elif not isinstance(obj, torch.nn.Module) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - the user's function raises what it raises
            raise BadInput(f"{source}: calling it failed: {type(exc).__name__}: {exc}") from None
    from litert_torch import SignatureSet

    if isinstance(obj, SignatureSet):
        return Source(obj, (), {}, source)
    if isinstance(obj, torch.nn.Module):
        return Source(obj.eval(), None, {}, source)
    if isinstance(obj, tuple) and obj and isinstance(obj[0], torch.nn.Module) and len(obj) in (2, 3):
        args = obj[1] if isinstance(obj[1], tuple) else (obj[1],)
        kwargs = dict(obj[2]) if len(obj) == 3 else {}
        return Source(obj[0].eval(), args, kwargs, source)
    raise BadInput(f"{source} is not a torch.nn.Module (got {type(obj).__name__})",
                   "name an nn.Module, a module class, or a function returning a module, (module, sample_args) "
                   "or a litert_torch.SignatureSet")
