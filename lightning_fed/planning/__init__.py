"""Memory and traffic planning from a model's config (``lightning-fed plan``), and the size of a
group of clients trained together (``federation.batch_clients: auto``)."""

from lightning_fed.planning.estimate import ModelShape, Plan, PlanInputs, estimate, model_shape
from lightning_fed.planning.group import batched_group_size, estimate_group, memory_budget, run_group_size

__all__ = [
    "ModelShape",
    "Plan",
    "PlanInputs",
    "batched_group_size",
    "estimate",
    "estimate_group",
    "memory_budget",
    "model_shape",
    "run_group_size",
]
