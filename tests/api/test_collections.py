"""Python's cycle collector during a conversion (`memory.collections_for_large_graphs`): the objects that existed
before are frozen out of its passes and its youngest generation is collected less often while the conversion
runs; everything is as it was afterwards, also when the conversion fails, and a process that froze objects or
turned the collector off itself is left alone."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

import litert_torch
from litert_torch.memory import collections_for_large_graphs

_RECORDS: dict[str, list] = {}


class Seen(torch.nn.Module):
    """Records the collector's state each time forward runs (torch.export runs it while tracing, and puts back
    the module's own attributes afterwards: the record is kept outside it)."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.fail = fail
        self.key = f"seen-{id(self)}"

    @property
    def seen(self) -> list[tuple[int, tuple]]:
        return _RECORDS.get(self.key, [])

    def forward(self, x):
        _RECORDS.setdefault(self.key, []).append((gc.get_freeze_count(), gc.get_threshold()))
        if self.fail:
            raise RuntimeError("the model fails")
        return x * 2


@pytest.fixture
def collector():
    import time

    from litert_torch import memory

    deadline = time.time() + 60
    while memory._gc_users and time.time() < deadline:  # a conversion another thread still runs
        time.sleep(0.1)
    assert memory._gc_users == 0, "a conversion in another thread holds the collector"
    gc.unfreeze()
    before = gc.get_threshold(), gc.isenabled()
    yield before[0]
    gc.set_threshold(*before[0])
    gc.enable() if before[1] else gc.disable()
    gc.unfreeze()


def test_conversion_freezes_the_heap_and_collects_less_often_then_restores(collector):
    model = Seen()
    edge = litert_torch.convert(model, (torch.randn(3),))
    frozen, thresholds = model.seen[0]
    assert frozen > 1000  # torch's own objects, at least
    assert thresholds[0] == 10 * collector[0] and thresholds[1:] == collector[1:]
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == collector
    torch.testing.assert_close(torch.as_tensor(edge(torch.ones(3))), torch.full((3,), 2.0))


def test_a_failed_conversion_restores_the_collector(collector):
    with pytest.raises(litert_torch.LiteRTTorchError):
        litert_torch.convert(Seen(fail=True), (torch.randn(3),))
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == collector


def test_a_process_that_froze_objects_or_stopped_the_collector_is_left_alone(collector):
    gc.freeze()
    model = Seen()
    litert_torch.convert(model, (torch.randn(3),))
    assert model.seen[0][1] == collector, (model.seen, collector)
    assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # still frozen, as the process asked
    gc.unfreeze()
    gc.disable()
    model = Seen()
    litert_torch.convert(model, (torch.randn(3),))
    assert model.seen[0] == (0, collector) and not gc.isenabled(), (model.seen, collector)


def test_concurrent_users_restore_once_the_last_one_leaves(collector):
    inside, release = threading.Event(), threading.Event()

    def other():
        with collections_for_large_graphs():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with collections_for_large_graphs():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == 10 * collector[0]  # the other is still inside
    release.set()
    thread.join()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == collector


def test_llm_export_runs_with_the_heap_frozen(collector, tmp_path):
    pytest.importorskip("transformers")
    from litert_torch.generative.export_hf import export
    from tests.generative import tiny_lm

    src = tiny_lm.save(str(tmp_path / "src"), "llama")
    seen = []
    export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=[4], cache_length=32,
                  quantization_recipe="none", progress=lambda stage: seen.append(gc.get_freeze_count()))
    assert seen and min(seen) > 1000
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == collector
