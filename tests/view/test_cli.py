"""`litert-convert view`: serves Model Explorer on 127.0.0.1 until Ctrl-C (exit 0), or with --export writes the
folder to share; usage errors exit 2 naming the culprit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.view.expected import ERROR, expected_values, labels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "tests", "view", "models.py") + ":build"


@pytest.fixture(scope="module")
def model_file(converted, tmp_path_factory):
    path = tmp_path_factory.mktemp("view") / "net.tflite"
    converted[2].export(path)
    return str(path)


def test_export_writes_the_page_the_model_and_one_node_data_file_per_overlay(model_file, converted, tmp_path,
                                                                              model_explorer, capsys):
    from litert_convert.main import main

    out = tmp_path / "shared"
    assert main(["view", model_file, "--export", str(out), "--validate", SOURCE, "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(out / "net.html")
    names = sorted(os.listdir(out))
    assert names == ["README.txt", "net.html", "net.tflite", "node_data"]
    assert (out / "net.tflite").read_bytes() == Path(model_file).read_bytes()
    edge = converted[2]
    files = sorted(os.listdir(out / "node_data"))
    assert files == ["layer-error.json", "placement-cpu.json", "placement-gpu.json", "placement-npu.json",
                     "pytorch-node.json", "source-line.json"]
    for name in files:
        data = json.loads((out / "node_data" / name).read_text())
        assert list(data) == ["main"] and len(data["main"]["results"]) == len(labels(edge)), name
    errors = json.loads((out / "node_data" / "layer-error.json").read_text())["main"]["results"]
    want = [row[ERROR] for row in expected_values(edge, _report(converted))]
    assert [errors[str(i)]["value"] for i in range(len(want))] == pytest.approx(want, rel=1e-6)
    readme = (out / "README.txt").read_text()
    assert "model-explorer net.tflite --node_data_paths=node_data/" in readme and "net.html" in readme
    # an existing folder is kept unless --force
    assert main(["view", model_file, "--export", str(out), "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err and len(os.listdir(out / "node_data")) == 6
    assert main(["view", model_file, "--export", str(out), "--force", "--quiet"]) == 0
    assert len(os.listdir(out / "node_data")) == 5  # no validation this time: no layer-error.json
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".litert_")]  # no temporary folder left


def _report(converted):
    import litert_torch

    module, args, edge = converted
    return litert_torch.validate(module, args, edge, per_layer=True, backends=("reference",))


def test_serve_prints_the_url_answers_only_the_app_and_stops_on_ctrl_c(model_file, model_explorer):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "cli")])}
    with subprocess.Popen([sys.executable, "-m", "litert_convert", "view", model_file, "--port", "0",
                           "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and "?data=" in url, (url, proc.stderr.read())
            base = url.split("?")[0]
            page = _get(url).decode()
            assert "<title>Model Explorer</title>" in page and "fonts.gstatic.com" not in page
            with urllib.request.urlopen(base, timeout=30) as response:  # the bare address: redirected to the model
                assert response.url == url
            graphs = json.loads(_get(base + "api/v1/load_graphs_json?graph_index=0"))
            assert graphs["graphCollections"][0]["graphs"][0]["id"] == "main"
            node_data = json.loads(_get(base + "api/v1/load_node_data?node_data_index=4"))
            assert json.loads(node_data["content"])["main"]["results"]["2"]["value"].startswith("CPU: a rank-5")
            for path in ("api/v1/read_text_file?path=/etc/hostname", "apipost/v1/upload", "../pyproject.toml"):
                with pytest.raises(urllib.error.HTTPError) as info:
                    _get(base + path)
                assert info.value.code == 404, path
                info.value.close()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
            assert "stopped" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def test_a_port_in_use_is_a_usage_error(model_file, model_explorer, capsys):
    from litert_convert.main import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", model_file, "--port", str(port), "--no-browser", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in err and "Traceback" not in err
