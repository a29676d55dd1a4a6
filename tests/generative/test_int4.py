"""int4 weights for decode: what ai-edge-quantizer's `dynamic_wi4b32_afp32` writes into an LLM bundle (int4
FULLY_CONNECTED weights in blocks of 32 with float16 block scales, the kernels XNNPack computes; the token table
int4 in blocks too), and that the bundle decodes in LiteRT-LM and in our runner, close to float."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("ai_edge_quantizer")
litert_lm = pytest.importorskip("litert_lm")
pytest.importorskip("litert_lm_builder")

from litert_torch import generative  # noqa: E402
from litert_torch.flatbuffer.reader import read_model  # noqa: E402
from litert_torch.generative.export_hf import export  # noqa: E402
from tests.generative import tiny_lm  # noqa: E402

PROMPT = "once upon a time there was a little robot who liked"
CACHE = 96


def weights_of(model, opcode: str, index: int) -> list:
    return [op.inputs[index] for g in model.subgraphs for op in g.ops if op.opcode == opcode]


TABLE_INT8 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench",
                          "recipes", "wi4b32_fc_wi8_embedding.json")


@pytest.mark.parametrize("recipe, table", [("dynamic_wi4b32_afp32", "int4"), (TABLE_INT8, "int8")],
                         ids=["dynamic_wi4b32_afp32", "int8_table"])
def test_int4_blockwise_recipe_writes_int4_blocks_and_decodes(tmp_path, recipe, table):
    import transformers

    src = tiny_lm.save(str(tmp_path / "src"), "llama")
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    out = export.export(model=src, output_dir=str(tmp_path / "int4"), prefill_lengths=[4, 16], cache_length=CACHE,
                        quantization_recipe=recipe, keep_temporary_files=True)
    model = read_model(open(os.path.join(tmp_path / "int4", "model.tflite"), "rb").read())

    dense = weights_of(model, "FULLY_CONNECTED", 1)
    # every projection (q, k, v, o, gate, up, down of each layer, and the logits) in every signature
    assert len(dense) >= 7 * hf.config.num_hidden_layers + 1
    for w in dense:
        assert w.dtype.name == "int4" and w.quantization.block_size == 32, w.name
        assert w.quantization.block_scales.dtype == np.float16
        assert list(w.quantization.block_scales.shape) == [w.shape[0], w.shape[1] // 32]
    tables = weights_of(model, "EMBEDDING_LOOKUP", 1)
    assert tables and all(t.dtype.name == table for t in tables)
    if table == "int4":
        assert all(t.quantization.block_size == 32 for t in tables)
    else:  # int8 per row
        assert all(t.quantization.block_scales is None and len(t.quantization.scale) == t.shape[0] for t in tables)
    # no float weight left in a product: what stays float32 is the small tables (norms, rope)
    assert not any(op.inputs[1].dtype == np.float32 for g in model.subgraphs for op in g.ops
                   if op.opcode in ("FULLY_CONNECTED", "BATCH_MATMUL") and op.inputs[1].is_constant)

    llm = generative.load(out)
    report = generative.validate_llm(llm, hf, llm.encode(PROMPT), 16, layers=False)
    print(report.summary())  # the agreement with float, reported: 4-bit random weights drift from float
    assert len(report.step_top1_agrees) == 16 and report.step_top1_agrees[0], report.summary()
    assert 0 < report.max_relative_error < 1.0, report.summary()

    assert _litert_lm_reply(out, tmp_path)


@pytest.mark.parametrize("arch", ["qwen3_moe", "gpt_oss"])
def test_int4_recipe_stores_expert_tables_int4(tmp_path, monkeypatch, arch):
    """The experts' tables, which ai-edge-quantizer leaves float (they are gathered, not FULLY_CONNECTED weights),
    int4 in blocks of 32 as the recipe's dense weights, with float16 scales: no float32 expert table is left,
    the bundle decodes in LiteRT-LM, and our runner's logits stay about as close to float as with the expert
    tables float (the recipe's int4 dense weights alone move these random tiny models' logits a lot)."""
    import transformers

    from litert_torch.quantization import int4_tables

    src = tiny_lm.save(str(tmp_path / "src"), arch)
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    out = export.export(model=src, output_dir=str(tmp_path / "int4"), prefill_lengths=[4, 16], cache_length=CACHE,
                        quantization_recipe="dynamic_wi4b32_afp32", keep_temporary_files=True)
    model = read_model(open(os.path.join(tmp_path / "int4", "model.tflite"), "rb").read())
    experts = hf.config.num_local_experts if arch == "gpt_oss" else hf.config.num_experts
    tables = {id(op.inputs[0]): op.inputs[0] for g in model.subgraphs for op in g.ops
              if op.opcode == "GATHER" and op.inputs[0].is_constant and op.inputs[0].shape[0] == experts}
    kinds = {(t.dtype.name, t.rank) for t in tables.values()}
    assert ("int4", 3) in kinds and ("float32", 3) not in kinds, kinds
    assert all(t.dtype == np.float16 for t in tables.values() if t.rank == 4)  # the block scales

    prompt = None
    errors = []
    for bundle in (out, None):
        if bundle is None:  # the same recipe with the expert tables left float
            monkeypatch.setattr(int4_tables, "int4_gathered_tables", lambda *args, **kwargs: 0)
            bundle = export.export(model=src, output_dir=str(tmp_path / "float_experts"), prefill_lengths=[4, 16],
                                   cache_length=CACHE, quantization_recipe="dynamic_wi4b32_afp32")
        llm = generative.load(bundle)
        prompt = prompt or llm.encode(PROMPT)
        report = generative.validate_llm(llm, hf, prompt, 16, layers=False)
        print(report.summary())
        errors.append(report.max_relative_error)
    assert 0 < errors[0] < 1.25 * errors[1], errors

    assert _litert_lm_reply(out, tmp_path)


def _litert_lm_reply(bundle: str, tmp_path) -> str:
    """LiteRT-LM's greedy text (8 tokens at most) after prefilling PROMPT into `bundle`, on the CPU."""
    os.makedirs(tmp_path / "cache", exist_ok=True)
    engine = litert_lm.Engine(bundle, backend=litert_lm.Backend.CPU(), cache_dir=str(tmp_path / "cache"),
                              max_num_tokens=CACHE)
    session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1),
                                    max_output_tokens=8)
    session.run_prefill([PROMPT])
    text = session.run_decode().texts[0]
    assert isinstance(text, str)
    return text
