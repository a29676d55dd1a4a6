"""A model fleet on a real multi-node Ray cluster (a head and two worker nodes on this machine): files identical
to single-process conversion, a crashing model reported while the rest finish, reruns doing only what is
missing."""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray")

from litert_torch import batch  # noqa: E402

MODELS = ["mlp", "cnn", "depthwise", "gru", "attention", "norm"]
HERE = os.path.dirname(os.path.abspath(__file__))


def manifest(tmp_path, models, name="fleet.toml") -> str:
    lines = ['[defaults]\ntarget = ["cpu"]\n', "[validation]\ndraws = 1\n"]
    for m in models:
        lines.append(f'[[model]]\nname = "{m}"\nsource = "{HERE}/fleet/models.py:{m}"\n')
    lines.append('[[variant]]\nname = "float"\n')
    lines.append('[[variant]]\nname = "fp16"\nquantize = "fp16"\n')
    path = tmp_path / name
    path.write_text("\n".join(lines))
    return str(path)


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def test_a_fleet_converts_on_the_cluster_like_one_process_and_a_crash_costs_one_model(cluster, tmp_path):
    import litert_torch
    from tests.fleet import models

    out = tmp_path / "out"
    table = batch.run(manifest(tmp_path, MODELS + ["aborts"]), str(out))
    by_label = {f"{r['model']}/{r['variant']}": r for r in table["tasks"]}
    assert len(by_label) == 14
    for label in ("aborts/float", "aborts/fp16"):
        assert by_label[label]["status"] == "failed" and "SIGABRT" in by_label[label]["error"], by_label[label]
    for m in MODELS:
        module, args = getattr(models, m)()
        single = litert_torch.convert(module, args, target=["cpu"])
        assert (out / m / "float.tflite").read_bytes() == single.flatbuffer, m
        fp16 = litert_torch.quantize_model(single, "fp16")
        assert (out / m / "fp16.tflite").read_bytes() == fp16.flatbuffer, m
        for variant in ("float", "fp16"):
            r = by_label[f"{m}/{variant}"]
            assert r["status"] == "ok" and r["validation"]["verdict"] in ("PASS", "INCONCLUSIVE"), r
            assert (out / r["validation"]["report"]).exists()
    saved = json.loads((out / "results.json").read_text())
    assert saved["summary"] == {"tasks": 14, "ran": 14, "ok": 12, "failed": 2}
    assert "12 ok, 2 failed" in (out / "results.html").read_text()

    # a rerun after an interruption: only what is missing (or failed) runs again
    (out / "cnn" / "fp16.json").unlink()
    (out / "mlp" / "float.tflite").unlink()
    again = batch.run(manifest(tmp_path, MODELS + ["aborts"]), str(out))
    assert again["summary"]["ran"] == 4  # cnn/fp16, mlp/float and the two failed ones
    assert {f"{r['model']}/{r['variant']}" for r in again["tasks"] if not r.get("cached")} == \
        {"cnn/fp16", "mlp/float", "aborts/float", "aborts/fp16"}


def test_manifest_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[model]]\nname = 'x'\n")
    with pytest.raises(batch.ManifestError, match="needs a name and a source"):
        batch.read_manifest(str(bad))
    bad.write_text("not toml [")
    with pytest.raises(batch.ManifestError, match="not valid TOML"):
        batch.read_manifest(str(bad))
    with pytest.raises(batch.ManifestError, match="cannot read"):
        batch.read_manifest(str(tmp_path / "missing.toml"))


def test_cli_batch_joins_a_cluster_and_reports(cluster, tmp_path):
    import subprocess
    import sys

    path = manifest(tmp_path, ["mlp"])
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "litert_convert.main", "batch", path, "-o", str(out), "--address",
                           cluster.address], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 ok, 0 failed of 2" in done.stdout and "[2/2]" in done.stderr
    assert (out / "mlp" / "fp16.tflite").exists()
    again = subprocess.run([sys.executable, "-m", "litert_convert.main", "batch", path, "-o", str(out),
                            "--address", cluster.address], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "(0 run, 2 already done)" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("count", [300, pytest.param(2000, marks=pytest.mark.slow)])
def test_dataset_validation_of_a_quantized_classifier_over_thousands_of_samples(cluster, tmp_path, count):
    import numpy as np
    import torch

    import litert_torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).eval()
    x = torch.randn(1, 32)
    float_edge = litert_torch.convert(model, (x,))
    int8 = litert_torch.quantize_model(float_edge, "dynamic-int8")
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(32).astype(np.float32) for _ in range(count)]
    report = batch.validate_dataset(model, {"float": float_edge, "dynamic-int8": int8.flatbuffer}, samples,
                                    batch_size=100, actors=2)
    f, q = report.variants["float"], report.variants["dynamic-int8"]
    assert f.samples == q.samples == count
    assert f.top1_agreement == 1.0 and f.rel_error["max"] < 1e-5
    assert 0.8 <= q.top1_agreement < 1.0 or q.top1_agreement == 1.0
    assert q.abs_error["p50"] <= q.abs_error["p99"] <= q.abs_error["max"] and q.abs_error["max"] > f.abs_error["max"]
    worst_id, worst_err = q.worst[0]
    want = model(torch.from_numpy(samples[worst_id])[None]).detach().numpy()
    got = int8.call_like_module(samples[worst_id][None])
    assert abs(float(np.abs(np.asarray(got) - want).max()) - worst_err) < 1e-6  # the ids are the samples' own
    assert f"dynamic-int8: {count} samples" in report.render()

    folder = tmp_path / "npz"
    folder.mkdir()
    for i in range(40):
        np.savez(folder / f"{i:03d}.npz", x=samples[i])
    small = batch.validate_dataset(model, {"float": float_edge}, str(folder))
    assert small.variants["float"].samples == 40 and small.variants["float"].top1_agreement == 1.0
    via_validate = litert_torch.validate(model, (x,), float_edge, dataset=str(folder))
    assert via_validate.variants["model"].samples == 40



def test_a_fleet_exports_hugging_face_directories_with_the_llm_exporter(cluster, tmp_path):
    """A manifest mixing a Hugging Face directory (LLM exporter: .litertlm bundles, decode latency, greedy
    validation against Hugging Face) with a module that takes only some of the variants."""
    from litert_torch import generative
    from litert_torch.generative.bundle import unpack_bundle
    from litert_torch.generative.export_hf.export import export_files
    from tests.generative import tiny_lm

    tiny_lm.save(str(tmp_path / "models" / "qwen"), "qwen2")
    path = tmp_path / "llm.toml"
    path.write_text(
        '[defaults]\ntarget = ["cpu"]\n'              # convert() options: not applied to the LLM
        "[llm]\ncache_length = 96\nprefill_lengths = [16]\n"
        '[validation]\ndraws = 1\nprompt = "the quick brown fox"\ntokens = 12\n'
        '[[model]]\nname = "qwen"\nsource = "models/qwen"\nmemory_gb = 3\n'
        f'[[model]]\nname = "mlp"\nsource = "{HERE}/fleet/models.py:mlp"\nvariants = ["float"]\n'
        '[[variant]]\nname = "float"\n'                 # float for both kinds of source
        '[[variant]]\nname = "int8"\nquantize = "dynamic-int8"\n')
    with pytest.raises(batch.ManifestError, match="takes prefill_lengths"):
        bad = tmp_path / "bad.toml"
        bad.write_text(path.read_text().replace('variants = ["float"]\n', "") + "channel_last_io = true\n")
        batch.read_manifest(str(bad))
    with pytest.raises(batch.ManifestError, match="no \\[\\[variant\\]\\] named 'fp8'"):
        bad.write_text(path.read_text().replace('variants = ["float"]', 'variants = ["fp8"]'))
        batch.read_manifest(str(bad))
    plan = batch.read_manifest(str(path))
    assert [(t.label, t.kind) for t in plan.tasks] == [("qwen/float", "llm"), ("qwen/int8", "llm"),
                                                       ("mlp/float", "model")]
    assert plan.tasks[0].memory_gb == 3 and plan.tasks[2].memory_gb is None
    assert plan.tasks[0].options == {"cache_length": 96, "prefill_lengths": [16], "quantize": "none"}
    assert plan.tasks[2].options == {"target": ["cpu"]}

    out = tmp_path / "out"
    table = batch.run(str(path), str(out))
    by_label = {f"{r['model']}/{r['variant']}": r for r in table["tasks"]}
    assert table["summary"] == {"tasks": 3, "ran": 3, "ok": 3, "failed": 0}, [r.get("error") for r in table["tasks"]]
    f, q = by_label["qwen/float"], by_label["qwen/int8"]
    assert f["file"] == "qwen/float.litertlm" and f["latency_ms"] > 0
    # float decodes exactly like Hugging Face; int8 is reported with its token agreement
    assert f["validation"]["verdict"] == "PASS" and f["validation"]["first_divergence"] is None
    assert f["validation"]["tokens"] == 12
    assert q["validation"]["verdict"] in ("PASS", "REPORTED") and 0 <= q["validation"]["token_agreement"] <= 1
    assert q["bytes"] < f["bytes"]
    assert "greedy tokens" in (out / f["validation"]["report"]).read_text()
    # the bundles hold what a single-process export writes (the builder stamps each file with its own uuid and
    # creation time, so the sections are compared), and the bundle loads and decodes
    single = tmp_path / "single.litertlm"
    export_files(str(tmp_path / "models" / "qwen"), bundle_path=str(single), prefill_lengths=[16],
                 cache_length=96, quantization_recipe="none")
    assert unpack_bundle(str(out / "qwen" / "float.litertlm")) == unpack_bundle(str(single))
    runner = generative.load(str(out / "qwen" / "int8.litertlm"))
    assert len(list(runner.generate_ids(runner.encode("hello world"), 4, stop=False))) == 4
    assert "per token" in (out / "results.html").read_text()

    # a rerun does nothing; a changed weight file makes only that directory's tasks run again
    assert batch.run(str(path), str(out))["summary"]["ran"] == 0
    with open(tmp_path / "models" / "qwen" / "config.json", "a") as cfg:
        cfg.write("\n")
    again = batch.run(str(path), str(out))
    assert again["summary"]["ran"] == 2
    assert {f"{r['model']}/{r['variant']}" for r in again["tasks"] if not r.get("cached")} == {"qwen/float",
                                                                                               "qwen/int8"}


def test_dataset_validation_reads_a_folder_of_labelled_images(cluster, tmp_path):
    """The trained shapes classifier on a folder of class subfolders of PNG images: accuracy of PyTorch and of
    each variant on the labels, agreement, and the worst samples named by file."""
    import numpy as np
    import torch

    import litert_torch
    from samples.shapes import data, model as shapes

    module, (x,) = shapes.build()
    rng = np.random.default_rng(7)
    for k, name in enumerate(data.CLASSES):
        os.makedirs(tmp_path / "images" / name)
        for i in range(8):
            data.draw(k, rng).save(tmp_path / "images" / name / f"{i}.png")
    float_edge = litert_torch.convert(module, (x,))
    int8 = litert_torch.quantize_model(float_edge, "dynamic-int8")
    report = batch.validate_dataset(module, {"float": float_edge, "dynamic-int8": int8}, str(tmp_path / "images"),
                                    labels=shapes.labels(), batch_size=16)
    f, q = report.variants["float"], report.variants["dynamic-int8"]
    assert f.samples == q.samples == 8 * len(data.CLASSES)
    assert report.reference_accuracy >= 0.9  # a trained model, on images it has not seen
    assert f.top1_agreement == 1.0 and f.accuracy == report.reference_accuracy and f.rel_error["max"] < 1e-4
    assert q.accuracy is not None and q.top1_agreement >= 0.8
    worst_id, worst_err = f.worst[0]
    name = report.names[worst_id]
    assert name.endswith(".png") and name.split(os.sep)[0] in data.CLASSES
    # the sample id's file, read the documented way, gives the error reported for it
    from PIL import Image

    pixels = np.asarray(Image.open(tmp_path / "images" / name).convert("RGB"), np.float32) / 255.0
    sample = pixels.transpose(2, 0, 1)[None].copy()
    want = module(torch.from_numpy(sample)).detach().numpy()
    assert abs(float(np.abs(np.asarray(float_edge.call_like_module(sample)) - want).max()) - worst_err) < 1e-6
    assert "pytorch: accuracy" in report.render() and name in report.render()
    # sorted subfolder names when no labels are given (ImageFolder's numbering), through litert_torch.validate
    plain = litert_torch.validate(module, (x,), float_edge, dataset=str(tmp_path / "images"),
                                  dataset_options={"batch_size": 16})
    order = sorted(data.CLASSES)
    assert plain.variants["model"].samples == 8 * len(data.CLASSES)
    assert (plain.reference_accuracy >= 0.9) == (order == shapes.labels())
    with pytest.raises(litert_torch.errors.InvalidArgumentError, match="not among the labels"):
        batch.validate_dataset(module, {"float": float_edge}, str(tmp_path / "images"), labels=["circle"])
