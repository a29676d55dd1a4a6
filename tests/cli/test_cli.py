"""litert-convert, through click's runner and as the installed console script, including bad input."""

import json
import os
import random
import shutil
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from litert_convert.main import cli

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixture_models.py")
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = shutil.which("litert-convert") or os.path.join(os.path.dirname(sys.executable), "litert-convert")


def run(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


def run_script(*args, cwd=None):
    proc = subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def small_tflite(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "small.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--quiet")
    assert code == 0, output
    return out


def test_convert_validate_json(tmp_path):
    out = tmp_path / "m.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--validate", "--json")
    assert code == 0, output
    summary = json.loads(output[output.index("{"):])
    assert summary["output"] == str(out) and summary["ops"] > 0 and out.exists()
    assert summary["validation"]["passed"] is True


def test_convert_class_with_input_spec(tmp_path):
    out = tmp_path / "m.tflite"
    code, output = run("convert", f"{FIXTURES}:Small", "-o", out, "--input", "x=2x3x8x8:float32", "--quiet")
    assert code == 0, output
    code, output = run("inspect", out, "--json")
    assert json.loads(output)["signatures"][0]["inputs"][0] == {"name": "x", "shape": [2, 3, 8, 8],
                                                                 "dtype": "float32"}


def test_convert_module_path_and_channel_last(tmp_path):
    out = tmp_path / "m.tflite"
    code, stdout, stderr = run_script("convert", "samples.models.tiny_cnn:build", "-o", out, "--channel-last-io",
                                      "--validate", cwd=ROOT)
    assert code == 0, stdout + stderr
    assert "validation: PASS" in stdout
    code, stdout, _ = run_script("inspect", out, "--json")
    summary = json.loads(stdout)
    assert summary["signatures"][0]["inputs"][0]["shape"] == [1, 64, 64, 3]
    assert "TRANSPOSE" not in summary["subgraphs"][0]["op_histogram"]


def test_convert_pt2(tmp_path):
    from tests.cli.fixture_models import with_inputs

    model, args = with_inputs()
    pt2 = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(model, args), str(pt2))
    out = tmp_path / "m.tflite"
    code, output = run("convert", pt2, "-o", out, "--validate")
    assert code == 0, output
    assert "validation: PASS" in output


def test_inspect_validate_bench(small_tflite):
    code, output = run("inspect", small_tflite)
    assert code == 0 and "serving_default" in output and "CONV_2D" in output and "source_map" in output
    code, output = run("validate", small_tflite, f"{FIXTURES}:with_inputs")
    assert code == 0 and "validation: PASS" in output, output
    code, output = run("validate", small_tflite, f"{FIXTURES}:seeded")  # inputs drawn from the signature
    assert code == 0, output
    code, output = run("bench", small_tflite, "--threads", "1,2", "--runs", "5", "--json")
    assert code == 0, output
    results = json.loads(output)["results"]
    assert [r["threads"] for r in results] == [1, 2] and all(r["median_ms"] > 0 for r in results)


def test_every_command_as_the_installed_script(small_tflite):
    code, stdout, stderr = run_script("validate", small_tflite, f"{FIXTURES}:with_inputs")
    assert code == 0 and "validation: PASS" in stdout, stdout + stderr
    code, stdout, stderr = run_script("bench", small_tflite, "--runs", "3", "--json")
    assert code == 0 and json.loads(stdout)["results"][0]["runs"] == 3, stderr
    code, stdout, _ = run_script("inspect", small_tflite)
    assert code == 0 and "delegate_plan" in stdout
    code, stdout, _ = run_script("--help")
    assert code == 0 and "Exit codes: 0 success; 1 conversion or validation failed; 2 bad usage" in stdout


def test_validate_on_the_gpu_reports_its_error_and_tolerance(small_tflite):
    from tests.helpers import gpu_device_or_skip

    gpu_device_or_skip()
    code, output = run("validate", small_tflite, f"{FIXTURES}:with_inputs", "--accelerator", "gpu", "--json")
    assert code == 0, output
    backends = {b["backend"]: b for b in json.loads(output[output.index("{"):])["backends"]}
    assert backends["litert-gpu"]["status"] == "ran" and backends["litert-gpu"]["passed"] is True
    assert backends["litert-gpu"]["tolerance"]["rtol"] > backends["litert-xnnpack"]["tolerance"]["rtol"]
    assert backends["litert-gpu"]["outputs"][0]["max_abs_error"] >= 0


def test_validate_writes_an_html_report(small_tflite, tmp_path):
    page = tmp_path / "report.html"
    code, output = run("validate", small_tflite, f"{FIXTURES}:with_inputs", "--html", page)
    assert code == 0, output
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "Relative error per layer" in html


def test_validate_fails_against_a_different_model(small_tflite):
    code, output = run("validate", small_tflite, f"{FIXTURES}:other_weights")
    assert code == 1, output
    assert "validation: FAIL" in output
    # a source seeded from the clock builds new weights on every call: that is said, not reported as a failed
    # conversion
    code, output = run("validate", small_tflite, f"{FIXTURES}:clock_seeded")
    assert code == 2 and "builds different weights each time" in output, output


@pytest.mark.parametrize("args, message", [
    (["convert", "missing.py:model", "-o", "x.tflite"], "no such file"),
    (["convert", "model_without_name", "-o", "x.tflite"], "malformed SOURCE"),
    (["convert", f"{FIXTURES}:", "-o", "x.tflite"], "malformed SOURCE"),
    (["convert", f"{FIXTURES}:not_a_module", "-o", "x.tflite"], "is not a torch.nn.Module"),
    (["convert", f"{FIXTURES}:nothing_here", "-o", "x.tflite"], "has no attribute"),
    (["convert", f"{FIXTURES}:broken", "-o", "x.tflite"], "calling it failed"),
    (["convert", f"{FIXTURES}:Small", "-o", "x.tflite"], "gives no sample inputs"),
    (["convert", f"{FIXTURES}:Small", "-o", "x.tflite", "--input", "x=1by3:float32"], "malformed --input"),
    (["convert", f"{FIXTURES}:Small", "-o", "x.tflite", "--input", "x=1x3:complex7"], "unknown dtype"),
    (["convert", f"{FIXTURES}:Small", "-o", "x.tflite", "--input", "image=1x3x8x8:float32"],
     "--input image: not a parameter of Small.forward"),
    (["convert", "model.onnx", "-o", "x.tflite"], "ONNX"),
    (["inspect", "missing.tflite"], "no such file"),
    (["bench", "missing.tflite"], "no such file"),
])
def test_bad_input_exits_2_with_a_message(tmp_path, args, message):
    os.chdir(tmp_path)
    code, output = run(*args)
    assert code == 2, output
    assert message in output
    assert "Traceback" not in output
    assert not (tmp_path / "x.tflite").exists()


def test_existing_output_needs_force(small_tflite, tmp_path):
    out = tmp_path / "m.tflite"
    out.write_bytes(b"keep me")
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out)
    assert code == 2 and "--force" in output
    assert out.read_bytes() == b"keep me"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--force", "--quiet")
    assert code == 0 and out.read_bytes()[4:8] == b"TFL3"


def test_unsupported_op_lists_ops_and_lines_and_writes_nothing(tmp_path):
    out = tmp_path / "m.tflite"
    code, stdout, stderr = run_script("convert", f"{FIXTURES}:unsupported", "-o", out)
    assert code == 1, stdout + stderr
    assert "litert_cli_test.opaque.default" in stderr
    line = next(i for i, text in enumerate(open(FIXTURES), 1) if "OPAQUE_LINE" in text)
    assert f"fixture_models.py:{line}" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


def test_corrupt_and_truncated_tflite(small_tflite, tmp_path):
    data = small_tflite.read_bytes()
    cases = {"truncated.tflite": data[: len(data) // 3], "garbage.tflite": b"\x00" * 64,
             "text.tflite": b"not a model at all", "empty.tflite": b""}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        code, stdout, stderr = run_script("inspect", path)
        assert code == 2, (name, stdout, stderr)
        assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("error:"), (name, stderr)
        code, output = run("validate", path, f"{FIXTURES}:with_inputs")
        assert code == 2, (name, output)
    # a file cut short says so, with its size and the size it claims, whichever command reads it
    short = len(data) // 3
    for command in ("inspect", "bench", "validate"):
        extra = [f"{FIXTURES}:with_inputs"] if command == "validate" else []
        code, output = run(command, tmp_path / "truncated.tflite", *extra)
        assert code == 2 and f"truncated: {short} bytes, the file says at least " in output, (command, output)
        assert "unpack_from" not in output


def test_npu_compile_without_the_vendor_sdk_says_what_to_install(tmp_path):
    import importlib.util

    if importlib.util.find_spec("ai_edge_litert_sdk_qualcomm") is not None:
        pytest.skip("the Qualcomm SDK is installed here")
    out = tmp_path / "m.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--npu", "qualcomm:SM8650")
    assert code == 1 and "pip install ai-edge-litert-sdk-qualcomm" in output and "Traceback" not in output


def test_debug_shows_the_traceback(tmp_path):
    code, output = run("convert", f"{FIXTURES}:broken", "-o", tmp_path / "x.tflite", "--debug")
    assert code == 2 and "Traceback" in output


def test_fuzzed_files_never_crash_inspect(small_tflite, tmp_path):
    """Bit flips, truncations and overwritten bytes: inspect exits 0 or 2, every time."""
    data = bytearray(small_tflite.read_bytes())
    rng = random.Random(7)
    for i in range(150):
        mutated = bytearray(data)
        kind = i % 3
        if kind == 0:
            for _ in range(rng.randint(1, 8)):
                position = rng.randrange(len(mutated))
                mutated[position] ^= 1 << rng.randrange(8)
        elif kind == 1:
            mutated = mutated[: rng.randrange(len(mutated))]
        else:
            position = rng.randrange(len(mutated))
            mutated[position: position + 4] = rng.randbytes(4)
        path = tmp_path / f"fuzz{i}.tflite"
        path.write_bytes(bytes(mutated))
        code, output = run("inspect", path)
        assert code in (0, 2), (i, output)
        assert "internal error" not in output
    # The installed script on a handful of them, as a real process.
    for i in range(0, 150, 30):
        code, _, stderr = run_script("inspect", tmp_path / f"fuzz{i}.tflite")
        assert code in (0, 2), stderr


def test_convert_a_source_with_several_signatures(tmp_path):
    out = tmp_path / "two.tflite"
    code, output = run("convert", f"{FIXTURES}:two_signatures", "-o", out)
    assert code == 0, output
    assert "delegate plan [decode]: cpu" in output and "delegate plan [encode]: cpu" in output
    from litert_torch import EdgeModel

    assert set(EdgeModel.load(out).signatures) == {"encode", "decode"}
    code, output = run("convert", f"{FIXTURES}:two_signatures", "-o", out, "--force", "--validate")
    assert code == 2 and "several signatures" in output


def test_convert_with_a_dynamic_axis(tmp_path):
    out = tmp_path / "dyn.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--dynamic", "x:0=batch:8", "--validate")
    assert code == 0, output
    from litert_torch import EdgeModel

    edge = EdgeModel.load(out)
    for batch in (1, 5, 8):
        x = torch.randn(batch, 3, 8, 8)
        assert edge(x).shape == (batch, 2)
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--force", "--dynamic", "x:0")
    assert code == 2 and "malformed --dynamic" in output


def test_failed_validation_leaves_no_file(tmp_path, monkeypatch):
    import litert_convert.main as cli_main

    class Failing:
        passed = False

        def to_json(self):
            return {"passed": False}

        def render(self):
            return "validation: FAIL"

    monkeypatch.setattr(cli_main, "_validate", lambda *args, **kwargs: Failing())
    out = tmp_path / "m.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--validate")
    assert code == 1 and "was removed" in output
    assert not out.exists() and os.listdir(tmp_path) == []


def test_read_only_output_folder_exits_2_before_converting(tmp_path, monkeypatch):
    from litert_convert import main, sources

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    if os.geteuid() == 0:  # root writes to read-only folders: the folder is reported read-only as it would be
        real_access = os.access
        monkeypatch.setattr(main.os, "access", lambda path, mode: False if os.path.samefile(path, folder)
                            and mode & os.W_OK else real_access(path, mode))

    def not_reached(*args, **kwargs):
        raise AssertionError("the model was loaded before the output folder was checked")

    monkeypatch.setattr(sources, "load_source", not_reached)
    try:
        code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", folder / "m.tflite")
    finally:
        folder.chmod(0o700)
    assert code == 2 and "not writable" in output
    assert os.listdir(folder) == []


SLOW_SOURCE = """import os, time
import torch

class Slow(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        if torch.compiler.is_exporting() and os.environ.get("MARK_TRACING"):
            open(os.environ["MARK_TRACING"], "w").close()
            time.sleep(60)
        return self.fc(x)

def small():
    return Slow(4), (torch.randn(1, 4),)

def large():  # 400 MB of weights: writing them takes a while
    return Slow(10_000), (torch.randn(1, 10_000),)
"""


@pytest.mark.parametrize("when", ["tracing", "writing"])
def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path, when):
    """Ctrl-C while torch.export traces (the source marks the moment) or while the output is being written (its
    temporary file exists): exit 130, no traceback, nothing left in the output folder."""
    import signal
    import time

    source, out_dir, mark = tmp_path / "slow.py", tmp_path / "out", tmp_path / "tracing"
    source.write_text(SLOW_SOURCE)
    out_dir.mkdir()
    env = dict(os.environ, MARK_TRACING=str(mark)) if when == "tracing" else dict(os.environ)
    proc = subprocess.Popen([SCRIPT, "convert", f"{source}:{'small' if when == 'tracing' else 'large'}", "-o",
                             str(out_dir / "m.tflite")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if (mark.exists() if when == "tracing" else any(n.endswith(".tmp") for n in os.listdir(out_dir))):
            break
        time.sleep(0.01)
    assert proc.poll() is None, f"the conversion ended before the {when} step: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Aborted" not in err
    assert os.listdir(out_dir) == []


def test_unreadable_pt2_is_one_short_line_that_never_suggests_unpickling(tmp_path):
    import pickle
    import zipfile

    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(bad, "w") as z:  # an archive whose payload is an arbitrary pickle
        z.writestr("archive_format", "pt2")
        z.writestr("data/payload.pkl", pickle.dumps({"not": "a program", "obj": complex(1, 2)}))
    code, output = run("convert", bad, "-o", tmp_path / "m.tflite")
    assert code == 2, output
    assert "weights_only=False" not in output
    assert len(output.strip().splitlines()) <= 3 and max(len(line) for line in output.splitlines()) <= 400
    assert not (tmp_path / "m.tflite").exists()


def test_a_huge_error_message_is_bounded(tmp_path):
    """An error that quotes a whole graph (or one 200 KB line) prints as a short paragraph; --debug prints it all.
    (The model runs in PyTorch and fails only while torch.export traces it: a conversion failure, exit 1.)"""
    source = tmp_path / "huge.py"
    source.write_text("import torch\n\n"
                      "class Huge(torch.nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        if not torch.compiler.is_exporting():\n"
                      "            return x\n"
                      "        raise ValueError('x' * 200_000 + '\\n' + '\\n'.join(f'line {i}' for i in range(500)))\n\n"
                      "def build():\n    return Huge(), (torch.randn(2),)\n")
    code, output = run("convert", f"{source}:build", "-o", tmp_path / "m.tflite")
    assert code == 1, output
    lines = output.strip().splitlines()
    assert len(lines) <= 26 and max(len(line) for line in lines) <= 460, (len(lines), max(map(len, lines)))
    assert "more characters" in output and "--debug shows them" in output


def test_sample_inputs_the_model_does_not_take_exit_2_in_a_few_lines(tmp_path):
    """A shape the model's forward does not take (5 channels for a Conv2d of 3) is bad input: exit 2, PyTorch's
    own message in one line, nothing of torch's logging, nothing written."""
    out = tmp_path / "m.tflite"
    code, stdout, stderr = run_script("convert", f"{FIXTURES}:Small", "-o", out, "--input", "x=1x5x8x8:float32")
    output = stdout + stderr
    assert code == 2, output
    assert "does not run on the sample inputs (x=float32[1, 5, 8, 8])" in output, output
    assert "Traceback" not in output and "fake_tensor" not in output
    assert len(output.strip().splitlines()) <= 3, output
    assert os.listdir(tmp_path) == []


def test_bad_input_is_a_few_lines_however_long_its_message(capsys):
    """Bad input (exit 2) prints at most BAD_INPUT_LINES lines, the rest summarised; a failed conversion (exit 1)
    may list more (the ops it could not lower, with their lines)."""
    from litert_convert import output as cli_output
    from litert_convert.errors import BadInput

    @cli_output.handled
    def command(debug=False):
        raise BadInput("\n".join(f"input {i} does not fit" for i in range(50)))

    with pytest.raises(SystemExit) as exit_info:
        command(debug=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert len(err) == cli_output.BAD_INPUT_LINES < cli_output.MAX_LINES and "45 more lines" in err[-1], err


def test_a_long_conversion_reports_progress_to_a_log(tmp_path, monkeypatch):
    """stderr not a terminal (a CI log, a pipe): a conversion that runs a while prints each stage as it starts
    and a line while a stage goes on; a short one prints nothing of it (here the thresholds are shortened)."""
    from litert_convert import main as cli_main
    from litert_convert import output as cli_output

    source = tmp_path / "slow.py"
    source.write_text("import time\nimport torch\n\n"
                      "class Slow(torch.nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        if torch.compiler.is_exporting():\n"
                      "            time.sleep(1.5)\n"
                      "        return x * 2\n\n"
                      "def build():\n    return Slow(), (torch.randn(2),)\n")
    monkeypatch.setattr(cli_main, "open_status", lambda console, quiet, message: cli_output.LogStatus(
        console, message, after=0.0, every=0.5))
    code, output = run("convert", f"{source}:build", "-o", tmp_path / "m.tflite")
    assert code == 0, output
    lines = [line for line in output.splitlines() if line.startswith("[")]
    assert any("tracing with torch.export" in line and "(for " in line for line in lines), output
    assert any(line.endswith("writing the flatbuffer") for line in lines), output

    monkeypatch.undo()
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", tmp_path / "quick.tflite")
    assert code == 0 and not any(line.startswith("[") for line in output.splitlines()), output
