"""Model Explorer's side: its installed package (imported on first use, an optional extra), the graph its TFLite
adapter makes of a model, and the check that every overlay key lands on the op it describes.

The graph comes from Model Explorer's own adapter (`builtin_tflite_flatbuffer`, the one its server runs on a
.tflite file), so a model opened in any Model Explorer has the node ids our overlays use.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from litert_torch import ir
from litert_torch.errors import LiteRTTorchError
from litert_torch.explorer.overlays import Overlay, expected_label, graph_ids, node_keys
from litert_torch.files import scratch_folder

INSTALL = "pip install 'litert-torch-direct[view]'"
# the versions whose adapter node ids and web app requests this package was checked against
TESTED = "0.1.34"


class ModelExplorerUnavailable(LiteRTTorchError, ImportError):
    """Google's Model Explorer (PyPI ai-edge-model-explorer, the `view` extra) is not installed."""


class ViewError(LiteRTTorchError):
    """Model Explorer could not show this model as expected: its adapter failed on the file, or named the
    model's nodes otherwise than the overlays expect (a Model Explorer version this package does not know)."""


def model_explorer() -> Any:
    """The installed `model_explorer` package, or ModelExplorerUnavailable naming the extra to install."""
    try:
        return importlib.import_module("model_explorer")
    except ImportError as exc:
        raise ModelExplorerUnavailable(f"the graph view needs Google's Model Explorer: {INSTALL} "
                                       f"({type(exc).__name__}: {exc})") from None


def web_app_folder() -> str:
    """The folder of Model Explorer's web app (index.html, its scripts, static_files/)."""
    folder = os.path.join(os.path.dirname(model_explorer().__file__), "web_app")
    if not os.path.isfile(os.path.join(folder, "index.html")):
        raise ModelExplorerUnavailable(f"the installed Model Explorer has no web app at {folder}: reinstall it "
                                       f"({INSTALL})")
    return folder


def version() -> str:
    return getattr(model_explorer(), "__version__", "unknown")


def adapter_graphs(data: bytes, path: str | None = None) -> dict[str, Any]:
    """Model Explorer's graphs JSON of the model (`{"graphCollections": [{"label", "graphs": [...]}]}`), made by
    its TFLite adapter from `path`, or from a temporary copy of `data` when no file holds it."""
    model_explorer()
    try:
        adapter = importlib.import_module("model_explorer.builtin_tflite_flatbuffer_adapter")
        utils = importlib.import_module("model_explorer.utils")
    except ImportError as exc:  # the adapter's compiled library is missing for this platform
        raise ModelExplorerUnavailable(f"Model Explorer's TFLite adapter cannot be loaded ({exc}); {INSTALL}") \
            from None
    with scratch_folder("litert_view_") as folder:
        if path is None:
            path = os.path.join(folder, "model.tflite")
            with open(path, "wb") as f:
                f.write(data)
        try:
            converted = adapter.BuiltinTfliteFlatbufferAdapter().convert(path, {})
        except Exception as exc:  # noqa: BLE001 - the adapter's C++ errors arrive as plain exceptions
            raise ViewError(f"Model Explorer's TFLite adapter could not read the model: {type(exc).__name__}: "
                            f"{str(exc)[:300]}") from None
    return utils.convert_adapter_response(converted)


def check_overlays(graphs: dict[str, Any], model: ir.Model, data: bytes, overlays: list[Overlay]) -> None:
    """Every overlay key must resolve, the way the web app resolves it (an output tensor name first, then a node
    id), to the node of the op it was made for, with that op's label; ViewError otherwise."""
    collections = graphs.get("graphCollections") or []
    found = {g["id"]: g for c in collections for g in c.get("graphs", [])}
    for index, (graph_id, graph) in enumerate(zip(graph_ids(data), model.subgraphs)):
        adapted = found.get(graph_id)
        if adapted is None:
            raise ViewError(f"Model Explorer's adapter made no graph {graph_id!r} for subgraph {index} (it made "
                            f"{sorted(found)}); Model Explorer {version()} is not a version this view was tested "
                            f"with ({TESTED})")
        nodes = {n["id"]: n for n in adapted.get("nodes", [])}
        by_tensor = {}
        for n in adapted.get("nodes", []):
            for output in n.get("outputsMetadata") or []:
                for attr in output.get("attrs") or []:
                    if attr.get("key") == "tensor_name":
                        by_tensor[attr.get("value")] = n["id"]
        for i, (op, key) in enumerate(zip(graph.ops, node_keys(graph))):
            node = nodes.get(by_tensor.get(key, key))
            label = expected_label(op)
            if node is None or node["id"] != str(i) or (label is not None and node.get("label") != label):
                got = "no node" if node is None else f"node {node['id']} ({node.get('label')})"
                raise ViewError(f"in graph {graph_id!r}, op {i} ({op.opcode}) is keyed {key!r}, which Model "
                                f"Explorer's adapter resolves to {got}; Model Explorer {version()} is not a "
                                f"version this view was tested with ({TESTED})")
    for overlay in overlays:
        unknown = set(overlay.graphs) - set(found)
        if unknown:
            raise ViewError(f"overlay {overlay.name!r} names graphs {sorted(unknown)} the adapter did not make")
