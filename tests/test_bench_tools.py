"""The benchmark helpers that measure the official exporter beside ours (bench/process_memory.py,
bench/official_export_worker.py, bench/task_export.py): the peak RSS they report and the one-line account of a
failed export."""

from __future__ import annotations

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


@pytest.fixture(autouse=True)
def bench_path(monkeypatch):
    monkeypatch.syspath_prepend(BENCH)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_peak_rss_follows_an_allocation_and_its_reset():
    from process_memory import peak_rss, reset_peak_rss

    reset_peak_rss()
    before = peak_rss()
    block = bytearray(256 * 2**20)  # zero-filled by the allocator: every page is written
    block[:: 4096] = b"\x01" * len(block[:: 4096])
    grown = peak_rss()
    assert grown - before >= 200 * 2**20
    del block
    reset_peak_rss()
    assert peak_rss() < grown - 200 * 2**20


def test_failure_line_names_the_exception_and_where_the_official_package_raised_it():
    from official_export_worker import where
    from task_export import failure_line

    path = os.path.join(os.sep, "venv", "site-packages", "litert_torch", "generative", "export_hf", "core",
                        "export_lib.py")
    scope: dict = {}
    exec(compile("def export_text_prefill_decode_model(model):\n    model.set_attn_implementation('x')\n", path,
                 "exec"), scope)
    with pytest.raises(AttributeError) as info:
        scope["export_text_prefill_decode_model"](object())
    found = where(info.value)
    assert found == {"raised_at": "litert_torch/generative/export_hf/core/export_lib.py:2 in "
                                  "export_text_prefill_decode_model",
                     "official_frame": "litert_torch/generative/export_hf/core/export_lib.py:2 in "
                                       "export_text_prefill_decode_model"}
    line = failure_line({"error": "AttributeError", "message": str(info.value), **found})
    assert line == ("AttributeError at litert_torch/generative/export_hf/core/export_lib.py:2 in "
                    "export_text_prefill_decode_model: 'object' object has no attribute 'set_attn_implementation'")
