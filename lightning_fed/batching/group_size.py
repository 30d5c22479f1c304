"""How many clients train together (``federation.batch_clients``), and which.

``off``: one client after another (the default). An integer K: groups of up to K clients.
``auto``: :func:`batched_group_size`, the largest group the memory allows. A round's turns are
cut into groups in their order (:func:`group_turns`); a group holds turns of the same number of
batches only (every client of a group takes every step), so clients with different local step
counts (stragglers, ``local_epochs`` over different data sizes) train in different groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from lightning_fed.federation.turn import TurnPlan

#: Bytes of saved activations per token, layer and hidden unit assumed by the ``auto`` estimate
#: (fp32 attention and MLP activations of a decoder layer with LoRA: about 34 values; a
#: deliberately generous round number until the planner's estimate replaces it).
BYTES_PER_TOKEN_UNIT = 34 * 4


def batched_group_size(module: Any, datamodule: Any, trainer: Any, clients_per_round: int) -> int:
    """The largest number of clients that train together within the memory at hand (``auto``).

    At most ``clients_per_round``. The estimate: each client adds its batch's saved activations,
    ``batch_size * max_length * hidden * layers * BYTES_PER_TOKEN_UNIT`` (twice the rows for a
    preference batch), against the accelerator's free memory (``torch.cuda.mem_get_info``) or, on
    a CPU, a quarter of the machine's available memory.
    """
    config = getattr(getattr(module, "model", None), "config", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or 0
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 0
    rows = int(getattr(datamodule, "batch_size", 1) or 1) * (2 if type(module).__name__.endswith("DPOModule") else 1)
    tokens = rows * int(getattr(datamodule, "max_length", 512) or 512)
    per_client = tokens * hidden * layers * BYTES_PER_TOKEN_UNIT
    if per_client <= 0:
        return max(1, clients_per_round)
    return max(1, min(clients_per_round, int(_free_bytes(module) // per_client)))


def _free_bytes(module: Any) -> int:
    device = getattr(module, "device", torch.device("cpu"))
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import psutil

        return int(psutil.virtual_memory().available) // 4
    except ImportError:  # pragma: no cover - psutil ships with Lightning's extras
        return 4 << 30


def group_turns(turns: Sequence[TurnPlan], size: int) -> tuple[tuple[TurnPlan, ...], ...]:
    """``turns`` in order, cut into groups of at most ``size`` turns of equal ``num_batches``."""
    groups: list[list[TurnPlan]] = []
    for turn in turns:
        last = groups[-1] if groups else None
        if last is not None and len(last) < size and last[0].num_batches == turn.num_batches:
            last.append(turn)
        else:
            groups.append([turn])
    return tuple(tuple(g) for g in groups)


def expected_clients(clients_per_round: int, sampling: str, rate: float | None, num_clients: int) -> int:
    """Clients a round trains: ``clients_per_round``, or about ``q N`` under Poisson sampling."""
    if sampling == "poisson" and rate is not None:
        return max(1, math.ceil(rate * num_clients))
    return clients_per_round
