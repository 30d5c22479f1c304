"""The privacy of one run: planned before training, accounted every round, reported at the end.

:class:`RunPrivacy` is what both transports' :class:`~lightning_fed.federation.ServerRound`
holds as ``server.privacy`` (the in-process loop and the Flower server build the same one from
the ``federation.privacy`` config). It is the one place where the settings of the mechanisms
meet the settings of the federation:

* **one source of truth.** ``m`` (the expected number of clients per round) is the sampler's:
  ``clients_per_round`` for fixed-size sampling, ``q * N`` for Poisson sampling; it is given
  to :class:`~lightning_fed.privacy.ClientLevelDP`, and a different ``expected_clients`` written
  on the wrapper is an error. The noise multiplier ``z`` is given once: in ``federation.privacy``
  (``noise_multiplier``, or calibrated from ``target_epsilon``), or, without a ``privacy``
  section, on the wrapper (then only reported, with ``delta = 1 / N^1.1``);
* **before training** (:meth:`RunPrivacy.plan`, from ``ServerRound.bind``): ``z`` is calibrated
  for the planned rounds; a budget no ``z`` can meet, or one that a given ``z`` spends in the
  first round, is a one-line ``ValueError`` naming the options (the CLI: exit 2, nothing
  written);
* **every round** (:meth:`RunPrivacy.end_round`): the accountant steps (a Poisson round with
  no client too), ``privacy/epsilon`` is logged; the server stops the run (exit 0,
  ``summary.json`` ``privacy.stopped``) when the next round would exceed ``target_epsilon``;
* **in the checkpoint** (:meth:`RunPrivacy.state_dict`): the rounds accounted and ``z``, so a
  resumed run continues with the same noise and the same epsilon;
* **the report** (:meth:`RunPrivacy.section`): :class:`~lightning_fed.privacy.PrivacyReport`
  of every channel. With DP on (client-level or example-level) the clients bucket their
  example counts (:func:`client_counts_bucketed`) and the server's reports withhold per-client
  metrics (:attr:`~lightning_fed.federation.RoundReport.private`).
"""

from __future__ import annotations

import math
from typing import Any

from lightning_fed.federation.server_round import ServerRound
from lightning_fed.privacy.accountant import PrivacyAccountant, accounted_sample_rate
from lightning_fed.privacy.client_dp import ClientLevelDP, client_level_dp
from lightning_fed.privacy.config import PrivacyConfig
from lightning_fed.privacy.dp_sgd import ExampleLevelDP, example_level_accountant
from lightning_fed.privacy.report import PrivacyReport
from lightning_fed.round_hooks.client_grouping import ClientGrouping
from lightning_fed.selection.hds import HierarchicalDataSelection


def privacy_enabled(strategy: Any, module: Any) -> bool:
    """Whether a run of ``strategy`` and ``module`` runs a DP mechanism (client- or example-level)."""
    return client_level_dp(strategy) is not None or isinstance(module, ExampleLevelDP)


def client_counts_bucketed(strategy: Any, module: Any) -> bool:
    """Whether a client reports its example count bucketed (:func:`~lightning_fed.privacy.bucket_count`):
    whenever DP is on, in both transports (the count is FedAvg's weight: bucketed, a weight too)."""
    return privacy_enabled(strategy, module)


class RunPrivacy:
    """The run's privacy plan, accountants and report (see the module docstring).

    Args:
        config: The ``federation.privacy`` section (``None``: none; DP may still be on through
            the strategy or the module, then only reported).
        local_steps: ``federation.local_steps`` (example-level accounting).
        local_epochs: ``federation.local_epochs`` (example-level accounting).
    """

    def __init__(
        self, config: PrivacyConfig | None = None, local_steps: int | None = None, local_epochs: int | None = None
    ) -> None:
        self.config = config
        self.local_steps, self.local_epochs = local_steps, local_epochs
        self.enabled = False
        self.client_dp: PrivacyAccountant | None = None
        self.example_dp: PrivacyAccountant | None = None
        self.example_steps_per_round = 1
        self.rounds_accounted = 0
        self.stop: int | None = None
        self._server: ServerRound | None = None
        self._personal = False
        self._dp_sgd: Any = None
        self._delta = 0.0
        self._reported: tuple[int, int] | None = None  # (smallest, largest) count reported so far

    # ------------------------------------------------------------------ before training
    def plan(self, server: ServerRound, module: Any) -> None:
        """Check the settings, give ``ClientLevelDP`` its ``m`` and ``z``, build the accountants.

        Raises:
            ValueError: One line naming the options to change.
        """
        self._server = server
        strategy, n = server.strategy, server.num_clients
        dp = client_level_dp(strategy)
        if self.config is not None and dp is None:
            raise ValueError(
                "federation.privacy sets a client-level budget: it needs federation.strategy ="
                f" lightning_fed.privacy.ClientLevelDP (around the server strategy), got {type(strategy).__name__}"
            )
        self.enabled = privacy_enabled(strategy, module)
        self._personal = bool(module is not None and module.personal_parameters())
        delta = self.config.delta_for(n) if self.config is not None else 1.0 / float(n) ** 1.1
        if dp is not None:
            self.client_dp = self._plan_client_level(dp, server, delta)
        if isinstance(module, ExampleLevelDP):
            self._dp_sgd, self._delta = module.dp_sgd, delta
            self.example_dp = self._plan_example_level(module, server, delta)

    def _plan_client_level(self, dp: ClientLevelDP, server: ServerRound, delta: float) -> PrivacyAccountant:
        m = server.expected_clients
        if dp.expected_clients is not None and not math.isclose(dp.expected_clients, m, rel_tol=1e-9):
            sampler = "clients_per_round" if server.sampling == "fixed_size" else "sampling_rate * data.num_clients"
            raise ValueError(
                f"federation.strategy.expected_clients={dp.expected_clients:g} disagrees with the sampler's"
                f" expected clients per round {m:g} (federation.{sampler}): leave expected_clients out"
            )
        dp.set_expected_clients(m)
        n, rate = server.num_clients, server.sampling_rate or 0.0
        q = accounted_sample_rate(server.sampling, n, server.clients_per_round, rate)
        if self.config is None:
            if dp.noise_multiplier is None:
                raise ValueError(
                    "ClientLevelDP has no noise multiplier: give federation.privacy.noise_multiplier"
                    " (or federation.privacy.target_epsilon to calibrate it)"
                )
            return PrivacyAccountant(dp.noise_multiplier, q, delta)
        if dp.noise_multiplier is not None:
            raise ValueError(
                f"the noise multiplier is given twice: federation.strategy.noise_multiplier={dp.noise_multiplier:g}"
                " and federation.privacy; give it only in federation.privacy (noise_multiplier or target_epsilon)"
            )
        acc = self.config.plan(n, server.rounds, server.sampling, server.clients_per_round, rate)
        if acc.would_exceed(0):
            raise ValueError(
                f"federation.privacy.target_epsilon={acc.target_epsilon:g} is spent by the first round at"
                f" federation.privacy.noise_multiplier={acc.noise_multiplier:g} (epsilon {acc.epsilon(1):.3g}"
                f" per round, delta {acc.delta:.3g}): raise target_epsilon or noise_multiplier"
            )
        dp.set_noise_multiplier(acc.noise_multiplier)
        return acc

    def _plan_example_level(
        self, module: ExampleLevelDP, server: ServerRound, delta: float
    ) -> PrivacyAccountant | None:
        """The most exposed client's DP-SGD accountant: the smallest client (rate ``B / |D_k|``),
        with the most local steps of a round. ``None`` where the server does not know the
        clients' sizes (a Flower server never loads their data)."""
        try:
            sizes = list(server.datamodule.client_sizes)
        except (AttributeError, RuntimeError, TypeError):  # no data module, or one not set up
            sizes = []
        return self._example_accountant(min(sizes), max(sizes)) if sizes else None

    def _example_accountant(self, smallest: int, largest: int) -> PrivacyAccountant:
        batch = int(self._server.datamodule.batch_size)
        if self.local_steps is not None:
            self.example_steps_per_round = int(self.local_steps)
        else:
            self.example_steps_per_round = int(self.local_epochs or 1) * math.ceil(largest / batch)
        return example_level_accountant(self._dp_sgd, batch, smallest, self._delta)

    def _observe(self, updates: Any) -> None:
        """Where the server does not know the clients' sizes (Flower), the example-level
        accountant uses the counts the clients report: bucketed ``b <= n < 2 b``, so the rate
        ``B / b`` and ``2 b - 1`` examples for ``local_epochs`` bound every client that has trained
        so far (clients that never trained spent nothing)."""
        counts = [int(u.num_examples) for u in updates]
        if not counts:
            return
        low, high = min(counts), 2 * max(counts) - 1
        if self._reported is not None:
            low, high = min(low, self._reported[0]), max(high, self._reported[1])
        self._reported = (low, high)
        self.example_dp = self._example_accountant(low, high)

    # ------------------------------------------------------------------ every round
    def end_round(self, round_idx: int, updates: Any = ()) -> dict[str, float]:
        """Account round ``round_idx`` (0-based) whose admitted ``updates`` are given;
        ``privacy/epsilon`` (client level) and ``privacy/example_epsilon`` after it."""
        self.rounds_accounted = round_idx + 1
        if self._dp_sgd is not None and (self._reported is not None or self.example_dp is None):
            self._observe(updates)
        out: dict[str, float] = {}
        if self.client_dp is not None:
            self.client_dp.steps_done = self.rounds_accounted
            out["privacy/epsilon"] = self.client_dp.epsilon()
        if self.example_dp is not None:
            out["privacy/example_epsilon"] = self.example_dp.epsilon(
                self.rounds_accounted * self.example_steps_per_round
            )
        return out

    def would_exceed(self, next_round: int) -> bool:
        """Whether running round ``next_round`` (0-based) would spend more than ``target_epsilon``."""
        return self.client_dp is not None and self.client_dp.would_exceed(next_round)

    def stopped(self, next_round: int) -> None:
        self.stop = int(next_round)

    # ------------------------------------------------------------------ the report
    def report(self) -> PrivacyReport:
        """The channels of this run (:class:`~lightning_fed.privacy.PrivacyReport`)."""
        hooks = self._server.hooks if self._server is not None else []
        centroids = None
        for hook in hooks:
            if isinstance(hook, HierarchicalDataSelection):
                centroids = hook.accountant.report() if hook.accountant is not None else {}
        report = PrivacyReport(
            client_dp=self.client_dp,
            example_dp=self.example_dp,
            local_steps_per_round=self.example_steps_per_round,
            personal_parameters=self._personal,
            centroids=centroids,
            selector_losses=any(isinstance(h, ClientGrouping) for h in hooks),
            counts_bucketed=self.enabled,
            metrics_withheld=self.enabled,
            secure_sum=self._server is not None and self._server.strategy.secure_sum,
        )
        if self.stop is not None:  # reports number rounds from 1
            report.stopped(self.stop + 1)
        return report

    def section(self, rounds: int) -> dict[str, Any]:
        """``summary.json``'s ``privacy`` section after ``rounds`` rounds."""
        return self.report().section(rounds)

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """The rounds accounted and the noise multiplier in use (a resume keeps both)."""
        state: dict[str, Any] = {"rounds_accounted": self.rounds_accounted, "stop": self.stop}
        if self._reported is not None:
            state["reported_counts"] = list(self._reported)
        if self.client_dp is not None:
            state["noise_multiplier"] = self.client_dp.noise_multiplier
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_accounted = int(state.get("rounds_accounted", self.rounds_accounted))
        self.stop = state.get("stop", self.stop)
        if state.get("reported_counts") and self._dp_sgd is not None:
            low, high = state["reported_counts"]
            self._reported = (int(low), int(high))
            self.example_dp = self._example_accountant(*self._reported)
        if self.client_dp is not None:
            self.client_dp.steps_done = self.rounds_accounted
            z = state.get("noise_multiplier")
            if z is not None:  # planned for the run's rounds when it started: keep that z
                self.client_dp.noise_multiplier = float(z)
                dp = client_level_dp(self._server.strategy) if self._server is not None else None
                if dp is not None:
                    dp.set_noise_multiplier(float(z))
