"""FedBiscuit's client grouping step (Wu et al., 2024, arXiv:2407.03038, Sec. 3.2, Step 2.1).

Every ``tau`` rounds after the warm-up, all U selectors are broadcast to every client; each
client reports the mean selector loss of each on its local validation split; the server
assigns clients to selectors with
:func:`~lightning_fed.strategies.fedbiscuit.balanced_assignment`.

The step is the hook's pre-round exchange, so it runs in-process and under Flower alike: on a
grouping round :meth:`ClientGrouping.client_queries` asks *every* client (sampled or not) with
the global state (all U selectors), :meth:`~ClientGrouping.answer_query` computes one client's
U losses and its number of training examples, :meth:`~ClientGrouping.on_replies` assigns. Each
client learns which selector to train from its instruction (``{"selector": u}``), never from the
server's strategy object.

In a differentially private run (client-level ``ClientLevelDP`` or example-level DP-SGD: the
server's ``privacy.enabled``) the loss row is a Gaussian mechanism on the client
(:mod:`lightning_fed.privacy.selector_noise`): the server's query carries the clip bound ``L``
and the noise std ``sigma = z_s * L * sqrt(U)``; the client clips each loss to ``[0, L]`` and
adds ``N(0, sigma^2)`` per coordinate, and buckets its number of training examples
(:func:`~lightning_fed.federation.report.bucket_count`). The hook counts the noised groupings
(:attr:`ClientGrouping.noised_groupings`, kept in its state) for the run's accountant
(``selector_losses`` channel of the privacy report). The grouping records hold the rows the
server received: noised ones in a private run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lightning_fed.federation.hooks import WITH_GLOBAL_STATE, Capability, Payload, Replies, RoundHook
from lightning_fed.federation.report import bucket_count
from lightning_fed.hook_rules import CLIENT_GROUPING
from lightning_fed.privacy.selector_noise import (
    DEFAULT_CLIP,
    DEFAULT_NOISE_MULTIPLIER,
    noised_selector_losses,
    selector_noise_seed,
    selector_noise_std,
)
from lightning_fed.state import state_nbytes
from lightning_fed.strategies.fedbiscuit import FedBiscuit, balanced_assignment
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.server_round import ServerRound


@torch.no_grad()
def client_selector_losses(module: Any, data: Any, num_selectors: int, metric: str = "loss") -> Tensor:
    """``(U,)``: mean ``metric`` of every selector on one client's validation split (``data``)."""
    was_training = module.training
    module.eval()
    out = torch.zeros(num_selectors)
    try:
        for u in range(num_selectors):
            module.use_selector(u)
            total, count = 0.0, 0
            for batch in data.val_dataloader():
                batch = {k: v.to(module.device) for k, v in batch.items()}
                loss = module.pair_metrics(batch)[metric]
                total, count = total + float(loss.sum()), count + loss.numel()
            out[u] = total / max(count, 1)
    finally:
        module.train(was_training)
    return out


def selector_losses(module: Any, datamodule: Any, num_selectors: int, metric: str = "loss") -> Tensor:
    """``(M, U)``: :func:`client_selector_losses` of every client of ``datamodule``."""
    return torch.stack(
        [
            client_selector_losses(module, datamodule.client(c), num_selectors, metric)
            for c in range(datamodule.num_clients)
        ]
    )


class ClientGrouping(RoundHook):
    """Drives a :class:`~lightning_fed.strategies.FedBiscuit` run: schedule, grouping, selectors.

    Each grouping is recorded (round, assignment, loss matrix, broadcast bytes, clients that did
    not answer) in ``summary.json`` under ``hooks.ClientGrouping.groupings`` and as a TensorBoard
    image (clients x selectors) when a logger is TensorBoard's. A client that does not answer a
    grouping query is placed by the mean loss row of those that did (and keeps its last known
    size), with a warning.

    Args:
        clip_loss: ``L``: in a private run each selector loss is clipped to ``[0, L]`` before the
            noise (default 1.0: the selector's cross-entropy is ``ln 2 = 0.69`` at chance).
        noise_multiplier: ``z_s`` of the selector losses in a private run; ``None`` (the
            default): the run's client-level ``z`` (``ClientLevelDP``'s, after calibration), or
            1.0 when only DP-SGD is on. Unused without DP.
    """

    def __init__(self, clip_loss: float = DEFAULT_CLIP, noise_multiplier: float | None = None) -> None:
        check(CLIENT_GROUPING, clip_loss=clip_loss, noise_multiplier=noise_multiplier)  # lightning_fed/hook_rules.py
        self.clip_loss = float(clip_loss)
        self.noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)
        self.groupings: list[dict[str, Any]] = []
        #: Grouping rounds whose queries asked for noised losses (every client answers: rate 1).
        self.noised_groupings = 0
        self._noise_std: float | None = None  # of the current grouping round's query

    def check_run(self, run: Any) -> None:
        """The strategy is FedBiscuit (behind client-level DP, its ``wrapped``), found before the model loads."""
        self._strategy(run)

    @staticmethod
    def _strategy(server: ServerRound) -> FedBiscuit:
        # Behind client-level DP (lightning_fed.privacy.ClientLevelDP) the FedBiscuit is its `wrapped`.
        strategy = getattr(server.strategy, "wrapped", server.strategy)
        if not isinstance(strategy, FedBiscuit):
            raise TypeError(
                f"ClientGrouping needs federation.strategy=FedBiscuit, got {type(server.strategy).__name__}"
            )
        return strategy

    def selector_mechanism(self, privacy: Any) -> dict[str, float] | None:
        """``{"noise_multiplier": z_s, "clip": L}`` of the selector losses in a run whose privacy
        (the server's ``privacy``, a :class:`~lightning_fed.privacy.run.RunPrivacy`) is on; ``None`` without DP."""
        if privacy is None or not privacy.enabled:
            return None
        z = self.noise_multiplier
        if z is None:
            z = privacy.client_noise_multiplier
        return {"noise_multiplier": DEFAULT_NOISE_MULTIPLIER if z is None else float(z), "clip": self.clip_loss}

    def privacy_channels(self, privacy: Any) -> dict[str, Any]:
        """The selector losses (every client's, each grouping round); noised in a private run:
        the mechanism of :meth:`selector_mechanism` over :attr:`noised_groupings` releases."""
        out: dict[str, Any] = {"selector_losses": True}
        mechanism = self.selector_mechanism(privacy)
        if mechanism is not None:
            out["mechanism"] = {**mechanism, "releases": self.noised_groupings}
        return out

    # ------------------------------------------------------ the pre-round exchange
    def client_queries(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> dict[int, Payload]:
        """On a grouping round, every client with all U selectors (the global state); else none.

        In a private run the query carries the mechanism (``private``, ``clip``, ``noise_std``, and
        ``noise_seed`` when the run's ``ClientLevelDP`` was given a seed) and the grouping is counted."""
        strategy = self._strategy(server)
        strategy.start_round(round_idx)
        self._noise_std = None
        if not strategy.is_grouping_round(round_idx):
            return {}
        query: Payload = {WITH_GLOBAL_STATE: True, "num_selectors": strategy.num_selectors}
        privacy = getattr(server, "privacy", None)
        mechanism = self.selector_mechanism(privacy)
        if mechanism is not None:
            self._noise_std = selector_noise_std(mechanism["noise_multiplier"], self.clip_loss, strategy.num_selectors)
            query.update(private=True, clip=self.clip_loss, noise_std=self._noise_std)
            if privacy.noise_seed is not None:
                query["noise_seed"] = int(privacy.noise_seed)
            self.noised_groupings += 1  # every client is asked: one release per client, rate 1
        return {c: dict(query) for c in range(strategy.num_clients)}

    def answer_query(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, query: Payload
    ) -> Payload:
        """The client's validation loss under each selector, and its number of training examples;
        in a private run (``query["private"]``) clipped and noised, and the count bucketed."""
        losses = client_selector_losses(module, data, int(query["num_selectors"]))
        num_examples = len(data.train_set)
        if query.get("private"):
            seed = selector_noise_seed(query.get("noise_seed"), round_idx, client_id)
            losses = noised_selector_losses(losses, float(query["clip"]), float(query["noise_std"]), seed)
            num_examples = bucket_count(num_examples) if num_examples >= 1 else num_examples
        return {"losses": losses, "num_examples": num_examples}

    def on_replies(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, replies: Replies
    ) -> None:
        """Balanced min-loss assignment (Step 2.1) from the clients' loss rows."""
        strategy, round_idx = self._strategy(server), replies.round_idx
        if not strategy.is_grouping_round(round_idx):
            return
        m, u = strategy.num_clients, strategy.num_selectors
        rows, sizes = {}, {}
        for c in range(m):
            try:
                rows[c], sizes[c] = self._checked_reply(replies.answers[c], u)
            except (KeyError, ValueError, TypeError) as err:
                reason = "no reply" if c not in replies.answers else str(err)
                rank_zero_warn(f"round {round_idx + 1}: client {c} is grouped without its losses: {reason}")
        missing = [c for c in range(m) if c not in rows]
        if not rows:
            rank_zero_warn(f"round {round_idx + 1}: no client reported its selector losses; the grouping is unchanged")
            return
        mean = torch.stack(list(rows.values())).mean(0)
        losses = torch.stack([rows.get(c, mean) for c in range(m)])
        old = strategy.client_sizes or []
        fill = round(sum(sizes.values()) / len(sizes))
        strategy.client_sizes = [sizes.get(c, old[c] if c < len(old) else fill) for c in range(m)]
        strategy.set_assignment(balanced_assignment(losses))
        record = {
            "round": round_idx + 1,
            "assignment": list(strategy.assignment),
            "losses": losses.tolist(),  # as received: noised in a private run
            "broadcast_bytes": m * state_nbytes(server.global_state),  # every selector to every client
            "missing": missing,
        }
        if self._noise_std is not None:
            record["noise_std"] = self._noise_std
        self.groupings.append(record)
        self._log_image(context, strategy, round_idx)

    @staticmethod
    def _checked_reply(reply: Payload, num_selectors: int) -> tuple[Tensor, int]:
        losses, n = reply["losses"], reply["num_examples"]
        if not torch.is_tensor(losses) or tuple(losses.shape) != (num_selectors,) or not losses.is_floating_point():
            raise ValueError(f"'losses' must be {num_selectors} floats, got {getattr(losses, 'shape', losses)!r}")
        if not torch.isfinite(losses).all():
            raise ValueError("'losses' must be finite")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"'num_examples' must be an integer >= 0, got {n!r}")
        return losses.float(), n

    # ------------------------------------------------------------------ the round
    def on_round_start(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        strategy = self._strategy(server)
        strategy.start_round(round_idx)
        # For evaluation: each client is judged by its own selector.
        module.client_selectors = {c: strategy.selector_of(c) for c in range(strategy.num_clients)}

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        """The selector ``client_id`` trains this round (its cluster's, or the warm-up's)."""
        return {"selector": self._strategy(server).selector_of(client_id)}

    def prepare_client(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, instruction: Payload
    ) -> None:
        if "selector" not in instruction:
            return
        selector = int(instruction["selector"])
        module.use_selector(selector)  # raises if not in [0, U)
        module.client_selectors = {**module.client_selectors, client_id: selector}

    #: Its per-client act (the client's selector) is captured per client by batched turns
    #: (each client's active adapter: :class:`~lightning_fed.batching.multi_lora.StackedLora`).
    capabilities = frozenset({Capability.BATCH_SAFE})

    def on_client_start(self, turn: Any, trainer: Any, module: pl.LightningModule, client_id: int) -> None:
        # In process every client of the round is prepared before the first turn and all share
        # one module, which was left on the last client's selector: the turn's own one again.
        selector = getattr(module, "client_selectors", {}).get(client_id)
        if selector is not None:
            module.use_selector(int(selector))

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"groupings": self.groupings}
        if self.noised_groupings:
            out["noised_groupings"] = self.noised_groupings
        return out

    @staticmethod
    def _log_image(trainer: Any, strategy: FedBiscuit, round_idx: int) -> None:
        for logger in getattr(trainer, "loggers", None) or []:
            if isinstance(logger, TensorBoardLogger):
                onehot = torch.zeros(1, strategy.num_clients, strategy.num_selectors)
                onehot[0, torch.arange(strategy.num_clients), torch.tensor(strategy.assignment)] = 1.0
                logger.experiment.add_image(
                    "fedbiscuit/assignment", onehot, global_step=round_idx + 1, dataformats="CHW"
                )

    def state_dict(self) -> dict[str, Any]:
        return {"groupings": self.groupings, "noised_groupings": self.noised_groupings}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groupings = list(state.get("groupings", []))
        self.noised_groupings = int(state.get("noised_groupings", 0))
