"""Model Explorer's TFLite adapter names op i of a subgraph "<i>", in the graph named after the subgraph: checked
on the installed adapter, with the check the viewer runs on every model it shows; and without Model Explorer
the runtime still works and the view says what to install."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

import litert_torch
from litert_torch.explorer.graph import ModelExplorerUnavailable, ViewError, adapter_graphs, check_overlays
from litert_torch.explorer.overlays import graph_ids, overlays
from litert_torch.flatbuffer.reader import read_model
from tests.view.expected import labels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_adapter_names_op_i_node_i(converted, model_explorer):
    _, _, edge = converted
    graphs = adapter_graphs(edge.flatbuffer)
    (collection,) = graphs["graphCollections"]
    (graph,) = collection["graphs"]
    assert graph["id"] == "main"
    nodes = {n["id"]: n["label"] for n in graph["nodes"]}
    ops = labels(edge)
    assert [nodes[str(i)] for i in range(len(ops))] == ops
    others = {label for node_id, label in nodes.items() if int(node_id) >= len(ops)}
    assert others <= {"GraphInputs", "GraphOutputs", "pseudo_const"}, others
    check_overlays(graphs, read_model(edge.flatbuffer), edge.flatbuffer, overlays(edge.flatbuffer))


def test_signatures_are_graphs_named_after_their_subgraphs(model_explorer):
    edge = litert_torch.signature("encode", torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),)).signature(
        "decode", torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU()).eval(), (torch.randn(1, 2),)).convert()
    graphs = adapter_graphs(edge.flatbuffer)
    assert [g["id"] for g in graphs["graphCollections"][0]["graphs"]] == graph_ids(edge.flatbuffer) == \
        ["encode", "decode"]
    check_overlays(graphs, read_model(edge.flatbuffer), edge.flatbuffer, overlays(edge.flatbuffer))


def test_a_graph_named_otherwise_is_refused_not_shown_without_overlays(converted, model_explorer):
    _, _, edge = converted
    graphs = adapter_graphs(edge.flatbuffer)
    relabelled = copy.deepcopy(graphs)
    node = next(n for n in relabelled["graphCollections"][0]["graphs"][0]["nodes"] if n["id"] == "2")
    node["label"] = "something_else"
    with pytest.raises(ViewError, match="op 2"):
        check_overlays(relabelled, read_model(edge.flatbuffer), edge.flatbuffer, overlays(edge.flatbuffer))
    renamed = copy.deepcopy(graphs)
    renamed["graphCollections"][0]["graphs"][0]["id"] = "subgraph_0"
    with pytest.raises(ViewError, match="no graph 'main'"):
        check_overlays(renamed, read_model(edge.flatbuffer), edge.flatbuffer, overlays(edge.flatbuffer))


def test_without_model_explorer_the_view_names_the_extra(converted, monkeypatch):
    monkeypatch.setitem(sys.modules, "model_explorer", None)  # import model_explorer raises ImportError
    with pytest.raises(ModelExplorerUnavailable, match=r"pip install 'litert-torch-direct\[view\]'") as info:
        converted[2].view(port=0, open_browser=False)
    assert isinstance(info.value, litert_torch.LiteRTTorchError) and isinstance(info.value, ImportError)


def test_the_runtime_does_not_need_model_explorer(converted, tmp_path):
    path = tmp_path / "m.tflite"
    converted[2].export(path)
    script = f"""
import sys
sys.modules["model_explorer"] = None
from litert_torch.runtime import EdgeModel
import torch
edge = EdgeModel.load({str(path)!r})
edge(torch.randn(1, 8))
try:
    edge.view(port=0, open_browser=False)
except ImportError as exc:
    print("UNAVAILABLE", type(exc).__name__, exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    assert "UNAVAILABLE ModelExplorerUnavailable" in done.stdout and "[view]" in done.stdout, done.stdout
