"""When a run's clients cannot train together: the one reason, said once at start.

Batched turns (``federation.batch_clients``) are exact only when each client's step is a
function of its own rows and its own adapter slice. Anything that couples clients inside a step
or keeps per-client state outside the stacked adapters makes the run fall back to sequential
turns, with the first reason found (:func:`batching_fallback`):

- a module that does not declare ``batchable`` (:attr:`~lightning_fed.modules.base.FederatedModule.batchable`,
  inherited: its ``training_step`` returns the loss per client), e.g. FedRep, FedPDPO and Per-FedAvg
  (they step their optimizers themselves), FedBiOT, RLFT;
- a module with a personal parameter that is neither a LoRA factor nor a personal linear head's
  (those are stacked per client, :mod:`~lightning_fed.batching.personal_rows`; a bottleneck's
  LayerNorm is not), or one that trains a tensor that is neither shared nor personal (not stacked:
  every client's gradient would meet in it);
- DP-SGD (per-example clipping and noise of one client's batch: Opacus runs one client);
- a LoRA layer that is not a plain linear one (DoRA, embeddings, merged adapters);
- a round hook that does not declare :attr:`~lightning_fed.federation.hooks.Capability.BATCH_SAFE`
  in its ``capabilities`` (read, never inferred from which methods it overrides: a new hook is
  batched only once its author says its per-client moments hold for clients trained together);
- manual optimization, a learning-rate scheduler stepped every batch, ``16-mixed`` precision (one
  loss scale and one overflow check for all clients), data parallelism (several processes).

Active dropout (LoRA's or the backbone's) is not a fallback (issue 43): each element's mask is an
independent draw in a batched step as in a sequential one, so each client's step has the
sequential step's distribution (not its bits: the draws come in another order);
``tests/batching/test_dropout.py`` compares the two over seeds.

Clients of a round with different numbers of local steps are not a fallback of the run: they
train in different groups (:func:`~lightning_fed.batching.group_size.group_turns`).
"""

from __future__ import annotations

from typing import Any

from lightning_fed.batching.multi_lora import unsupported_layer
from lightning_fed.batching.personal_rows import unstackable_personal
from lightning_fed.federation.hooks import Capability


def fallback_line(batch_clients: Any, reason: str) -> str:
    """The one line saying why a run with ``federation.batch_clients`` trains its clients one after
    another: ``fit``'s warning at start and ``lightning-fed plan``'s printout say it alike."""
    return f"federation.batch_clients: {batch_clients}: clients train one after another: {reason}"


def batch_safe(hook: Any) -> bool:
    """Whether ``hook`` (a hook or its class) declares :attr:`Capability.BATCH_SAFE`."""
    return Capability.BATCH_SAFE in getattr(hook, "capabilities", ())


def batching_fallback(module: Any, hooks: list[Any], trainer: Any = None) -> str | None:
    """Why the clients of this run train one after another despite ``federation.batch_clients``
    (see the module docstring), or ``None`` when they can train together. The rules that need no
    built module come first (:func:`class_fallback`: what ``lightning-fed plan`` asks too)."""
    reason = class_fallback(type(module), hooks)
    if reason is not None:
        return reason
    cls = type(module).__name__
    personal = unstackable_personal(module)  # LoRA factors and linear heads are stacked per client
    if personal is not None:
        return f"{cls} has the personal parameter {personal}, neither a LoRA factor nor a linear head's"
    shared, own = module.shared_parameters(), module.personal_parameters()
    local = next(
        (n for n, p in module.named_parameters() if p.requires_grad and n not in shared and n not in own), None
    )
    if local is not None:  # it would not be stacked: one tensor, every client's gradient summed into it
        return f"{cls} trains {local}, which is neither shared nor personal"
    if not getattr(module, "automatic_optimization", True) and not getattr(
        type(module), "manual_steps_per_client", False
    ):
        return f"{cls} steps its optimizers itself (manual optimization)"
    layer = unsupported_layer(module.model)
    if layer is not None:
        return f"{cls}: {layer}"
    if trainer is not None:
        return _trainer_fallback(trainer)
    return None


def class_fallback(module_class: type, hooks: list[Any]) -> str | None:
    """The fallback rules read from the module's class and the round hooks alone (no model built):
    a module that is not ``batchable``, DP-SGD, a round hook that is not batch-safe. The run asks
    them first (:func:`batching_fallback`), the planner (``lightning-fed plan``) asks only them."""
    cls = module_class.__name__
    if not getattr(module_class, "batchable", False):  # declared: FederatedModule.batchable
        return f"{cls} does not declare that it reduces its loss per client (batchable = True)"
    if callable(getattr(module_class, "poisson_batch_seed", None)):
        return f"{cls} trains with DP-SGD (per-example clipping of one client's batch)"
    hook = next((h for h in hooks if not batch_safe(h)), None)
    if hook is not None:
        name = hook.__name__ if isinstance(hook, type) else type(hook).__name__
        return f"the round hook {name} does not declare Capability.BATCH_SAFE"
    return None


def trainer_settings_fallback(precision: Any, processes: int) -> str | None:
    """The fallback of a trainer's settings as a config states them (``trainer.precision``, and the
    number of processes its devices and nodes make), before any trainer is built."""
    if processes > 1:
        return f"data parallelism over {processes} processes"
    if str(precision).startswith("16"):
        return f"precision {precision} (one loss scale for all clients)"
    return None


def _trainer_fallback(trainer: Any) -> str | None:
    reason = trainer_settings_fallback(getattr(trainer, "precision", ""), getattr(trainer, "world_size", 1))
    if reason is not None:
        return reason
    for config in getattr(trainer, "lr_scheduler_configs", None) or []:
        if config.interval == "step":
            return "a learning-rate scheduler steps every batch (its rate would move between clients)"
    return None
