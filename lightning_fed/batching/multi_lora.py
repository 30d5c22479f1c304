"""Many clients' LoRA adapters on one frozen backbone, in one training forward.

PEFT's mixed-adapter batches (``adapter_names=``) are for inference only: they loop over the
adapters present in the batch, each an ``nn.Module`` of its own. Punica/S-LoRA batch many
adapters over one base model with a segmented gather matmul (SGMV): each row is multiplied by
its own adapter's factors, the base weight is read once. SkyRL's tx trains several LoRAs at
once the same way. Here, while a group of K clients trains together:

- each adapted layer's factors are **stacked over clients**: the same ``nn.Parameter`` objects
  the optimizer holds get ``.data`` of shape ``(K, r, in)`` (``lora_A``) and ``(K, out, r)``
  (``lora_B``), slot ``k`` holding client ``k``'s values (:meth:`StackedLora.stack`). AdamW and
  SGD are elementwise, so their state is per client by construction; every client takes the
  same number of steps, so the shared step count is each client's own;
- the layer's forward is ``base(x) + scaling * (x A[k]^T) B[k]^T`` for the rows of client ``k``
  (:func:`batched_lora_forward`: the factors gathered per row, one batched matmul each); the base
  layer runs once on all rows; ``disable_adapters`` (the DPO reference) still means the base alone;
- each client's factors are seen by the rest of the package as views of its slot
  (:meth:`StackedLora.views`: tensors whose ``.grad`` is the slot of the gradient), so the
  strategy's local correction and the turn's upload act on client ``k`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from peft.tuners.lora.layer import Linear as LoraLinear
from peft.tuners.lora.layer import LoraLayer
from torch import Tensor, nn

from lightning_fed.batching.client_rows import ClientRows
from lightning_fed.state import StateDict


def lora_layers(model: nn.Module) -> list[LoraLayer]:
    """The LoRA layers of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def unsupported_layer(model: nn.Module) -> str | None:
    """Why ``model``'s adapters cannot be stacked (a LoRA layer that is not a plain linear one, or
    DoRA/another variant, or a merged adapter), or ``None``."""
    for name, m in model.named_modules():
        if not isinstance(m, LoraLayer):
            continue
        if not isinstance(m, LoraLinear):
            return f"its LoRA layer {name} is a {type(m).__name__}, not a linear one"
        if getattr(m, "lora_variant", None) or any(getattr(m, "use_dora", {}).values()):
            return f"its LoRA layer {name} uses a LoRA variant (DoRA)"
        if m.merged:
            return f"its LoRA layer {name} has merged adapters"
    return None


def batched_lora_forward(layer: LoraLinear, rows: ClientRows, adapters: list[str], x: Tensor, *args: Any) -> Tensor:
    """``layer``'s output when its factors are stacked over the group's clients.

    Args:
        layer: A PEFT LoRA ``Linear`` whose ``lora_A``/``lora_B`` weights are ``(K, r, in)`` / ``(K, out, r)``.
        rows: The slot of each row of the step.
        adapters: The adapter each slot's client trains (its active adapter in its own turn).
        x: The input, ``(n, ..., in)``; ``n`` is the step's rows or copies of them.
    """
    result = layer.base_layer(x, *args)
    if layer.disable_adapters:
        return result
    dtype = result.dtype
    slots, per_client = rows.layout(x.shape[0])
    if slots is None and len(set(adapters)) > 1:
        slots = (
            torch.arange(rows.size, device=x.device)
            .repeat_interleave(per_client)
            .repeat(x.shape[0] // (rows.size * per_client))
        )
    for name in dict.fromkeys(adapters):
        if name not in layer.lora_A:
            continue
        mine = [k for k, a in enumerate(adapters) if a == name]
        a_w, b_w = layer.lora_A[name].weight, layer.lora_B[name].weight
        xa = layer._cast_input_dtype(layer.lora_dropout[name](x), a_w.dtype)
        shape = (x.shape[0], -1, x.shape[-1])
        if slots is None:  # the usual step (one adapter, equal segments in slot order): no gather
            result = result + _segment_matmul(xa, a_w, b_w, rows.size, per_client) * layer.scaling[name]
            continue
        if len(mine) == len(adapters):  # every row, in any order: the factors gathered per row
            h = torch.matmul(xa.reshape(shape), a_w[slots].transpose(1, 2))
            delta = torch.matmul(h, b_w[slots].transpose(1, 2)).reshape(*x.shape[:-1], -1)
            result = result + delta * layer.scaling[name]
            continue
        sel = torch.isin(slots, torch.tensor(mine, device=slots.device)).nonzero().flatten()
        h = torch.matmul(xa[sel].reshape(len(sel), -1, x.shape[-1]), a_w[slots[sel]].transpose(1, 2))
        delta = torch.matmul(h, b_w[slots[sel]].transpose(1, 2)).reshape(len(sel), *x.shape[1:-1], -1)
        result = result.index_add(0, sel, (delta * layer.scaling[name]).to(dtype))
    return result.to(dtype)


def _segment_matmul(x: Tensor, a: Tensor, b: Tensor, k: int, rows: int) -> Tensor:
    """``x_k A_k^T B_k^T`` for rows laid out as ``m`` copies of ``k`` segments of ``rows`` rows (one
    segment per client): one batched matmul per factor over the clients, the factors read in place
    (Punica's SGMV with equal segments), nothing gathered per row."""
    m = x.shape[0] // (k * rows)  # copies of the step's rows (chosen and rejected: 2)
    inner = x.shape[1:-1]
    xs = x.reshape(m, k, rows, *inner, x.shape[-1]).transpose(0, 1).reshape(k, -1, x.shape[-1])
    h = torch.bmm(xs, a.transpose(1, 2))
    out = torch.bmm(h, b.transpose(1, 2))  # (k, m * rows * inner, out)
    return out.reshape(k, m, rows, *inner, -1).transpose(0, 1).reshape(*x.shape[:-1], -1)


class StackedLora:
    """A group's adapters stacked over its clients, and the layers' batched forward.

    Args:
        model: The PEFT model.
        params: The module's shared parameters by name (the optimizer's ``nn.Parameter`` objects).
        rows_of: Returns the current step's :class:`ClientRows`.
    """

    def __init__(self, model: nn.Module, params: Mapping[str, nn.Parameter], rows_of: Any) -> None:
        self.model, self.params, self.rows_of = model, dict(params), rows_of
        self.layers = lora_layers(model)
        self.slots: list[StateDict] = []
        self.adapters: list[str] = []
        self._original: dict[str, Tensor] = {}
        self._aside: dict[str, tuple[Tensor, Tensor | None]] = {}  # set_aside's stacked data and gradients
        self._views: dict[int, dict[str, Tensor]] = {}

    def capture(self) -> None:
        """Append the module's current adapter values and active adapter as the next client's slot."""
        self.slots.append({n: p.detach().clone() for n, p in self.params.items()})
        active = {a for layer in self.layers for a in layer.active_adapters}
        if len(active) != 1:
            raise RuntimeError(f"a batched client trains one adapter, got {sorted(active)}")
        self.adapters.append(active.pop())

    def stack(self) -> None:
        """Give every shared parameter its stacked ``(K, ...)`` data and switch the layers' forward."""
        for name, p in self.params.items():
            self._original[name] = p.data
            p.data = torch.stack([slot[name] for slot in self.slots])
        for layer in self.layers:
            layer.forward = self._forward_of(layer)

    def _forward_of(self, layer: LoraLinear) -> Any:
        def forward(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            return batched_lora_forward(layer, self.rows_of(), self.adapters, x, *args)

        return forward

    def views(self, k: int) -> dict[str, Tensor]:
        """Client ``k``'s parameters: views of slot ``k`` (made once per group: the optimizer updates
        the stacked data in place), whose ``.grad`` is slot ``k`` of the gradient as of the last
        :meth:`refresh_grads`."""
        out = self._views.get(k)
        if out is None:
            out = self._views[k] = {name: p.data[k] for name, p in self.params.items()}
        return out

    def refresh_grads(self, k: int) -> dict[str, Tensor]:
        """:meth:`views` of client ``k`` with ``.grad`` set to slot ``k`` of the current gradients."""
        out = self.views(k)
        for name, p in self.params.items():
            out[name].grad = None if p.grad is None else p.grad[k]
        return out

    def set_aside(self) -> None:
        """While a validation falls inside the group's steps (:meth:`TurnGroup.set_aside`): the
        parameters' own data (the values they had before :meth:`stack`) and the layers' own forward,
        the stacked data and gradients kept for :meth:`take_back`."""
        self._aside = {name: (p.data, p.grad) for name, p in self.params.items()}
        for layer in self.layers:
            layer.__dict__.pop("forward", None)
        for name, p in self.params.items():
            p.grad = None
            p.data = self._original[name]

    def take_back(self) -> None:
        """The stacked data, gradients and forward :meth:`set_aside` kept (the optimizer's state and
        :meth:`views` refer to that data: untouched)."""
        for name, p in self.params.items():
            p.data, p.grad = self._aside[name]
        for layer in self.layers:
            layer.forward = self._forward_of(layer)
        self._aside = {}

    def unstack(self) -> None:
        """The parameters' own data and the layers' own forward again (the values they had before)."""
        for layer in self.layers:
            layer.__dict__.pop("forward", None)
        for name, p in self.params.items():
            p.data = self._original[name]
            p.grad = None
        self._original, self.slots, self.adapters, self._views = {}, [], [], {}
