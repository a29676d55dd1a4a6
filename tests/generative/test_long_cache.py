"""A decode step's cost does not grow with the cache's allocated length: in the decode signature, the only
ops that read a whole cache are its in-place DYNAMIC_UPDATE_SLICE and the IFs whose branches run the attention
core on the first 128, 160, ... slots (generative/prefix.py); besides them, only the one-row mask is as long as
the cache. The times are in bench/llm_cache.py (bench/results/llm_cache.md)."""

from __future__ import annotations

import numpy as np
import pytest

from litert_torch.generative import direct, prefix, source
from litert_torch.generative.layout import DECODE
from tests.generative import tiny_lm

CACHE = 512
# ops of the prologue that build the mask row [rows, C] from input_pos (the sliding window's too), and repeat
# it for the query heads of each key/value head
MASK_OPS = {"LESS_EQUAL", "SUB", "GREATER", "LOGICAL_AND", "SELECT_V2", "CONCATENATION"}


def _decode(directory, arch):
    path = tiny_lm.save(str(directory), arch)
    read = source.read(path, need_tokenizer=False, cache_length=CACHE)
    model = direct.build_llm(direct.Weights(read.weights, source.widen), read.config, read.rope_parameters,
                             CACHE, (4,))[0]
    index = next(s.subgraph for s in model.signatures if s.key == DECODE)
    return read.config, model.subgraphs[index]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_decode_reads_whole_caches_only_to_update_them_in_place(tmp_path, arch):
    cfg, graph = _decode(tmp_path, arch)
    caches = graph.inputs[2:]
    readers: dict[int, list[str]] = {}
    for op in graph.ops:
        for t in op.inputs:
            if t is not None:
                readers.setdefault(id(t), []).append(op.opcode)
    updated = [op.outputs[0] for op in graph.ops if op.opcode == "DYNAMIC_UPDATE_SLICE"]
    assert len(updated) == len(caches) == 2 * cfg.num_layers
    for cache in caches:  # the input cache: updated in place, read by nothing else
        assert readers[id(cache)] == ["DYNAMIC_UPDATE_SLICE"], cache.name
    for cache in updated:  # the updated cache: returned, and read by the IFs of its layer's attention core
        assert readers.get(id(cache), []) == ["IF"] * (len(prefix.prefix_lengths(CACHE)) + 1), cache.name
        assert any(cache is out for out in graph.outputs)
    # every other tensor as long as the cache is the one-row mask, or the decode step's updated caches
    long = [op for op in graph.ops if op.opcode not in ("DYNAMIC_UPDATE_SLICE", "IF")
            and any(CACHE in t.shape for t in op.outputs)]
    assert {op.opcode for op in long} <= MASK_OPS
    assert all(int(np.prod(t.shape)) <= CACHE * cfg.num_heads // cfg.num_kv_heads for op in long
               for t in op.outputs)


def test_first_branch_slices_the_caches_before_anything_reads_them(tmp_path):
    _, graph = _decode(tmp_path, "llama")
    cores = [op for op in graph.ops if op.opcode == "IF"]
    assert cores
    first = cores[0].options["then_subgraph_index"]  # input position below the smallest prefix
    keys, values = first.inputs[2], first.inputs[3]  # after the chained result and the query
    n = prefix.SMALLEST_PREFIX
    for cache, axis in ((keys, 2), (values, 2)):
        readers = [op for op in first.ops if any(t is cache for t in op.inputs)]
        assert [op.opcode for op in readers] == ["SLICE"]
        assert readers[0].outputs[0].shape[axis] == n
    assert all(CACHE not in t.shape for op in first.ops for t in op.outputs)
