"""The common half of every data-selection hook: apply coresets, time them, report them.

A :class:`CoresetSelection` is a :class:`~lightning_fed.federation.RoundHook`. Before a
round's batches are laid out (``on_round_start``) it asks its subclass for each sampled
client's coreset (indices into ``ClientData.full_train``) and restricts the client to it
with ``ClientData.select``; the FedAvg weights ``|D~_i|`` (Eq. (12)) and, with
``federation.local_epochs``, the number of local steps follow from the selected sizes.
That reads client data on the server, so such a hook decides in the in-process-only moment
:meth:`~lightning_fed.federation.RoundHook.on_client_data` (and a Flower run refuses it at
start). FedHDS instead decides from the clients' answers to a pre-round
query (``on_replies`` -> :meth:`CoresetSelection.apply`) and sends each client its coreset as
an instruction, applied on the client by ``prepare_client``: it runs under Flower too.

A client whose coreset is empty (none of its groups was selected) does not train that
round, as in the authors' code: it is removed from the round's client list, which the
:class:`~lightning_fed.callbacks.FederatedLoop` lays out after its hooks have run. If that
would leave fewer than ``federation.min_clients`` clients, the first skipped ones train on
their fallback sample instead (the sample nearest their largest group's centroid).

Per round it records the fraction of the sampled clients' data used, the client-side time
split into feature extraction, fusion, clustering and training (the paper's Tables 3, 6
and 7), the server's time, and the extra bytes exchanged (``comm/selection_up_bytes``,
``comm/selection_down_bytes``), logs them as ``selection/*`` scalars through the trainer's
loggers, keeps them in :attr:`history` (checkpointed) and writes ``selection.json`` and a
per-round figure (``selection/round_NNN.png``, and TensorBoard) to the run folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_fed.federation.hooks import Capability, RoundHook
from lightning_fed.federation.sampling import derive_seed
from lightning_fed.hook_rules import HIERARCHICAL_DATA_SELECTION, SMALL_SELECTIONS
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import Payload
    from lightning_fed.federation.server_round import ServerRound
    from lightning_fed.federation.turn import ClientTurn
    from lightning_fed.strategies.base import ClientUpdate

PHASES = ("extract", "fusion", "cluster")
SMALL_SELECTION = SMALL_SELECTIONS  # lightning_fed/hook_rules.py (the precheck reads it there)


@dataclass
class Selection:
    """What a selection method decided for one round.

    Attributes:
        indices: Client -> indices into its ``full_train`` (an empty list: no coreset).
        seconds: Client -> seconds spent per phase (``extract``, ``fusion``, ``cluster``).
        server_seconds: Seconds the server spent (inter-client clustering).
        up_bytes: Extra bytes all clients sent for the selection.
        down_bytes: Extra bytes the server sent back (selected group ids, shared frame).
        fallback: Client -> one index to train on if it must train with an empty coreset.
        points: Client -> ``(n, 2)`` coordinates for the figure (fused features), if any.
        info: Method-specific numbers for the record (e.g. groups found and selected).
    """

    indices: dict[int, list[int]]
    seconds: dict[int, dict[str, float]] = field(default_factory=dict)
    server_seconds: float = 0.0
    up_bytes: int = 0
    down_bytes: int = 0
    fallback: dict[int, int] = field(default_factory=dict)
    points: dict[int, np.ndarray] | None = None
    info: dict[str, Any] = field(default_factory=dict)


class CoresetSelection(RoundHook):
    """Base of the coreset hooks; subclasses implement :meth:`choose`.

    :meth:`choose` reads the clients' data on the server, so a method that decides there derives
    from :class:`~lightning_fed.selection.baselines.ServerSideCoreset`, which calls it from
    :meth:`~lightning_fed.federation.RoundHook.on_client_data` (in process only, see
    :func:`~lightning_fed.federation.hooks.reads_client_data`) through :meth:`select_from_data`.
    A method whose clients compute what the
    server needs (FedHDS) answers a pre-round query instead and hands the replies' decision
    to :meth:`apply` from ``on_replies``; each client then gets its coreset as an instruction.
    A subclass that implements :meth:`choose` but neither ``on_client_data`` nor ``on_replies``
    would never be asked (every client would silently train on all its data): defining one is a
    ``TypeError``.

    Args:
        seed: Seed of the selection's randomness (default: the loop's seed); every draw is
            a function of ``(seed, round, client)``.
        figures: Draw the per-round figure of the fused features (needs matplotlib).
        on_small_selection: When a client's coreset has fewer examples than one local batch
            (``data.batch_size``), ``warn`` (one line naming the clients and sizes), ``error``
            (stop the run), or ``ignore``. Such a client repeats the same few examples for all
            its local steps.
    """

    #: Its per-client hooks only time each turn (``seconds``): clients trained together
    #: (``federation.batch_clients``) each record the group's time.
    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        asked = Capability.READS_CLIENT_DATA in cls.capabilities or cls.on_replies is not RoundHook.on_replies
        if cls.choose is not CoresetSelection.choose and not asked:
            raise TypeError(
                f"{cls.__name__} implements `choose` but nothing calls it (it overrides neither `on_client_data` nor"
                " `on_replies`): derive from lightning_fed.selection.baselines.ServerSideCoreset to choose on the"
                " server from the clients' data"
            )

    def __init__(self, seed: int | None = None, figures: bool = True, on_small_selection: str = "warn") -> None:
        check(HIERARCHICAL_DATA_SELECTION[1:], on_small_selection=on_small_selection)  # lightning_fed/hook_rules.py
        self.seed, self.figures, self.on_small_selection = seed, figures, on_small_selection
        self.history: list[dict[str, Any]] = []
        self._record: dict[str, Any] | None = None
        self._t0: dict[int, float] = {}
        self._chosen: dict[int, list[int]] = {}  # kept client -> sorted coreset indices, this round
        self._exchanged = -1  # the round whose coresets came from the clients' replies

    # ------------------------------------------------------------------ to implement
    def choose(
        self, server: ServerRound, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> Selection:
        """Each sampled client's coreset for round ``round_idx`` (the module holds the global state)."""
        raise NotImplementedError  # abstract: each selection method implements it

    # ----------------------------------------------------------------------- helpers
    def round_seed(self, server: ServerRound, round_idx: int, client: int = -1) -> int:
        """A seed that depends only on (seed, round, client), so resumed runs repeat it."""
        return derive_seed(self.seed if self.seed is not None else server.seed, round_idx, client + 1, 11) % (2**31)

    # ------------------------------------------------------------------------ rounds
    def select_from_data(
        self,
        server: ServerRound,
        trainer: Any,
        module: pl.LightningModule,
        round_idx: int,
        clients: list[int],
        data: Any,
    ) -> None:
        """:meth:`choose` on the server from the clients' ``data`` (in one process: the server's
        data module is the clients'), :meth:`apply` it and restrict each kept client to its coreset."""
        if server.global_state:  # the current global model: the features FedHDS clusters on
            module.load_state(server.global_state)
        sel = self.choose(server, trainer, module, round_idx, list(clients))
        self.apply(server, trainer, round_idx, clients, sel, {c: len(data.client(c).full_train) for c in clients})
        for c in clients:
            data.client(c).select(self._chosen[c])

    def apply(
        self,
        server: ServerRound,
        trainer: pl.Trainer,
        round_idx: int,
        clients: list[int],
        sel: Selection,
        full: dict[int, int],
        from_replies: bool = False,
    ) -> None:
        """Take ``sel`` as the round's coresets: drop clients without one (or give them their
        fallback sample while below ``min_clients``), check sizes, record and log the round.

        Edits ``clients`` in place; the kept clients' sorted indices are in :attr:`_chosen`
        (sent to each client by :meth:`client_instruction` after a pre-round exchange).

        Args:
            full: Client -> size of its whole local training set (``len(full_train)``).
            from_replies: ``sel`` was decided from the clients' replies (FedHDS): each kept client
                then gets its coreset as an instruction (:meth:`client_instruction`).
        """
        keep = [c for c in clients if sel.indices.get(c)]
        skipped = [c for c in clients if c not in keep]
        for c in skipped[: max(0, server.min_clients - len(keep))]:  # train on the fallback sample
            sel.indices[c] = [sel.fallback.get(c, 0)]
            keep.append(c)
        self._check_sizes(
            round_idx, {c: len(sel.indices[c]) for c in keep}, {c: full[c] for c in keep}, server.datamodule.batch_size
        )
        self._chosen = {c: sorted(int(i) for i in sel.indices[c]) for c in keep}
        if from_replies:
            self._exchanged = round_idx
        clients[:] = [c for c in clients if c in keep]  # the engine lays out this list next
        used = {c: len(sel.indices[c]) if c in keep else 0 for c in full}
        self._record = {
            "round": round_idx + 1,
            "sampled": list(full),
            "trained": list(clients),
            "full_sizes": full,
            "selected_sizes": used,
            "data_fraction": sum(used.values()) / max(1, sum(full.values())),
            "seconds": {c: dict(sel.seconds.get(c, {})) for c in full},
            "server_seconds": sel.server_seconds,
            "up_bytes": sel.up_bytes,
            "down_bytes": sel.down_bytes,
            **sel.info,
        }
        self._log(
            trainer,
            round_idx,
            {
                "selection/data_fraction": self._record["data_fraction"],
                "selection/server_seconds": sel.server_seconds,
                "comm/selection_up_bytes": float(sel.up_bytes),
                "comm/selection_down_bytes": float(sel.down_bytes),
                **{f"selection/{k}": float(v) for k, v in sel.info.items() if isinstance(v, (int, float))},
            },
        )
        if self.figures and sel.points:
            from lightning_fed.selection.figures import log_selection_figure

            log_selection_figure(
                trainer, round_idx, sel.points, {c: sel.indices.get(c, []) for c in sel.points}, type(self).__name__
            )

    def _check_sizes(self, round_idx: int, selected: dict[int, int], full: dict[int, int], batch_size: int) -> None:
        """Warn or stop (``on_small_selection``) if a coreset is smaller than one local batch."""
        small = {c: n for c, n in selected.items() if n < min(batch_size, full[c])}
        if not small or self.on_small_selection == "ignore":
            return
        sizes = ", ".join(f"client {c}: {n} of {full[c]}" for c, n in small.items())
        message = (
            f"round {round_idx + 1}: {type(self).__name__} left {len(small)} client(s) fewer examples than one batch"
            f" (data.batch_size={batch_size}): {sizes}; they train on these few examples only"
        )
        if self.on_small_selection == "error":
            raise ValueError(message + " (on_small_selection='error'; set it to 'warn' to go on)")
        from lightning.pytorch.utilities import rank_zero_warn

        rank_zero_warn(message)

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        """The client's coreset (``indices`` into its ``full_train``) when the clients' replies chose it."""
        if self._exchanged != round_idx or client_id not in self._chosen:
            return {}  # chosen on the server, which already restricted the client's data
        return {"indices": list(self._chosen[client_id])}

    def prepare_client(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, instruction: Payload
    ) -> None:
        """Restrict the client to its coreset (``ClientData.select``) before its batches are laid out."""
        if "indices" not in instruction:
            return
        indices, n = [int(i) for i in instruction["indices"]], len(data.full_train)
        if not indices or not all(0 <= i < n for i in indices):
            raise ValueError(
                f"client {client_id}: {type(self).__name__} instruction 'indices' must be non-empty and in [0, {n}),"
                f" got {indices[:10]}"
            )
        data.select(sorted(indices))

    def on_client_start(
        self, turn: ClientTurn, trainer: pl.Trainer, module: pl.LightningModule, client_id: int
    ) -> None:
        self._t0[client_id] = time.perf_counter()

    def on_client_end(
        self, turn: ClientTurn, trainer: pl.Trainer, module: pl.LightningModule, update: ClientUpdate
    ) -> None:
        cid = update.client_id
        if self._record is not None and cid in self._t0:
            self._record["seconds"].setdefault(cid, {})["train"] = time.perf_counter() - self._t0.pop(cid)

    def after_aggregate(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int
    ) -> None:
        record, self._record = self._record, None
        if record is None or record["round"] != round_idx + 1:
            return
        trained = [c for c in record["trained"] if "train" in record["seconds"].get(c, {})]
        totals = {c: sum(record["seconds"][c].values()) for c in trained}
        chosen = {c: sum(record["seconds"][c].get(p, 0.0) for p in PHASES) for c in trained}
        record["client_seconds"] = {c: totals[c] for c in trained}
        record["mean_client_seconds"] = float(np.mean(list(totals.values()))) if totals else 0.0
        record["selection_share"] = (
            sum(chosen.values()) / sum(totals.values()) if totals and sum(totals.values()) > 0 else 0.0
        )
        means = {
            p: float(np.mean([record["seconds"][c].get(p, 0.0) for c in trained])) if trained else 0.0
            for p in (*PHASES, "train")
        }
        record["mean_phase_seconds"] = means
        self.history.append(record)
        self._log(
            context,
            round_idx,
            {
                "selection/client_seconds": record["mean_client_seconds"],
                "selection/selection_share": record["selection_share"],
                **{f"selection/{p}_seconds": v for p, v in means.items()},
            },
        )
        self._write(context)

    # ------------------------------------------------------------------------ output
    def summary(self) -> dict[str, Any]:
        """Totals over the rounds so far: data used, seconds per phase, bytes."""
        full = sum(sum(r["full_sizes"].values()) for r in self.history)
        used = sum(sum(r["selected_sizes"].values()) for r in self.history)
        phases = {
            p: sum(s.get(p, 0.0) for r in self.history for s in r["seconds"].values()) for p in (*PHASES, "train")
        }
        client = sum(phases.values())
        return {
            "method": type(self).__name__,
            "rounds": len(self.history),
            "data_fraction": used / full if full else 0.0,
            "client_seconds": client,
            "client_seconds_by_phase": phases,
            "selection_share": (client - phases["train"]) / client if client else 0.0,
            "server_seconds": sum(r["server_seconds"] for r in self.history),
            "selection_up_bytes": sum(r["up_bytes"] for r in self.history),
            "selection_down_bytes": sum(r["down_bytes"] for r in self.history),
        }

    @staticmethod
    def _log(trainer: pl.Trainer, round_idx: int, scalars: dict[str, float]) -> None:
        if trainer is not None and trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=round_idx + 1)

    def _write(self, trainer: pl.Trainer) -> None:
        from lightning_fed.federation.report import RoundReport

        if trainer is None or not trainer.is_global_zero:
            return
        path = RoundReport.output_dir(trainer) / "selection.json"
        path.write_text(json.dumps({"summary": self.summary(), "rounds": self.history}, indent=1, default=_jsonable))

    # ------------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = list(state.get("history", []))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
