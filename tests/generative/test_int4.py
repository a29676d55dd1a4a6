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

    os.makedirs(tmp_path / "cache")
    engine = litert_lm.Engine(out, backend=litert_lm.Backend.CPU(), cache_dir=str(tmp_path / "cache"),
                              max_num_tokens=CACHE)
    session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1),
                                    max_output_tokens=8)
    session.run_prefill([PROMPT])
    text = session.run_decode().texts[0]
    assert isinstance(text, str) and text
