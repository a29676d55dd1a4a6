"""Per-target delegate rules (cpu, gpu, npu) and the delegate plan stored in the model's metadata."""

from litert_torch.delegates.plan import DelegatePlan, TargetPlan, plan_for

__all__ = ["DelegatePlan", "TargetPlan", "plan_for"]
