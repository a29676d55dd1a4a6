"""The package's import graph: no cycles (counting imports inside functions), and a converted model runs with
the runtime alone."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import litert_torch

PACKAGE = Path(litert_torch.__file__).parent
CONVERSION_STACK = ("litert_torch.converter", "litert_torch.lower", "litert_torch.frontend", "litert_torch.passes",
                    "litert_torch.quantization", "litert_torch.generative", "litert_torch.validation")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its source (a parent package's own import of a
    submodule is not counted as the submodule importing its parent)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def import_graph_in_a_child() -> dict[str, set[str]]:
    """`import_graph`, computed by a fresh interpreter: in a process where earlier code left CPython 3.11's
    recursion counter off, `ast.parse` fails with "AST constructor recursion depth mismatch" (a CPython bug), and
    the test session runs many things before this test."""
    result = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=str(PACKAGE.parent)))
    assert result.returncode == 0, result.stderr
    return {name: set(targets) for name, targets in json.loads(result.stdout).items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_package_has_no_import_cycles():
    graph = import_graph_in_a_child()
    assert "litert_torch.lower.onnx.ops" in graph["litert_torch.lower.onnx.driver"]  # the graph is read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# package -> the packages it must not import, directly or through others
LAYERS = {
    "litert_torch.frontend": ("litert_torch.lower", "litert_torch.passes", "litert_torch.converter",
                              "litert_torch.assemble", "litert_torch.validation", "litert_torch.quantization"),
    "litert_torch.runtime": ("litert_torch.converter", "litert_torch.frontend", "litert_torch.lower",
                             "litert_torch.passes", "litert_torch.validation", "litert_torch.quantization.quantize",
                             "litert_torch.generative"),
    "litert_torch.lower": ("litert_torch.converter", "litert_torch.validation", "litert_torch.runtime"),
}


def test_layers_import_only_what_lies_below_them():
    graph = import_graph_in_a_child()
    for package, forbidden in LAYERS.items():
        for module in (m for m in graph if m == package or m.startswith(package + ".")):
            bad = sorted(m for m in reaches(graph, module) if m.startswith(forbidden))
            assert not bad, f"{module} imports {bad}"


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_a_converted_model_runs_with_the_runtime_alone(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "m.tflite"
    litert_torch.convert(model, (x,)).export(path)
    torch.save(x, tmp_path / "x.pt")
    expected = model(x).detach().numpy()
    script = f"""
import sys, numpy as np, torch
from litert_torch.runtime import EdgeModel
edge = EdgeModel.load({str(path)!r})
out = edge(torch.load({str(tmp_path / "x.pt")!r}))
np.save({str(tmp_path / "out.npy")!r}, np.asarray(out))
loaded = sorted(m for m in sys.modules if m.startswith({CONVERSION_STACK!r}))
print("LOADED", loaded)
"""
    env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout, result.stdout
    import numpy as np

    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    print(json.dumps({name: sorted(targets) for name, targets in import_graph().items()}))
