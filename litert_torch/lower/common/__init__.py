"""What every frontend's lowerings share: the lowering context and the ATen registry (`registry`), exact integer
and float arithmetic (`exact`), and the resampling helpers the ATen and ONNX resize lowerings both call
(`interpolate`, `grid_sample`)."""
