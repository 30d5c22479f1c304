"""Memory and traffic planning from a model's config (``lightning-fed plan``)."""

from lightning_fed.planning.estimate import ModelShape, Plan, PlanInputs, estimate, model_shape

__all__ = ["ModelShape", "Plan", "PlanInputs", "estimate", "model_shape"]
