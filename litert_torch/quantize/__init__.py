"""The official litert-torch's quantization API for PyTorch modules (PT2E):

    from litert_torch.quantize import pt2e_quantizer, quant_config
    from torchao.quantization.pt2e import quantize_pt2e

    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True))
    m = quantize_pt2e.prepare_pt2e(torch.export.export(model, args).module(), quantizer)
    m(*args)                                                 # calibrate
    m = quantize_pt2e.convert_pt2e(m, fold_quantize=False)
    edge = litert_torch.convert(m, args, quant_config=quant_config.QuantConfig(pt2e_quantizer=quantizer))

The result keeps int8 weights and the module's quantize/dequantize points (`litert_torch.lower.aten.quantized`).
PT2E needs torchao (`pip install litert-torch-direct[pt2e]`). Quantizing an already converted model is
`litert_torch.quantize_model(edge, "int8", ...)` (ai-edge-quantizer; docs/QUANTIZATION.md).
"""
