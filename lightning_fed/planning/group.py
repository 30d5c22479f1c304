"""Peak memory of K clients trained together, and the largest K that fits (``batch_clients: auto``).

When a round's clients train in one loop (``federation.batch_clients``), every step runs the
K clients' batches through the frozen backbone as one concatenated batch, and each adapted
layer applies each client's own LoRA factors to its rows. Against one client's step
(:func:`~lightning_fed.planning.estimate.estimate`), item by item:

* ``weights``, ``runtime``: once. The backbone is read once per step for all K clients.
* ``lora``, ``lora_grads``, ``optimizer`` (and ``personal``/``personal_grads`` for methods that
  have them): K copies, one per client (stacked factors, their gradients, AdamW's moments).
* ``activations`` and ``logits``: those of one forward of ``K x batch`` sequences, counted on
  the ``meta`` device like a single client's
  (:func:`~lightning_fed.planning.activations.count_saved_activations`) with the adapters
  stacked over the K clients and the batching engine's forward on its usual step (each client's
  rows together, one segmented matmul over the clients per factor), which keeps each adapted
  linear's regrouped input where one adapter's forward shares it (q, k and v each keep a copy;
  +23% on SmolLM2-135M's DPO step at K = 16). They grow linearly with K; they decide K.

:func:`batched_group_size` is the largest ``K <= clients_per_round`` whose estimate fits
:data:`SAFETY` of :func:`memory_budget`: the estimate is held to within 25% of the measured
peak (tests/planning/test_group.py, benchmarks/RESULTS.md), so a group planned at
``1 / 1.25 = 0.8`` of the budget still fits when the real peak is 25% above the estimate.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from lightning_fed.planning.activations import DTYPES
from lightning_fed.planning.estimate import (
    ModelShape,
    Plan,
    PlanInputs,
    estimate,
    model_shape,
    model_shape_from_config,
    module_inputs,
    objective_of,
)

#: Items of :class:`~lightning_fed.planning.estimate.Plan` that every client of a group holds a copy of.
PER_CLIENT_ITEMS = ("lora", "lora_grads", "personal", "personal_grads", "optimizer")
#: Fraction of the budget a group is planned into (the estimate's 25% tolerance: ``1 / 1.25``).
SAFETY = 0.8


def estimate_group(shape: ModelShape, p: PlanInputs, clients: int) -> Plan:
    """Peak memory of one step of ``clients`` clients trained together; see the module doc.

    Args:
        shape: The model's shape (:func:`~lightning_fed.planning.estimate.model_shape`).
        p: One client's settings (``batch_size`` is one client's batch).
        clients: K, the clients in the group.

    Returns:
        The plan of the group's step; its traffic fields are one client's, as in :func:`estimate`.
    """
    if clients < 1:
        raise ValueError(f"federation.batch_clients: a group has at least 1 client, got {clients!r}")
    one = estimate(shape, p)
    group = estimate(shape, replace(p, batch_size=clients * p.batch_size), clients=clients)  # K x batch
    plan = replace(one, items=dict(one.items))
    plan.items["activations"] = group.items["activations"]
    plan.items["logits"] = group.items["logits"]
    for name in PER_CLIENT_ITEMS:
        plan.items[name] = clients * one.items[name]
    return plan


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" or a huge number: no limit
            return int(text)
    return None


def _meminfo(field: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/meminfo")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_budget(device: Any = "cpu") -> int:
    """Bytes a training process on ``device`` can hold in all: what is free now plus what it holds.

    The planner's estimate is of the whole process (backbone, runtime and step), so its budget
    is the memory this process could reach: on a CPU the machine's available memory
    (``MemAvailable``, which leaves out what other processes use) plus this process's resident
    set, capped by the cgroup's limit; on a CUDA device the device's free memory plus what this
    process's caching allocator has reserved.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device))
    if device.type != "cpu":
        raise ValueError(f"federation.batch_clients: auto sizes groups on cpu or cuda, not on {device.type!r}")
    budget = _meminfo("MemAvailable") + _rss()
    limit = _cgroup_limit()
    return min(budget, limit) if limit is not None else budget


def _shape(model: ModelShape | dict[str, Any] | Any) -> ModelShape:
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, dict):
        return model_shape(model)  # a backbone: config section
    return model_shape_from_config(model)  # a transformers PretrainedConfig


def batched_group_size(
    model: ModelShape | dict[str, Any] | Any,
    p: PlanInputs,
    clients_per_round: int,
    budget_bytes: int | None = None,
    device: Any = "cpu",
    safety: float = SAFETY,
) -> int:
    """The largest K <= ``clients_per_round`` whose group step fits ``safety x`` the memory budget.

    Args:
        model: A :class:`ModelShape`, a ``backbone:`` config section, or a transformers config.
        p: One client's settings (batch, length, LoRA, objective, dtype, optimizer).
        clients_per_round: The round's clients: K never exceeds it.
        budget_bytes: The memory budget; default :func:`memory_budget` of ``device``.
        device: Where the group trains (``cpu`` or ``cuda[:i]``), for the default budget.
        safety: Fraction of the budget the estimate may fill (:data:`SAFETY`).

    Returns:
        K >= 1: with K = 1 (one client at a time) even when one client alone does not fit,
        which is the sequential turn's memory and is not the group planner's to refuse.
    """
    if clients_per_round < 1:
        raise ValueError(f"federation.clients_per_round must be >= 1, got {clients_per_round!r}")
    if not 0 < safety <= 1:
        raise ValueError(f"safety must be in (0, 1], got {safety!r}")
    shape = _shape(model)
    budget = memory_budget(device) if budget_bytes is None else int(budget_bytes)
    limit = safety * budget
    fits = 1
    lo, hi = 2, clients_per_round  # the estimate grows with K: bisect for the largest that fits
    while lo <= hi:
        mid = (lo + hi) // 2
        if estimate_group(shape, p, mid).total <= limit:
            fits, lo = mid, mid + 1
        else:
            hi = mid - 1
    return fits


def inputs_from_module(module: Any, datamodule: Any) -> tuple[ModelShape, PlanInputs]:
    """``(shape, PlanInputs)`` of a built module and its data module, as the config would give them.

    The batch and length are the data module's (``batch_size``, ``max_length``: full-length
    sequences, the planner's assumption, which bounds padded batches from above); LoRA, the
    optimizer, the backbone's dtype, quantization and checkpointing are the module's.
    """

    hp = getattr(module, "hparams", {}) or {}
    backbone = hp.get("backbone") or {}
    backbone = backbone if isinstance(backbone, dict) else vars(backbone)
    lora = getattr(module, "lora_settings", None)
    model = module.model.get_base_model() if hasattr(module.model, "get_base_model") else module.model
    frozen = next((p for p in model.parameters() if not p.requires_grad and p.is_floating_point()), None)
    dtype = {v: k for k, v in DTYPES.items()}.get(getattr(frozen, "dtype", None), "float32")
    p = module_inputs(
        hp,
        backbone,
        vars(lora) if lora is not None else {"dropout": 0.0},
        batch_size=datamodule.batch_size,
        max_length=datamodule.max_length,
        objective=objective_of(type(module).__name__),
        dtype=dtype,
    )
    return model_shape_from_config(model.config), p


#: ``auto``'s K on a CPU at most (issue 43): a CPU core is busy with one client's matmuls already, so
#: the gain of a group is the fixed per-step cost saved, and it stops early: measured on SmolLM2-135M at
#: ``feddpo``'s shape (about 100 tokens a client), K = 4 takes 0.568x of main's sequential round where
#: the clients one after another take 0.707x; on a tiny model 0.71x at K = 4 and 0.58x at K = 16,
#: where fixed cost dominates. Memory, not speed, is what sizes K beyond it on CPU; an integer
#: ``batch_clients`` is not capped. Long rows cap it lower: :func:`cpu_group_cap`.
CPU_GROUP_CAP = 4

#: glibc's largest dynamic ``mmap`` threshold on 64-bit Linux (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB: the
#: threshold adapts up to it and no further; glibc 2.36's ``mallopt`` accepts more, measured). A CPU
#: tensor above it is a fresh ``mmap`` each time it is made, and every one of its pages faults in (the
#: kernel zeroes it) on first touch; one under it is reused from the heap. A CPU fit keeps every block on
#: the heap (:mod:`lightning_fed.allocator`), where it is in effect.
#: Measured on SmolLM2-135M at the long prompt (4 clients x 4 pairs of a 256-token prompt and 64-token
#: responses, 1,536 tokens a client; ``benchmarks/long_prompt_profile.py --clients 4``, RESULTS.md):
#: one client's MLP activation is 1,536 x 1,536 float32 = 9 MiB and its round faults no page; the 4
#: clients in one step make it 36 MiB, and the step faults 3.8 million pages (14.5 GiB): 12.1 s of
#: system time on top of 38.5 s of user time, against 41.3 + 0.05 s for the 4 clients one after
#: another. Batching saved 7 % of the user time and lost more than that to the kernel.
MMAP_THRESHOLD_MAX = 32 * 2**20


def cpu_group_cap(shape: ModelShape, p: PlanInputs) -> int:
    """``auto``'s largest K on a CPU: :data:`CPU_GROUP_CAP`, and no more than keeps a group step's
    widest activation within :data:`MMAP_THRESHOLD_MAX`, and at least 1.

    The widest activation is the MLP's (``max(intermediate, hidden)`` features) over the group's
    tokens, counted at full length as the memory plan does: ``batch_size x max_length`` per row copy
    (2 for the preference objectives' chosen and rejected, 1 for ``sft``), in the model's dtype. A
    client whose own step is over the threshold already trains alone: its step faults its pages
    either way, and its fixed cost is small beside it."""
    return max(1, min(CPU_GROUP_CAP, MMAP_THRESHOLD_MAX // step_activation(shape, p)))


def step_activation(shape: ModelShape, p: PlanInputs, clients: int = 1) -> int:
    """Bytes of the widest activation of a step of ``clients`` clients, as :func:`cpu_group_cap` counts
    it (the MLP's features over ``batch_size x max_length`` tokens per row copy, in the model's dtype)."""
    copies = 1 if p.objective == "sft" else 2
    return (
        clients
        * p.batch_size
        * p.max_length
        * copies
        * max(shape.intermediate, shape.hidden)
        * DTYPES[p.dtype].itemsize
    )


def needs_kept_heap(module: Any, datamodule: Any, clients: int) -> bool:
    """Whether a step of ``clients`` clients makes an activation over :data:`MMAP_THRESHOLD_MAX`, where
    glibc maps it afresh each step (:mod:`lightning_fed.allocator`); ``False`` where the planner cannot
    size the module's model."""
    try:
        shape, p = inputs_from_module(module, datamodule)
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    return step_activation(shape, p, clients) > MMAP_THRESHOLD_MAX


def run_group_size(module: Any, datamodule: Any, trainer: Any, clients_per_round: int) -> int:
    """``federation.batch_clients: auto`` for a built run: :func:`batched_group_size` of the
    module's model and settings (:func:`inputs_from_module`) against :func:`memory_budget` of the
    device the module trains on. ``trainer`` is accepted for the loop's call and not read."""
    shape, p = inputs_from_module(module, datamodule)
    device = getattr(module, "device", "cpu")
    k = batched_group_size(shape, p, clients_per_round, device=device)
    return min(k, cpu_group_cap(shape, p)) if str(device).split(":")[0] == "cpu" else k
