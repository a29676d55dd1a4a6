"""Attention over the filled part of the KV cache (generative/prefix.py): each layer's attention core becomes a
chain of IFs, one per cache prefix and one for the whole cache, exactly one of which runs the core; the branches
are shared by the layers, and the model computes what attending over the whole cache computes, at every position
and through every runtime path (our runner, LiteRT-LM, the quantizers)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from litert_torch.errors import ModelFileError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.flatbuffer.writer import serialize
from litert_torch.generative import direct, prefix, signature, source
from litert_torch.generative.runner import LlmRunner
from litert_torch.runtime.verify import verify
from tests.generative import tiny_lm

CACHE, PREFILL = 512, (4, 160)
IFS_PER_CORE = len(prefix.prefix_lengths(CACHE)) + 1  # one per prefix, one for the whole cache


def _build(path, whole_cache=False):
    with pytest.MonkeyPatch.context() as patch:
        # the toys' prefill signatures skip too little work to get the branches by default: here they get them
        patch.setattr(signature, "PREFILL_MIN_SKIPPED_FLOPS", 0)
        if whole_cache:
            patch.setattr(signature, "attend_filled_prefix", lambda graph, input_pos, min_skipped_flops=0: 0)
        read = source.read(path, need_tokenizer=False, cache_length=CACHE)
        model = direct.build_llm(direct.Weights(read.weights, source.widen), read.config, read.rope_parameters,
                                 CACHE, PREFILL)[0]
    return read.config, model


def test_prefill_signatures_get_the_branches_only_when_they_skip_enough_work(tmp_path, monkeypatch):
    """Decode always attends over the filled prefix; a prefill signature only when the work skipped per call
    reaches PREFILL_MIN_SKIPPED_FLOPS (the branches cost a one-time preparation when a signature first runs)."""
    path = tiny_lm.save(str(tmp_path / "m"), "llama")
    read = source.read(path, need_tokenizer=False, cache_length=CACHE)
    cfg = read.config
    group = cfg.num_heads // cfg.num_kv_heads
    # the two matmuls over the slots past the smallest prefix, per layer (the last prefill layer's attention is
    # dead: prefill computes no logits)
    per_token = 4 * cfg.num_kv_heads * group * cfg.head_dim * (CACHE - prefix.SMALLEST_PREFIX)
    skipped = per_token * PREFILL[-1] * (cfg.num_layers - 1)

    def ifs(threshold):
        monkeypatch.setattr(signature, "PREFILL_MIN_SKIPPED_FLOPS", threshold)
        model = direct.build_llm(direct.Weights(read.weights, source.widen), cfg, read.rope_parameters, CACHE,
                                 [PREFILL[-1]])[0]
        return {g.name: sum(op.opcode == "IF" for op in g.ops) for g in model.subgraphs}

    assert ifs(skipped) == {f"prefill_{PREFILL[-1]}": (cfg.num_layers - 1) * IFS_PER_CORE,
                            "decode": cfg.num_layers * IFS_PER_CORE}
    assert ifs(skipped + 1) == {f"prefill_{PREFILL[-1]}": 0, "decode": cfg.num_layers * IFS_PER_CORE}
    assert ifs(prefix.PREFILL_MIN_SKIPPED_FLOPS)[f"prefill_{PREFILL[-1]}"] == 0  # a toy: too little to skip


def test_prefix_lengths():
    assert prefix.prefix_lengths(96) == []
    assert prefix.prefix_lengths(128) == []
    assert prefix.prefix_lengths(129) == [128]
    assert prefix.prefix_lengths(1024) == [128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896]
    lengths = prefix.prefix_lengths(1 << 16)
    # past the first 128 slots, a step reads at most a quarter more slots than the filled ones
    assert all(b / a <= 1.25 for a, b in zip(lengths, lengths[1:]))
    assert len(lengths) == 4 * 9  # four to each doubling from 128 to 65,536


@pytest.mark.parametrize("positions", [[0], [5, 6, 7, 8], [127], [128], [159, 160], [895], [896], [1023]])
def test_exactly_one_branch_is_selected_the_shortest_that_holds_every_position(positions):
    """The IFs of a core each take their branch on one of these conditions: exactly one is true at any input
    positions, and it picks the shortest prefix longer than the largest position (else the whole cache)."""
    from ai_edge_litert.interpreter import Interpreter

    from litert_torch import ir

    lengths = prefix.prefix_lengths(1024)
    input_pos = ir.Tensor("input_pos", [len(positions)], np.int32)
    selected, ops = prefix._selections(input_pos, lengths)
    graph = ir.Graph("main", inputs=[input_pos], outputs=selected, ops=ops)
    names = [f"branch_{i}" for i in range(len(selected))]
    interpreter = Interpreter(model_content=serialize(ir.Model([graph], [ir.Signature("main", 0, ["input_pos"],
                                                                                      names)])))
    got = interpreter.get_signature_runner("main")(input_pos=np.array(positions, np.int32))
    chosen = [i for i, name in enumerate(names) if bool(got[name][0])]
    expected = next((i for i, n in enumerate(lengths) if max(positions) < n), len(lengths))
    assert chosen == [expected]


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gemma3", "qwen3_moe"])
def test_prefix_cores_compute_what_whole_cache_cores_compute(tmp_path, arch):
    """Soft-capped scores (Gemma 2), sliding-window layers (Gemma 2 and 3) and routed experts included: prompts
    prefilled in chunks that cross every prefix length, then decode steps up to the end of the cache, give the
    logits of the same model attending over the whole cache."""
    path = tiny_lm.save(str(tmp_path / "m"), arch)
    cfg, ours = _build(path)
    _, whole = _build(path, whole_cache=True)
    for graph in ours.subgraphs:  # (prefill computes no logits: the last layer's attention is dead there)
        layers = cfg.num_layers if graph.name == "decode" else cfg.num_layers - 1
        assert sum(op.opcode == "IF" for op in graph.ops) == layers * IFS_PER_CORE, graph.name
        # all of attention inside the branches (a router's softmax stays)
        assert not any(op.opcode == "SOFTMAX" and op.outputs[0].shape[-1] == CACHE for op in graph.ops), graph.name
    assert not any(op.opcode == "IF" for g in whole.subgraphs for op in g.ops)
    data = serialize(ours)
    file = read_model(data)
    # per signature, one set of branches (a core per prefix and the whole cache, and the branch that passes the
    # chained result on) shared by the layers (Gemma's two layer types have cores of the same shape)
    assert len(file.subgraphs) - len(ours.subgraphs) == len(ours.subgraphs) * (IFS_PER_CORE + 1)
    verify(data)

    runners = [LlmRunner(m if isinstance(m, bytes) else serialize(m), None) for m in (data, whole)]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, 500).tolist()
    position = 0
    # prefill chunks that cross prefix lengths, and decode steps at each side of each length and to the end
    for stop, decode_to in [(100, 135), (200, 262), (500, CACHE)]:
        got, expected = (r.prefill(ids[position:stop]) for r in runners)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{arch} prefill to {stop}")
        while runners[0].position < decode_to:
            token = int(rng.integers(0, cfg.vocab_size))
            got, expected = (r.decode(token) for r in runners)
            # the same terms, summed in an order that can depend on the prefix's length: float rounding apart
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{arch} decode at {runners[0].position}")
        position = runners[0].position


def test_bundle_with_prefix_cores_runs_in_litert_lm_like_hugging_face(tmp_path, monkeypatch):
    """The real LiteRT-LM runtime runs the IFs and their subgraphs (in prefill too): the greedy continuation is
    Hugging Face's, float and int8."""
    monkeypatch.setattr(signature, "PREFILL_MIN_SKIPPED_FLOPS", 0)
    pytest.importorskip("litert_lm")
    pytest.importorskip("litert_lm_builder")
    import torch
    import transformers

    from litert_torch.generative.export_hf import export
    from tests.generative.test_llm import PROMPT, hf_greedy

    src = tiny_lm.save(str(tmp_path / "src"), "qwen3")
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(src)
    ids = tok(PROMPT).input_ids
    reference = hf_greedy(hf, ids, 24)
    for recipe in ("none", "dynamic_wi8_afp32", "fp16", "dynamic_wi4b32_afp32"):
        bundle = export.export(model=src, output_dir=str(tmp_path / recipe), prefill_lengths=[8],
                               cache_length=256, quantization_recipe=recipe)
        import litert_lm

        os.makedirs(tmp_path / "c" / recipe)
        engine = litert_lm.Engine(bundle, backend=litert_lm.Backend.CPU(), cache_dir=str(tmp_path / "c" / recipe),
                                  max_num_tokens=256)
        session = engine.create_session(apply_prompt_template=False,
                                        sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=24)
        session.run_prefill([PROMPT])
        text = session.run_decode().texts[0]
        if recipe == "none":
            stop = reference.index(tok.eos_token_id) if tok.eos_token_id in reference else len(reference)
            assert text == tok.decode(reference[:stop], skip_special_tokens=False)
            from litert_torch import generative

            report = generative.validate_llm(generative.load(bundle), hf, ids, 16)
            assert report.identical and len(report.layer_errors or []) in (0, hf.config.num_hidden_layers)
        else:
            assert isinstance(text, str) and text
        from litert_torch.generative.bundle import unpack_bundle

        model = read_model(unpack_bundle(bundle)[0])
        assert all(any(op.opcode == "IF" for op in model.subgraphs[sig.subgraph].ops) for sig in model.signatures)


def _if_model(tmp_path):
    path = tiny_lm.save(str(tmp_path / "m"), "llama")
    return serialize(_build(path)[1])


def _rewrite(data, change):
    from litert_torch.flatbuffer.writer import _packed, _unpacked

    m = _unpacked(data)
    change(m)
    return _packed(m)


def test_verify_refuses_if_ops_that_would_crash_the_runtime(tmp_path):
    from litert_torch.flatbuffer import schema as tables

    data = _if_model(tmp_path)
    code = tables.BUILTIN_CODES["IF"]

    def first_if(m):
        for g, sg in enumerate(m.subgraphs):
            for op in sg.operators:
                if m.operatorCodes[op.opcodeIndex].builtinCode == code:
                    return g, op

    def self_call(m):
        g, op = first_if(m)
        op.builtinOptions.thenSubgraphIndex = g

    def dropped_input(m):
        op = first_if(m)[1]
        op.inputs = op.inputs[:-1]

    def wrong_condition(m):
        g, op = first_if(m)
        op.inputs = [op.inputs[1], *op.inputs[1:]]

    with pytest.raises(ModelFileError, match="cycle"):
        verify(_rewrite(data, self_call))
    with pytest.raises(ModelFileError, match="IF"):
        verify(_rewrite(data, dropped_input))
    with pytest.raises(ModelFileError, match="condition"):
        verify(_rewrite(data, wrong_condition))
    assert os.path.exists(tmp_path / "m")


def test_subgraph_cycles_are_found_however_long_the_chain():
    """A file may chain any number of subgraphs: the check walks them without recursing."""
    from litert_torch import ir
    from litert_torch.runtime.verify import _check_calls

    n = 20000
    graphs = [ir.Graph(f"g{i}", ops=[ir.Op("IF", [], [], {"then_subgraph_index": i + 1, "else_subgraph_index": i + 1})]
                       if i + 1 < n else []) for i in range(n)]
    _check_calls(ir.Model(graphs, []))
    graphs[-1].ops = [ir.Op("IF", [], [], {"then_subgraph_index": n // 2, "else_subgraph_index": 0})]
    with pytest.raises(ModelFileError, match=f"cycle .*{n // 2} -> {n // 2 + 1}"):
        _check_calls(ir.Model(graphs, []))


def test_a_core_whose_output_is_not_shaped_like_its_query_is_chained_from_zeros():
    """A core with values narrower than its keys (its output [.., D_v], its query [.., D]): the chain starts from
    a zero tensor of the output's shape instead of the query, and every position gives the whole core's result."""
    from ai_edge_litert.interpreter import Interpreter

    from litert_torch import ir

    cache, rows, d, d_v = 320, 2, 8, 4
    f32 = np.float32

    def build(rewrite):
        t = {name: ir.Tensor(name, shape, dtype) for name, shape, dtype in [
            ("query", [1, 1, rows, d], f32), ("keys", [1, 1, cache, d], f32), ("values", [1, 1, cache, d_v], f32),
            ("new_key", [1, 1, 1, d], f32), ("new_value", [1, 1, 1, d_v], f32), ("start", [4], np.int32),
            ("mask", [1, 1, rows, cache], f32), ("input_pos", [1], np.int32)]}
        k, v = ir.Tensor("k", [1, 1, cache, d], f32), ir.Tensor("v", [1, 1, cache, d_v], f32)
        scores, masked = ir.Tensor("s", [1, 1, rows, cache], f32), ir.Tensor("m", [1, 1, rows, cache], f32)
        probs, out = ir.Tensor("p", [1, 1, rows, cache], f32), ir.Tensor("out", [1, 1, rows, d_v], f32)
        ops = [ir.Op("DYNAMIC_UPDATE_SLICE", [t["keys"], t["new_key"], t["start"]], [k]),
               ir.Op("DYNAMIC_UPDATE_SLICE", [t["values"], t["new_value"], t["start"]], [v]),
               ir.Op("BATCH_MATMUL", [t["query"], k], [scores], {"adj_x": False, "adj_y": True}),
               ir.Op("ADD", [scores, t["mask"]], [masked], {"fused_activation_function": "NONE"}),
               ir.Op("SOFTMAX", [masked], [probs], {"beta": 1.0}),
               ir.Op("BATCH_MATMUL", [probs, v], [out], {"adj_x": False, "adj_y": False})]
        graph = ir.Graph("decode", inputs=list(t.values()), outputs=[out], ops=ops)
        if rewrite:
            assert prefix.attend_filled_prefix(graph, t["input_pos"]) == 1
            assert sum(op.opcode == "IF" for op in graph.ops) == len(prefix.prefix_lengths(cache)) + 1
            assert graph.ops[-len(prefix.prefix_lengths(cache)) - 1].inputs[1].is_constant  # the zero seed
        return Interpreter(model_content=serialize(ir.Model([graph], [ir.Signature(
            "decode", 0, list(t), ["out"])]))).get_signature_runner("decode")

    ours, whole = build(True), build(False)
    rng = np.random.default_rng(0)
    for position in (0, 127, 128, 159, 160, 250, 256, 300, 319):
        feeds = {"query": rng.standard_normal((1, 1, rows, d)), "keys": rng.standard_normal((1, 1, cache, d)),
                 "values": rng.standard_normal((1, 1, cache, d_v)), "new_key": rng.standard_normal((1, 1, 1, d)),
                 "new_value": rng.standard_normal((1, 1, 1, d_v)),
                 "mask": np.where(np.arange(cache) <= position, 0, direct.MASKED) * np.ones((1, 1, rows, 1))}
        feeds = {k: x.astype(f32) for k, x in feeds.items()}
        feeds.update(start=np.array([0, 0, position, 0], np.int32), input_pos=np.array([position], np.int32))
        np.testing.assert_allclose(ours(**feeds)["out"], whole(**feeds)["out"], rtol=1e-5, atol=1e-6,
                                   err_msg=f"position {position}")
