"""The benchmark helpers: those that measure the official exporter beside ours (bench/process_memory.py,
bench/official_export_worker.py, bench/task_export.py: the peak RSS they report and the one-line account of a
failed export), the bytes a decode step reads (bench/llm.py), the split of LiteRT-LM's decode samples
(bench/llm_profile.py) and the IF chains bench/if_chain.py times."""

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


def test_decode_weight_bytes_counts_the_rows_a_lookup_reads_and_the_branches_of_its_ifs(tmp_path):
    import numpy as np
    from llm import decode_weight_bytes, weight_bytes

    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize

    rng = np.random.default_rng(0)

    def const(name, shape):
        return ir.Tensor(name, list(shape), np.float32, rng.standard_normal(shape).astype(np.float32))

    def branch(name, x_shape):
        g = ir.Graph(name)
        x, out = ir.Tensor("x", x_shape, np.float32), ir.Tensor("out", x_shape, np.float32)
        g.inputs, g.outputs = [x], [out]
        g.ops = [ir.Op("ADD", [x, const("c", x_shape)], [out], {"fused_activation_function": "NONE"})]
        return g

    table, w, w_prefill = const("table", [100, 8]), const("w", [4, 8]), const("w_prefill", [4, 8])
    decode = ir.Graph("decode")
    ids, cond = ir.Tensor("ids", [2], np.int32), ir.Tensor("cond", [1], np.bool_)
    rows, out = ir.Tensor("rows", [2, 8], np.float32), ir.Tensor("fc", [2, 4], np.float32)
    picked = ir.Tensor("picked", [2, 4], np.float32)
    decode.inputs, decode.outputs = [ids, cond], [picked]
    decode.ops = [ir.Op("EMBEDDING_LOOKUP", [ids, table], [rows]),
                  ir.Op("FULLY_CONNECTED", [rows, w, None], [out], {"fused_activation_function": "NONE"}),
                  ir.Op("IF", [cond, out], [picked], {"then_subgraph_index": branch("then", [2, 4]),
                                                       "else_subgraph_index": branch("else", [2, 4])})]
    prefill = ir.Graph("prefill")
    x, y = ir.Tensor("x", [1, 8], np.float32), ir.Tensor("y", [1, 4], np.float32)
    prefill.inputs, prefill.outputs = [x], [y]
    prefill.ops = [ir.Op("FULLY_CONNECTED", [x, w_prefill, None], [y], {"fused_activation_function": "NONE"})]
    model = ir.Model([decode, prefill], [ir.Signature("decode", 0, ["ids", "cond"], ["out"]),
                                         ir.Signature("prefill", 1, ["x"], ["y"])])
    path = tmp_path / "model.tflite"
    path.write_bytes(serialize(model))
    # 2 of the table's 100 rows, the product's weights, each branch's constant; not the other signature's weights
    assert decode_weight_bytes(str(path)) == 2 * 8 * 4 + 4 * 8 * 4 + 2 * (2 * 4 * 4)
    assert decode_weight_bytes(str(path), "prefill") == 4 * 8 * 4
    assert weight_bytes(str(path)) == 100 * 8 * 4 + 2 * 4 * 8 * 4 + 2 * (2 * 4 * 4)


def test_profile_splits_decode_samples_by_the_runtime_part_they_are_in():
    """bench/llm_profile.py: `perf script -F ip,sym` stacks, leaf first; only those under LiteRT-LM's decode task
    count, and a sample under the IF kernel is attention (its memcpy the copies, AllocateTensors the preparing)."""
    from llm_profile import DECODE, shares

    def sample(*frames):
        return "\n".join(f"\t{0x1000 + i:x} {name}" for i, name in enumerate(frames))

    under_if = ["tflite::ops::builtin::if_kernel::Eval_static", "tflite::Subgraph::InvokeImpl", DECODE]
    script = "\n\n".join([
        sample("memcpy", "[unknown]", "xnn_invoke_runtime", *under_if),
        sample("tflite::Subgraph::AllocateTensors", "tflite::ops::builtin::if_kernel::Prepare", *under_if),
        sample("[unknown]", "pthreadpool_parallelize_1d", "xnn_invoke_runtime", *under_if),
        sample("[unknown]", "pthreadpool_parallelize_1d", "xnn_invoke_runtime", "tflite::Subgraph::InvokeImpl", DECODE),
        sample("[unknown]", "pthreadpool_parallelize_1d", "xnn_invoke_runtime", "tflite::Subgraph::InvokeImpl", DECODE),
        sample("xnn_invoke_runtime", "tflite::Subgraph::InvokeImpl", DECODE),  # the loop itself: the runtime
        sample("[unknown]", "xnn_invoke_runtime", "litert::lm::EngineAdvancedImpl::Create"),  # loading: not decode
    ])
    counts, total = shares(script)
    assert total == 6
    assert counts == {"attention": 3, "copies": 1, "preparing": 1, "main kernels": 2, "runtime": 1}


def test_if_chain_runs_one_branch_per_chain():
    """bench/if_chain.py's graphs: every chain's last IF runs the branch and the others pass the result on (the
    timing asserts the output, 2 ** layers)."""
    import argparse

    from if_chain import time_chain

    for chain in (1, 4):
        assert time_chain(chain, argparse.Namespace(layers=3, rounds=1)) > 0
