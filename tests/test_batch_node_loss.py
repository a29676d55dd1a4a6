"""Losing a Ray worker node in the middle of a fleet run (its own cluster, so in its own module)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from litert_torch import batch  # noqa: E402
from tests.test_batch import MODELS, manifest  # noqa: E402


def test_losing_a_worker_node_mid_run_still_completes_and_a_rerun_does_nothing(tmp_path):
    """A node killed while the fleet runs: Ray reruns the tasks it held on the nodes left (a transient failure),
    every model finishes, and the next run finds nothing to do."""
    import threading
    import time

    from ray.cluster_utils import Cluster

    import litert_torch

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    doomed = c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        path = manifest(tmp_path, MODELS)
        out = tmp_path / "out"
        done: list = []
        runner = threading.Thread(target=lambda: done.append(batch.run(path, str(out))))
        runner.start()
        deadline = time.time() + 300
        while time.time() < deadline and not list(out.glob("*/*.json")):
            time.sleep(0.2)  # the first results are in: the others are queued or running
        c.remove_node(doomed)
        runner.join(600)
        table = done[0]
        assert table["summary"]["ok"] == 12, [r for r in table["tasks"] if r["status"] != "ok"]
        from tests.fleet import models

        module, args = models.attention()
        assert (out / "attention" / "float.tflite").read_bytes() == \
            litert_torch.convert(module, args, target=["cpu"]).flatbuffer
        again = batch.run(path, str(out))
        assert again["summary"]["ran"] == 0 and again["summary"]["ok"] == 12
    finally:
        ray.shutdown()
        c.shutdown()
