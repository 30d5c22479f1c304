"""Personal heads stacked over a group's clients: each row read through its own client's head.

A personalized method keeps part of its model on each client (FedPer's and FedRep's LM head, an
untied copy of the backbone's). While a group of K clients trains together
(:mod:`~lightning_fed.batching.batched_turns`), each such ``nn.Linear`` gets stacked data, as the
LoRA factors do (:mod:`~lightning_fed.batching.multi_lora`): the same ``nn.Parameter`` objects the
optimizer holds take ``.data`` of shape ``(K, out, in)`` (and ``(K, out)`` for a bias), slot ``k``
holding client ``k``'s values, and the layer's forward multiplies the rows of client ``k`` by slot
``k`` alone (:func:`stacked_linear_forward`). Each client's rows keep their order, so each client's
head multiplies the same matrix as in its sequential turn.

A head applied to the scored positions only (``head(hidden[keep])``,
:func:`~lightning_fed.modules.scored_logits.head_logits`) sees a flat ``(positions, d)`` input; the
module says which rows those positions come from with :func:`scored_rows` (a no-op outside a group).

Personal parameters of LoRA layers (FedPer's upper blocks) are stacked with the shared ones by
:class:`~lightning_fed.batching.multi_lora.StackedLora`; any other personal tensor (a bottleneck's
LayerNorm, a reward head's MLP) is not stacked, and the run falls back (:func:`unstackable_personal`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_fed.batching.client_rows import ClientRows
from lightning_fed.batching.multi_lora import lora_layers


def lora_parameter_ids(model: nn.Module) -> set[int]:
    """``id`` of every parameter of the model's LoRA layers (factors stacked by ``StackedLora``)."""
    return {id(p) for layer in lora_layers(model) for p in layer.parameters() if p.requires_grad}


def personal_heads(module: nn.Module, personal: Mapping[str, nn.Parameter]) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` modules of ``module`` whose parameters are all personal and trained (outside
    the LoRA layers), by name."""
    ids = {id(p) for p in personal.values() if p.requires_grad}
    lora = lora_parameter_ids(getattr(module, "model", module))
    out = {}
    for name, m in module.named_modules():
        own = list(m.parameters(recurse=False))
        if isinstance(m, nn.Linear) and own and all(id(p) in ids and id(p) not in lora for p in own):
            out[name] = m
    return out


def unstackable_personal(module: nn.Module) -> str | None:
    """The first trained personal parameter that neither a LoRA layer nor a personal ``nn.Linear``
    holds (it cannot be stacked per client), or ``None``."""
    personal = module.personal_parameters()
    lora = lora_parameter_ids(getattr(module, "model", module))
    heads = {id(p) for m in personal_heads(module, personal).values() for p in m.parameters(recurse=False)}
    for name, p in personal.items():
        if p.requires_grad and id(p) not in lora and id(p) not in heads:
            return name
    return None


def stacked_linear_forward(layer: nn.Linear, rows: ClientRows, x: Tensor, keep: Tensor | None = None) -> Tensor:
    """``layer(x)`` when its weight is ``(K, out, in)``: each leading row of ``x`` through its client's slot.

    The rows of ``x`` are the step's rows (or copies of them: chosen then rejected); with ``keep``
    (:func:`scored_rows`) they are the scored positions ``hidden[keep]`` of those rows, in order.
    """
    if keep is not None and x.dim() == 2 and x.shape[0] == int(keep.sum()):
        slots = rows.for_rows(keep.shape[0]).unsqueeze(1).expand_as(keep)[keep]
    else:
        slots = rows.for_rows(x.shape[0])
    weight, bias = layer.weight, layer.bias
    order = torch.argsort(slots, stable=True)  # each client's rows together, in their own order
    counts = torch.bincount(slots, minlength=rows.size).tolist()
    parts = x[order].split(counts)
    out = torch.cat([F.linear(part, weight[k], None if bias is None else bias[k]) for k, part in enumerate(parts)])
    return out[torch.argsort(order)]


@contextmanager
def scored_rows(head: nn.Module, keep: Tensor) -> Iterator[None]:
    """While the block runs, a stacked ``head`` called on ``hidden[keep]`` knows each position's row
    (nothing happens for a head that is not stacked)."""
    forward = head.__dict__.get("forward")
    if not isinstance(forward, StackedForward):  # not stacked: its own forward
        yield
        return
    forward.keep = keep
    try:
        yield
    finally:
        forward.keep = None


class StackedForward:
    """The forward of a stacked head while a group trains (:func:`stacked_linear_forward`).

    Attributes:
        keep: The ``keep`` mask of a flat (scored) input, set by :func:`scored_rows`; else ``None``.
    """

    def __init__(self, head: nn.Linear, rows_of: Callable[[], ClientRows | None]) -> None:
        self.head, self.rows_of = head, rows_of
        self.keep: Tensor | None = None

    def __call__(self, x: Tensor) -> Tensor:
        return stacked_linear_forward(self.head, self.rows_of(), x, self.keep)


class StackedHeads:
    """A group's personal heads stacked over its clients, and their batched forward.

    Args:
        heads: The personal ``nn.Linear`` modules by name (:func:`personal_heads`).
        rows_of: Returns the current step's :class:`ClientRows`.
    """

    def __init__(self, heads: Mapping[str, nn.Linear], rows_of: Callable[[], ClientRows | None]) -> None:
        self.heads, self.rows_of = dict(heads), rows_of
        self.params = {f"{n}.{p}": t for n, m in self.heads.items() for p, t in m.named_parameters(recurse=False)}
        self.slots: list[dict[str, Tensor]] = []
        self._original: dict[str, Tensor] = {}
        self._aside: dict[str, tuple[Tensor, Tensor | None]] = {}  # set_aside's stacked data and gradients

    def capture(self) -> None:
        """Append the heads' current values as the next client's slot."""
        self.slots.append({n: p.detach().clone() for n, p in self.params.items()})

    def stack(self) -> None:
        for name, p in self.params.items():
            self._original[name] = p.data
            p.data = torch.stack([slot[name] for slot in self.slots])
        for head in self.heads.values():
            head.forward = StackedForward(head, self.rows_of)

    def set_aside(self) -> None:
        """The heads' own data and forward while a validation runs inside the group (as
        :meth:`StackedLora.set_aside <lightning_fed.batching.multi_lora.StackedLora.set_aside>`)."""
        self._aside = {name: (p.data, p.grad) for name, p in self.params.items() if name in self._original}
        for head in self.heads.values():
            head.__dict__.pop("forward", None)
        for name in self._aside:
            p = self.params[name]
            p.grad = None
            p.data = self._original[name]

    def take_back(self) -> None:
        """The stacked data, gradients and forward :meth:`set_aside` kept."""
        for name, (data, grad) in self._aside.items():
            p = self.params[name]
            p.data, p.grad = data, grad
        for head in self.heads.values():
            head.forward = StackedForward(head, self.rows_of)
        self._aside = {}

    def unstack(self) -> None:
        for head in self.heads.values():
            head.__dict__.pop("forward", None)
        for name, p in self.params.items():
            if name in self._original:
                p.data = self._original[name]
            p.grad = None
        self._original, self.slots = {}, []
