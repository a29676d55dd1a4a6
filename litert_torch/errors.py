"""Typed errors raised by the converter and the runtime wrapper.

Every error a user can meet derives from `LiteRTTorchError`, so `except LiteRTTorchError` catches them all.
Messages name the op, the overload and the PyTorch source line wherever one is known.
"""

from __future__ import annotations

from dataclasses import dataclass


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message as one line of at most `limit` characters (for messages that quote another
    library's error)."""
    return " ".join(str(exc).split())[:limit]


class LiteRTTorchError(Exception):
    """Base class of every error raised by litert_torch."""


class ConversionError(LiteRTTorchError):
    """The model could not be turned into a .tflite file."""


class ExportError(ConversionError):
    """`torch.export` could not trace the model (data-dependent control flow, unsupported Python, ...)."""


class ModelNotExportableError(ExportError, ValueError):
    """A model handed to a tool that needs its exported graph (litert_torch.debug) cannot be traced by
    torch.export; a ValueError, as in the official package."""


@dataclass(frozen=True)
class UnsupportedOp:
    """One ATen op (overload) that has no lowering, with the place it is first used."""

    target: str
    count: int
    first_node: str
    location: str | None
    module: str | None
    reason: str | None = None

    def describe(self) -> str:
        nodes = "node" if self.count == 1 else "nodes"
        text = f"  {self.target}  ({self.count} {nodes}), first at {self.location or 'unknown source line'}"
        if self.module:
            text += f" in module {self.module}"
        if self.reason:
            text += f": {self.reason}"
        return text


class UnsupportedOpsError(ConversionError):
    """The graph holds ATen ops that have no lowering; all of them are listed at once."""

    def __init__(self, ops: list[UnsupportedOp]):
        self.ops = ops
        lines = [f"{len(ops)} unsupported op{'s' if len(ops) != 1 else ''} in the exported graph:"]
        lines += [op.describe() for op in ops]
        lines.append("Nothing was written. Rewrite these calls with supported ops, or add lowerings for them.")
        super().__init__("\n".join(lines))


class LoweringError(ConversionError):
    """A supported op was used with arguments its lowering cannot express exactly."""

    def __init__(self, message: str, *, target: str | None = None, location: str | None = None):
        self.target = target
        self.location = location
        where = ""
        if target:
            where += f"{target}"
        if location:
            where += f" at {location}"
        super().__init__(f"{where}: {message}" if where else message)


class MalformedGraphError(ConversionError):
    """An op of the graph IR lacks what its kind needs: an omitted input that the op reads, or a constant operand
    without data. Lowerings and passes never build such an op, so this names a bug in the one that did."""


class QuantizationError(ConversionError):
    """Quantization could not be done as asked: an unknown mode or recipe, or the quantizer missing or failing."""


class CalibrationError(QuantizationError, ValueError):
    """Calibration data that cannot calibrate the model: wrong structure, shapes or dtypes, NaN/Inf, too few
    samples. The message names the sample and the input."""


class ModelInputError(LiteRTTorchError, ValueError):
    """Inputs given to an EdgeModel do not match its signature."""


class ModelFileError(LiteRTTorchError, ValueError):
    """A .tflite file is corrupt, truncated or not a TFLite model."""


class ModelLoadError(ModelFileError):
    """The LiteRT runtime could not load, prepare or run a model file: it refused it, or (in the child process
    that tries files before they are loaded, see EdgeModel's `isolate`) crashed on it, with the signal named."""


class InvalidArgumentError(LiteRTTorchError, ValueError):
    """An argument of a public call is out of its domain (a negative length, an unknown recipe name, an
    output folder that cannot be written): the message names the argument and what it accepts."""


class SampleInputError(ExportError, InvalidArgumentError):
    """The model does not run on the sample inputs it was given, in PyTorch itself (a shape or dtype its forward
    does not take): the inputs are wrong, not the conversion."""

    hint = "give sample inputs of the shapes and dtypes the model's forward takes"


class UnknownSignatureError(InvalidArgumentError, KeyError):
    """A signature key the model does not have; the message lists the ones it has."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OnnxError(ConversionError):
    """An ONNX file that cannot be read or converted: invalid, truncated, an unknown opset, missing external
    data, symbolic input shapes without concrete ones."""


class QuantizationArgumentError(QuantizationError, InvalidArgumentError):
    """A quantization asked for wrongly (an unknown mode, a malformed recipe, options that do not go together,
    a model already quantized): both a QuantizationError and an InvalidArgumentError (exit code 2 in the CLI)."""
