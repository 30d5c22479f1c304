"""SCAFFOLD (Karimireddy et al., 2020, "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning", ICML, arXiv:1910.06378), option II.

The server keeps a control variate ``c`` and each client ``i`` its own ``c_i``; they estimate
the global and the local update directions, and the client corrects every local gradient by
their difference (Algorithm 1, line 10):

    y_i <- y_i - eta_l * (g_i(y_i) - c_i + c)

After ``K`` local steps the client refreshes its control with option II (line 12):

    c_i+ = c_i - c + (x - y_i) / (K * eta_l)

and uploads ``(y_i, c_i+ - c_i)`` (line 13). The server averages both deltas uniformly over
the sampled clients ``S`` (line 16) and steps (line 17):

    x <- x + eta_g * mean_{i in S}(y_i - x)
    c <- c + |S|/N * mean_{i in S}(c_i+ - c_i)

Where the correction goes (``correction``):

* ``gradient`` (the default, Algorithm 1 line 10): ``c - c_i`` is added to every local gradient
  before the optimizer steps. This is the paper's update when the local optimizer is SGD; an
  adaptive optimizer (AdamW) rescales the corrected gradient, so the correction is normalised
  with it.
* ``parameter`` (OpenFedLLM's ``SCAFFOLD_Callback``, Ye et al., 2024, arXiv:2402.06954): the
  optimizer steps on the plain gradient, then ``w <- w - lr * (c - c_i)`` is applied to the
  parameters after every optimizer step, so the correction moves the weights by exactly
  ``lr * (c - c_i)`` whatever the optimizer. Option II then divides by the sum of the learning
  rates the correction was applied with, ``sum_k lr_k`` (``K * lr`` for a constant lr, which is
  OpenFedLLM's ``max_steps * learning_rate``), so that with SGD ``c_i+`` is again the mean of
  the local gradients.

OpenFedLLM also weights the model average by ``|D_k|`` (``weighting="num_examples"``); the
paper's line 16 is uniform (the default).

Controls travel as named tensors, ``"control/<param name>"``, in :meth:`Scaffold.downlink`,
in the client's memory and in :attr:`ClientUpdate.extras`, never packed by position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.option_rules import CORRECTIONS, SCAFFOLD, check
from lightning_fed.state import StateDict, clone_state, compute_dtype, zeros_like_state
from lightning_fed.strategies.base import AggregationError, ClientUpdate, LocalCorrection, Strategy, weighted_average

PREFIX = "control/"


class ControlVariateCorrection(LocalCorrection):
    """The client side of SCAFFOLD for one round.

    Args:
        global_state: The global parameters ``x`` the client starts from.
        control: The server control ``c`` (keyed by parameter name).
        client_memory: The client's persistent memory; ``c_i`` lives under
            ``"control/<name>"`` and is replaced by ``c_i+`` in :meth:`finish`.
        correction: ``gradient`` (on the gradients, before each step) or ``parameter`` (on the
            weights, after each step), see the module docstring.
    """

    def __init__(
        self,
        global_state: Mapping[str, Tensor],
        control: Mapping[str, Tensor],
        client_memory: dict[str, Tensor],
        correction: str = "gradient",
    ) -> None:
        if correction not in CORRECTIONS:
            raise ValueError(f"`correction` must be one of {CORRECTIONS}, got {correction!r}")
        self.correction = correction
        self.lr_sum = 0.0  # sum of the lrs the parameter correction was applied with
        # Copies: the model may be loaded from (and then alias) the global state.
        self.x = {k: v.detach().to("cpu", compute_dtype(v.dtype), copy=True) for k, v in global_state.items()}
        self.c = {k: control[k].to("cpu", self.x[k].dtype) for k in self.x}
        for k, x in self.x.items():
            client_memory.setdefault(PREFIX + k, torch.zeros_like(x))
        self.c_i = {k: client_memory[PREFIX + k].to("cpu", self.x[k].dtype) for k in self.x}
        self.client_memory = client_memory
        self._correction: dict[str, Tensor] = {}

    def _corr(self, name: str, like: Tensor) -> Tensor:
        """``c - c_i`` for ``name`` on ``like``'s device and dtype (cached)."""
        corr = self._correction.get(name)
        if corr is None or corr.device != like.device or corr.dtype != like.dtype:
            corr = (self.c[name] - self.c_i[name]).to(device=like.device, dtype=like.dtype)
            self._correction[name] = corr
        return corr

    @torch.no_grad()
    def correct_gradients(self, params: Mapping[str, torch.nn.Parameter]) -> None:
        """``correction="gradient"``: ``p.grad += c - c_i`` for every shared parameter with a gradient (line 10)."""
        if self.correction != "gradient":
            return
        for name, p in params.items():
            if p.grad is None or name not in self.c:
                continue
            p.grad.add_(self._corr(name, p.grad))

    @torch.no_grad()
    def after_optimizer_step(self, params: Mapping[str, torch.nn.Parameter], lr: float) -> None:
        """``correction="parameter"``: ``w <- w - lr * (c - c_i)`` after the step (OpenFedLLM)."""
        if self.correction != "parameter":
            return
        for name, p in params.items():
            if name in self.c:
                p.sub_(self._corr(name, p), alpha=float(lr))
        self.lr_sum += float(lr)

    @torch.no_grad()
    def finish(self, params: Mapping[str, Tensor], num_steps: int, lr: float) -> StateDict:
        """Option II control update; stores ``c_i+`` in the client memory.

        ``correction="gradient"`` divides ``x - y_i`` by ``num_steps * lr``;
        ``correction="parameter"`` by the sum of the lrs :meth:`after_optimizer_step` applied
        the correction with (``K * lr`` for a constant lr), falling back to ``num_steps * lr``
        if it was never called.

        Args:
            params: The client's parameters ``y_i`` after local training.
            num_steps: Number of local optimizer steps ``K``.
            lr: The local learning rate ``eta_l``.

        Returns:
            ``{"control/<name>": c_i+ - c_i}``, to upload as :attr:`ClientUpdate.extras`.

        Raises:
            ValueError: If ``num_steps`` or ``lr`` is not positive, or a parameter is missing.
        """
        if not num_steps > 0:
            raise ValueError(f"SCAFFOLD needs `num_steps` > 0 local steps, got {num_steps!r}")
        if not lr > 0:
            raise ValueError(f"SCAFFOLD needs a local `lr` > 0, got {lr!r}")
        missing = sorted(set(self.x) - set(params))
        if missing:
            raise ValueError(f"SCAFFOLD: params lack shared parameters {missing[:5]}")
        scale = self.lr_sum if self.correction == "parameter" and self.lr_sum > 0 else num_steps * lr
        extras: StateDict = {}
        for name, x in self.x.items():
            y = params[name].detach().to("cpu", x.dtype)
            # c_i+ = c_i - c + (x - y_i) / (K * eta_l), Algorithm 1 line 12 (option II)
            c_plus = self.c_i[name] - self.c[name] + (x - y) / scale
            extras[PREFIX + name] = c_plus - self.c_i[name]
            self.client_memory[PREFIX + name] = c_plus
        return extras


class Scaffold(Strategy):
    """SCAFFOLD's server: controlled averaging with a server control variate.

    Args:
        server_lr: Global step size ``eta_g`` (``1.0`` in most of the paper's experiments).
        correction: ``gradient`` (the paper's Algorithm 1, line 10, the default) or
            ``parameter`` (OpenFedLLM: ``w -= lr * (c - c_i)`` after each optimizer step).
        weighting: How the clients' models are averaged: ``uniform`` (line 16, the default) or
            ``num_examples`` (by ``|D_k|``, as OpenFedLLM). The controls are always uniform.
    """

    def __init__(self, server_lr: float = 1.0, correction: str = "gradient", weighting: str = "uniform") -> None:
        check(
            SCAFFOLD, server_lr=server_lr, correction=correction, weighting=weighting
        )  # lightning_fed/option_rules.py
        self.server_lr = float(server_lr)
        self.correction = correction
        self.weighting = weighting
        self.num_clients = 0
        self.control: StateDict | None = None

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        """``c <- 0`` keyed like ``global_state``; ``num_clients`` is the ``N`` of line 17."""
        if not num_clients >= 1:
            raise ValueError(f"`num_clients` must be >= 1, got {num_clients!r}")
        super().setup(global_state, num_clients)
        self.control = zeros_like_state(global_state)

    def _require_setup(self) -> StateDict:
        if self.control is None or self.num_clients < 1:
            raise RuntimeError("Scaffold: call `setup(global_state, num_clients)` first")
        return self.control

    def downlink(self, client_id: int) -> StateDict:
        """The server control, ``{"control/<name>": c[name]}``."""
        return {PREFIX + k: v.clone() for k, v in self._require_setup().items()}

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> ControlVariateCorrection:
        """A :class:`ControlVariateCorrection` from the downlinked ``c`` and the client's ``c_i``."""
        missing = sorted(PREFIX + k for k in global_state if PREFIX + k not in downlink)
        if missing:
            raise ValueError(f"SCAFFOLD: downlink lacks server controls {missing[:5]}")
        control = {k: downlink[PREFIX + k] for k in global_state}
        return ControlVariateCorrection(global_state, control, client_memory, self.correction)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """Lines 16-17: (``weighting``) mean of the model deltas, ``|S|/N``-scaled mean of the control deltas."""
        control = self._require_setup()
        if len(updates) == 0:
            raise AggregationError("Scaffold: cannot aggregate zero updates")
        for u in updates:
            missing = sorted(PREFIX + k for k in global_state if PREFIX + k not in u.extras)
            if missing:
                raise AggregationError(f"client {u.client_id}: extras lack control deltas {missing[:5]}")
        uniform = [1.0] * len(updates)
        model_w = uniform if self.weighting == "uniform" else [float(u.num_examples) for u in updates]
        avg_y = weighted_average([u.state for u in updates], model_w, cast_back=False)
        avg_dc = weighted_average(
            [{k: u.extras[PREFIX + k] for k in global_state} for u in updates], uniform, cast_back=False
        )
        frac = len(updates) / self.num_clients  # |S| / N
        out: StateDict = {}
        new_control: StateDict = {}
        for name, x in global_state.items():
            x32 = x.to(torch.promote_types(compute_dtype(x.dtype), avg_y[name].dtype))
            # x <- x + eta_g * mean(y_i - x), lines 16-17
            out[name] = (x32 + self.server_lr * (avg_y[name] - x32)).to(device="cpu", dtype=x.dtype)
            c = control.get(name, torch.zeros_like(x32))
            # c <- c + |S|/N * mean(delta c_i), lines 16-17
            new_control[name] = c + frac * avg_dc[name].to(c.dtype)
        self.control = new_control
        return out

    def state_dict(self) -> dict[str, Any]:
        """The server control ``c`` and ``N``."""
        return {"control": clone_state(self.control or {}), "num_clients": self.num_clients}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``c`` and ``N``; missing entries keep their current values."""
        control = state.get("control")
        if control is not None:
            self.control = clone_state(control)
        self.num_clients = int(state.get("num_clients", self.num_clients))
