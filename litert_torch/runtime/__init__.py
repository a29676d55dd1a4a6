"""Running converted models: EdgeModel."""

from litert_torch.runtime.edge_model import EdgeModel, SignatureInfo, TensorSpec

__all__ = ["EdgeModel", "SignatureInfo", "TensorSpec"]
