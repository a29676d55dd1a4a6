"""ONNX -> IR lowerings: the registry (`registry`), one registration per ONNX op in the op-family modules, the
shape rules over dynamic sizes (`shapes`, `dynamic`) and the driver that lowers a whole graph (`driver`)."""
