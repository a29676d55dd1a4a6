"""The graph view: a converted model in Google's Model Explorer (PyPI ai-edge-model-explorer, the `view` extra),
with our metadata as node-data overlays on every op -- its placement on each delegate target (cpu = XNNPACK, gpu,
npu) with the reason where it falls back, its PyTorch source line and node, and after a validation its per-layer
error.

    view = litert_torch.view(edge)                                   # or edge.view(); served on 127.0.0.1
    view = litert_torch.view(edge, module=model, sample_args=(x,))   # validates first: + the per-layer error
    print(view.url); view.wait()                                     # or view.stop(); `with` stops it too
    litert_torch.explorer.export_view(edge, "shared/")              # the same view in one HTML file, no server

`overlays.py` builds the overlays (no Model Explorer needed), `graph.py` gets Model Explorer's graph of the model
and checks the overlays land on every op, `page.py` makes the pages and the shared folder, `server.py` serves.
Model Explorer is imported on first use (graph.py): without it, ModelExplorerUnavailable names the extra, and
the runtime and the overlays work as before.
"""

from __future__ import annotations

import os
from typing import Any

from litert_torch.errors import InvalidArgumentError, ModelFileError
from litert_torch.explorer.graph import ModelExplorerUnavailable, ViewError
from litert_torch.explorer.overlays import Overlay, layers_of, overlays
from litert_torch.explorer.server import DEFAULT_HOST, ModelView

__all__ = ["ModelExplorerUnavailable", "ModelView", "Overlay", "ViewError", "export_view", "overlays", "view"]


def view(model: Any, *, module: Any = None, sample_args: Any = (), sample_kwargs: dict | None = None,
         report: Any = None, host: str = DEFAULT_HOST, port: int | None = None,
         open_browser: bool = True) -> ModelView:
    """Show `model` (an EdgeModel, a .tflite path or its bytes) in Model Explorer, served on `host`:`port` in a
    background thread (port None: the first free of 8080-8099; 0: any free port). With `module` (and
    `sample_args`, `sample_kwargs`), the model is first validated against it layer by layer; or give `report`, a
    ValidationReport made with per_layer=True (or its `layers`). Returns the running ModelView (`url`,
    `stop()`, `wait()`); its `report` is the validation, when one ran."""
    from litert_torch.explorer.server import check_address, serve

    check_address(host, port)
    prepared, report = _prepare_inputs(model, module, sample_args, sample_kwargs, report)
    running = serve(prepared, host=host, port=port, open_browser=open_browser)
    running.report = report
    return running


def export_view(model: Any, folder: str | os.PathLike, *, module: Any = None, sample_args: Any = (),
                sample_kwargs: dict | None = None, report: Any = None, overwrite: bool = False) -> str:
    """Write the view of `model` as a folder to share: one self-contained HTML page (Model Explorer's web app,
    the graph and the overlays; it opens from disk, no server, no network), the .tflite file, the overlays as
    Model Explorer node-data JSON files (node_data/) and a README.txt saying how to open them. Written
    atomically; an existing non-empty folder is replaced only with `overwrite`. Returns the page's path.
    `module`, `sample_args`, `sample_kwargs` and `report` as for `view`."""
    from litert_torch.explorer.page import check_folder, export

    folder = os.fspath(folder)
    check_folder(folder, overwrite)
    prepared, _ = _prepare_inputs(model, module, sample_args, sample_kwargs, report)
    return export(prepared, folder, overwrite=overwrite)


def _prepare_inputs(model: Any, module: Any, sample_args: Any, sample_kwargs: dict | None, report: Any):
    """(ViewData, the ValidationReport or None) for the public calls."""
    from litert_torch.explorer.page import prepare

    if module is not None and report is not None:
        raise InvalidArgumentError("give either module (to validate now) or report (a validation made before), "
                                   "not both")
    edge, data, path = _model(model, need_runtime=module is not None)
    if module is not None:
        from litert_torch.validation.validate import LITERT_BACKENDS, validate

        report = validate(module, sample_args, edge, sample_kwargs=sample_kwargs, per_layer=True,
                          backends=LITERT_BACKENDS)
    name = os.path.basename(path) if path else None
    return prepare(data, layers=layers_of(report), name=name, path=path), report


def _model(model: Any, need_runtime: bool):
    """(EdgeModel or None, bytes, path or None) of what `view` was given."""
    from litert_torch.runtime.edge_model import EdgeModel

    if isinstance(model, EdgeModel):
        return model, model.flatbuffer, None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if need_runtime:
            edge = EdgeModel.load(path)
            return edge, edge.flatbuffer, path
        try:
            with open(path, "rb") as f:
                return None, f.read(), path
        except OSError as exc:
            raise ModelFileError(f"cannot read the model file {path}: {exc.strerror or exc}") from None
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        return (EdgeModel(data) if need_runtime else None), data, None
    raise InvalidArgumentError(f"model must be an EdgeModel, a .tflite path or its bytes, got {type(model).__name__}")
