"""FLoRA in a run: each client merges the server's stacked factors into its frozen base weights.

FLoRA (Wang et al., 2024, arXiv:2409.05976) stacks the round's client factors so that
``B_stack A_stack = sum_k p_k B_k A_k`` exactly (:class:`~lightning_fed.strategies.FLoRA`). The
stack does not fit the fixed-rank adapter, so it goes into the frozen weights: before a client
trains, ``W <- W_0 + s * D`` with ``D`` the sum of the merged products so far (the strategy's
``base_delta``) and ``s`` the module's LoRA scaling; the client then trains a freshly initialised
adapter at its own rank (the strategy's global state: ``A`` drawn, ``B = 0``) and uploads it.

:class:`FLoRAMerge` (a ``federation.hooks`` entry) does this the same way in process and under
Flower:

* a client whose base has merged every round but the last gets only the last stack (the
  strategy's downlink, ``flora/stack/<key>``) and adds its product;
* a new or returning client (and any client after a resume) gets the whole ``D`` as its
  instruction (``flora/base/<module>``, counted in the round's downlink bytes) and sets
  ``W = W_0 + s * D``;
* after aggregation the server's own module gets ``W = W_0 + s * D``: the global evaluation model
  is ``base + s * D`` with the fresh adapter (``B = 0``) on top.

The client keeps ``W_0`` and the ``D`` it has applied, per module object (the in-process clients
share one module; a Flower process, one per process), and always writes ``W_0 + s * D``: the
merged weights depend only on ``D``, which equals the server's ``base_delta`` bit for bit, so a
resumed run continues exactly. The base weights must be floating point (a 4-bit or 8-bit
quantized backbone is refused: its weights cannot take ``s D``). The paper is not in
``shared/papers``; the merge follows the authors' description (stack, merge, re-initialise).

With DPO the reference model is the module with its adapter disabled, i.e. the merged base: each
round's DPO is taken against the model the round started from (as in iterative DPO), not against
the original ``W_0``. A change of the base empties the module's reference cache, so a cached
reference log-prob is always the current base's.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lightning_fed.federation.hooks import Capability, Payload, RoundHook, payload_nbytes
from lightning_fed.modules.reference_cache import KEY_BYTES
from lightning_fed.strategies.flora import STACK_PREFIX, FLoRA
from lightning_fed.strategies.lora_factors import lora_pairs

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import ClientTurn, ServerRound

#: A :class:`~lightning_fed.modules.reference_cache.ReferenceCache` state with no entries.
EMPTY_CACHE = {
    "keys": torch.zeros(0, KEY_BYTES, dtype=torch.uint8),
    "values": torch.zeros(0, 2, dtype=torch.float64),
    "dtype": "",
}

#: Instruction keys: the number of merged rounds, and the whole base change per LoRA module.
ROUND_KEY, BASE_PREFIX = "flora/round", "flora/base/"


class MergedBase:
    """What one module's frozen weights hold: ``W_0`` per LoRA module and the ``D`` applied to it."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.layers = lora_layers(module)
        quantized = [n for n, m in self.layers.items() if not m.get_base_layer().weight.dtype.is_floating_point]
        if quantized:
            raise ValueError(
                f"federation.hooks: FLoRAMerge needs floating-point base weights, {quantized[0]} is quantized"
            )
        self.original = {name: layer.get_base_layer().weight.detach().clone() for name, layer in self.layers.items()}
        self.delta: dict[str, Tensor] = {}
        self.rounds = 0
        #: A DPO module's cached reference log-probs: stale once the base (its reference) changes.
        self.reference_cache = getattr(module, "reference_cache", None)

    def set_delta(self, delta: Mapping[str, Tensor], rounds: int) -> None:
        """``W = W_0 + s * D`` for every LoRA module (the stacked updates merged into ``W``)."""
        for name, layer in self.layers.items():
            weight = layer.get_base_layer().weight
            scaling = float(layer.scaling["default"])
            change = delta.get(name)
            if change is not None and getattr(layer, "fan_in_fan_out", False):  # GPT-2's Conv1D: W is (in, out)
                change = change.T
            merged = None if change is None else self.original[name].to(change.dtype) + scaling * change
            with torch.no_grad():
                weight.copy_(self.original[name] if merged is None else merged.to(weight.dtype))
        if self.reference_cache is not None and (rounds != self.rounds or set(delta) != set(self.delta)):
            self.reference_cache.load_state_dict(EMPTY_CACHE)  # the reference is the merged base now
        self.delta = {k: v.clone() for k, v in delta.items()}
        self.rounds = rounds

    def add_stack(self, downlink: Mapping[str, Tensor], rounds: int) -> None:
        """Merge the last round's stack: ``D <- D + B_stack A_stack`` (the server's sum, same order)."""
        stack = {k[len(STACK_PREFIX) :]: v for k, v in downlink.items() if k.startswith(STACK_PREFIX)}
        delta = dict(self.delta)
        for name, (a_key, b_key) in lora_pairs(stack).items():
            merged = stack[b_key] @ stack[a_key]
            delta[name] = merged if name not in delta else delta[name] + merged
        self.set_delta(delta, rounds)


def lora_layers(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """PEFT's LoRA layers of ``module`` by name (the prefix of their ``lora_A``/``lora_B`` keys)."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in module.named_modules() if isinstance(m, LoraLayer)}


_MERGED: weakref.WeakKeyDictionary[torch.nn.Module, MergedBase] = weakref.WeakKeyDictionary()


def merged_base(module: torch.nn.Module) -> MergedBase:
    """The :class:`MergedBase` of ``module`` (made on first use, before any merge: ``W_0`` is the base)."""
    if module not in _MERGED:
        _MERGED[module] = MergedBase(module)
    return _MERGED[module]


class FLoRAMerge(RoundHook):
    """Merge FLoRA's stacked factors into each client's frozen base weights (and the server's).

    Args:
        always_send_base: Send every client all of ``D`` every round (downlink bytes of a full
            weight change per module), not only the new and returning ones. Needed where a client
            does not keep its own process between rounds (Flower's simulation engine with several
            workers): there a client may land on a process whose base is more than one round
            behind, and the stack alone cannot bring it up to date (the turn then fails with a
            one-line error).
    """

    #: Batch-safe (``federation.batch_clients``): in one process every client of a round starts from the
    #: same merged base ``W_0 + s D`` (the first turn of a group merges it, the others find it current,
    #: as in their sequential turns), and the turn's adapter is the module's, stacked per client.
    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(self, always_send_base: bool = False) -> None:
        self.always_send_base = bool(always_send_base)
        self.synced: dict[int, int] = {}  # rounds merged into each client's base, as sent; not saved
        self.pending: dict[int, Payload] = {}  # client side: the instruction, from prepare_client to start

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        if not isinstance(server.strategy, FLoRA):
            raise ValueError(
                f"federation.hooks: FLoRAMerge needs federation.strategy=FLoRA, got {type(server.strategy).__name__}"
            )
        self.synced = {}
        self._merge_server(server, module)  # a resumed run evaluates base + s D from the start

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        strategy: FLoRA = server.strategy  # type: ignore[assignment]
        rounds = strategy.rounds_done
        payload: Payload = {ROUND_KEY: rounds}
        if rounds > 0 and (
            self.always_send_base or self.synced.get(client_id) != rounds - 1
        ):  # new, returning or resumed: all of D
            payload.update({BASE_PREFIX + k: v for k, v in strategy.base_delta.items()})
            server.add_round_bytes(down=payload_nbytes({k: v for k, v in payload.items() if k != ROUND_KEY}))
        self.synced[client_id] = rounds
        return payload

    def prepare_client(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, instruction: Payload
    ) -> None:
        self.pending[client_id] = dict(instruction)

    def evaluation_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        """What a remote client needs to evaluate ``base + s D`` after this round's merge: the round's
        stack if its base merged every round but this one (it trained in this round), else all of ``D``.

        The training bookkeeping (``synced``) is left as it is: the next train instruction is the same
        whether or not the client evaluated, so a client's train traffic does not depend on evaluation.
        """
        strategy: FLoRA = server.strategy  # type: ignore[assignment]
        rounds = strategy.rounds_done
        payload: Payload = {ROUND_KEY: rounds}
        if rounds == 0:
            return payload
        if not self.always_send_base and self.synced.get(client_id) == rounds - 1:
            payload.update(strategy.downlink(client_id))  # flora/stack/<key>
        else:
            payload.update({BASE_PREFIX + k: v for k, v in strategy.base_delta.items()})
        return payload

    def prepare_evaluation(self, module: pl.LightningModule, client_id: int, instruction: Payload) -> None:
        """Bring the module's base to ``W_0 + s D`` of the evaluated round (the server's module after
        :meth:`after_aggregate`), so a remote client evaluates the model the in-process loop evaluates."""
        rounds = int(instruction.get(ROUND_KEY, 0))
        base = merged_base(module)
        delta = {k[len(BASE_PREFIX) :]: v for k, v in instruction.items() if k.startswith(BASE_PREFIX)}
        if delta or rounds == 0:
            base.set_delta(delta, rounds)
        elif base.rounds == rounds - 1:
            base.add_stack(instruction, rounds)
        elif base.rounds != rounds:
            raise RuntimeError(
                f"FLoRA: client {client_id}'s base has merged {base.rounds} rounds; round {rounds}'s stack alone"
                " cannot bring it up to date for evaluation"
            )

    def on_client_start(
        self, turn: ClientTurn, trainer: pl.Trainer, module: pl.LightningModule, client_id: int
    ) -> None:
        instruction = self.pending.pop(client_id, {})
        rounds = int(instruction.get(ROUND_KEY, 0))
        base = merged_base(module)
        delta = {k[len(BASE_PREFIX) :]: v for k, v in instruction.items() if k.startswith(BASE_PREFIX)}
        if delta:
            base.set_delta(delta, rounds)
        elif base.rounds == rounds - 1:
            base.add_stack(turn.downlink, rounds)
        elif base.rounds != rounds:
            raise RuntimeError(
                f"FLoRA: client {client_id}'s base has merged {base.rounds} rounds; round {rounds}'s stack alone"
                " cannot bring it up to date"
            )

    def _merge_server(self, server: ServerRound, module: pl.LightningModule) -> None:
        strategy: FLoRA = server.strategy  # type: ignore[assignment]
        merged_base(module).set_delta(strategy.base_delta, strategy.rounds_done)

    def after_aggregate(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int
    ) -> None:
        self._merge_server(server, module)
