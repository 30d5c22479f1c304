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
  written). DP-SGD's plan (:class:`~lightning_fed.privacy.example_budget.ExampleBudget`) goes to
  the module (:meth:`RunPrivacy.plan_example_budget`; a Flower client gets its own from
  ``deploy/apps.py``), and with ``model.dp_sgd.target_epsilon`` every client size of the
  federation is calibrated here, so an impossible budget fails the same way;
* **every round** (:meth:`RunPrivacy.end_round`): the accountant steps (a Poisson round with
  no client too), DP-SGD is accounted per client (the clients the round sampled, at their
  reported bucketed counts), ``privacy/epsilon`` and ``privacy/example_epsilon`` (the largest
  client's) are logged; the server stops the run (exit 0, ``summary.json`` ``privacy.stopped``; a resume
  stopped before its first round says so on stderr only and leaves the earlier run's files)
  when the next round would exceed ``federation.privacy.target_epsilon`` or, for one of the
  clients it samples, ``model.dp_sgd.target_epsilon`` (:meth:`RunPrivacy.would_exceed`);
* **in the checkpoint** (:meth:`RunPrivacy.state_dict`): the rounds accounted, ``z``, DP-SGD's
  per-client ledger and planned rounds, so a resumed run continues with the same noise and the
  same epsilon (and stops before its first round if that would exceed a budget);
* **the report** (:meth:`RunPrivacy.section`): :class:`~lightning_fed.privacy.PrivacyReport`
  of every channel. With DP on (client-level or example-level) the clients bucket their
  example counts and send no training loss (:class:`~lightning_fed.federation.ClientTurn`'s
  ``private``, set from :func:`privacy_enabled` in both transports), noise FedBiscuit's selector losses
  (:mod:`~lightning_fed.privacy.selector_noise`, accounted here at rate 1 per grouping and
  composed with the update channel into ``epsilon.client_all_channels``), and the server's reports withhold per-client
  metrics (:attr:`~lightning_fed.federation.RoundReport.private`) and, unless
  ``federation.privacy.report_validation``, every validation figure; the module's own training
  logs (``self.log`` while training) are switched off (``FederatedModule.training_logs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_fed.federation.secret_seed import SecretSeed
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.privacy.accountant import (
    PrivacyAccountant,
    composed_epsilon,
)
from lightning_fed.privacy.client_dp import ClientLevelDP, client_level_dp
from lightning_fed.privacy.client_level_plan import plan_client_level
from lightning_fed.privacy.config import PrivacyConfig, default_delta
from lightning_fed.privacy.dp_sgd import DPSGDSettings, ExampleLevelDP
from lightning_fed.privacy.example_budget import ExampleBudget
from lightning_fed.privacy.example_ledger import ExampleLedger
from lightning_fed.privacy.report import PrivacyReport
from lightning_fed.privacy.secret import RunKey, RunSecret, seeded_secret
from lightning_fed.run_config import FederationConfig


def privacy_enabled(strategy: Any, module: Any) -> bool:
    """Whether a run of ``strategy`` and ``module`` runs a DP mechanism (client- or example-level)."""
    return client_level_dp(strategy) is not None or isinstance(module, ExampleLevelDP)


class RunPrivacy:
    """The run's privacy plan, accountants and report (see the module docstring).

    Args:
        config: The ``federation.privacy`` section (``None``: none; DP may still be on through
            the strategy or the module, then only reported).
        federation: The run (its ``local_steps``/``local_epochs``: example-level accounting; read, not copied).
    """

    def __init__(self, config: PrivacyConfig | None = None, federation: FederationConfig | None = None) -> None:
        self.config = config
        # Without a run: one pass per round (what example-level accounting assumed without local steps).
        self.federation = federation if federation is not None else FederationConfig(local_steps=None, local_epochs=1)
        self.enabled = False
        self.client_dp: PrivacyAccountant | None = None
        self.example_budget: ExampleBudget | None = None
        self.rounds_accounted = 0
        self.stop: int | None = None
        #: The budget the next round would exceed (the option's name), set by :meth:`would_exceed`.
        self.exceeded: str | None = None
        self._server: ServerRound | None = None
        self._personal = False
        #: Whether this run trains in process: its run folder then holds the clients' own states.
        self._in_process = False
        #: DP-SGD's per-client ledger (bucketed example counts, rounds trained).
        self.ledger = ExampleLedger()
        self._stop_option = "federation.privacy.target_epsilon"
        #: ``delta`` of the run's guarantees (``federation.privacy.delta``, or ``1 / N^1.1``), set by :meth:`plan`.
        self.delta: float | None = None
        #: The run's secret randomness and its key file (:mod:`~lightning_fed.privacy.secret`), drawn by
        #: :meth:`plan` in a private run.
        self.key: RunKey | None = None
        self._module: Any = None
        #: The rounds a calibrated ``z`` was planned for (``None``: ``z`` given, not calibrated).
        self.planned_rounds: int | None = None

    @property
    def mechanism(self) -> str:
        """The accountant (``rdp`` or ``prv``: ``federation.privacy.accountant``)."""
        return self.config.accountant if self.config is not None else "rdp"

    @property
    def client_noise_multiplier(self) -> float | None:
        """The client-level ``z`` in use (after calibration); ``None`` without ``ClientLevelDP``."""
        return self.client_dp.noise_multiplier if self.client_dp is not None else None

    @property
    def noise_seed(self) -> int | None:
        """The seed other client-level noise of the run derives from: ``ClientLevelDP``'s when it
        was given one (tests); ``None``: each client draws a secret seed from the OS."""
        dp = client_level_dp(self._server.strategy) if self._server is not None else None
        return dp.seed if dp is not None and dp.seed_given else None

    @property
    def sampling_seed(self) -> SecretSeed | None:
        """The seed of client sampling in a private run: from the run's secret, never the config's
        ``seed`` (anyone with the config could recompute a public sample, and Poisson amplification
        would not hold against them); ``None`` without DP (the server samples from ``seed``)."""
        return self.secret.seed("client sampling") if self.secret is not None else None

    @property
    def secret(self) -> RunSecret | None:
        """The run's secret randomness; ``None`` in a run that is not private."""
        return self.key.secret if self.key is not None else None

    @property
    def report_validation(self) -> bool:
        """Whether a private run reports its validation means (``federation.privacy.report_validation``)."""
        return self.config is not None and self.config.report_validation

    # ------------------------------------------------------------------ before training
    def plan(self, server: ServerRound, module: Any) -> None:
        """Check the settings, give ``ClientLevelDP`` its ``m`` and ``z``, build the accountants.

        Raises:
            ValueError: One line naming the options to change.
        """
        self._server = server
        strategy, n = server.strategy, server.num_clients
        dp = client_level_dp(strategy)
        client_level = self.config is not None and self.config.client_level
        if client_level and dp is None:
            from lightning_fed.private_run_rules import needs_client_dp_line

            raise ValueError(needs_client_dp_line(type(strategy).__name__))
        self.enabled = privacy_enabled(strategy, module)
        self._module = module
        if self.enabled:
            given = self._given_seed(dp, module)
            self.key = RunKey(RunSecret.fresh()) if given is None else RunKey(seeded_secret(given), seeded=True)
            self._apply_secret()
        if module is not None and hasattr(module, "training_logs"):  # a client's training loss goes nowhere
            module.training_logs = not self.enabled
        self._personal = bool(module is not None and module.personal_parameters())
        delta = self.config.delta_for(n) if self.config is not None else default_delta(n)
        self.delta = delta
        if dp is not None:
            self.client_dp = plan_client_level(dp, server, self.config, delta)
            if self.config is not None and self.config.client_level and self.config.noise_multiplier is None:
                self.planned_rounds = int(server.rounds)  # z calibrated for these rounds: a resume keeps both
        if isinstance(module, ExampleLevelDP):
            batch = int(server.datamodule.batch_size)
            self.example_budget = self.plan_example_budget(module, n, batch, server.rounds)
            try:
                sizes = list(server.datamodule.client_sizes)
            except (AttributeError, RuntimeError, TypeError):  # a Flower server never loads the clients' data
                sizes = []
            self.example_budget.calibrate(sizes)  # an impossible budget raises here, before training

    @staticmethod
    def _given_seed(dp: ClientLevelDP | None, module: Any) -> int | None:
        """A noise seed fixed in the config (``ClientLevelDP.seed``, ``model.dp_sgd.seed``: tests only)."""
        if dp is not None and dp.seed_given:
            return dp.seed
        if isinstance(module, ExampleLevelDP) and module.dp_sgd.seed is not None:
            return int(module.dp_sgd.seed)
        return None

    def _apply_secret(self) -> None:
        """Seed the mechanisms' noise from the run's secret (unless a test fixed their seeds)."""
        dp = client_level_dp(self._server.strategy) if self._server is not None else None
        if dp is not None and not dp.seed_given:
            dp.seed = self.secret.seed("client-level noise")
        module = self._module
        if isinstance(module, ExampleLevelDP) and module.dp_sgd.seed is None:
            module.noise_seed = self.secret.seed("dp-sgd noise")

    def attach_run(self, run_dir: str | Path) -> None:
        """The run trains (in the Trainer's ``log_dir``): a private run keeps its secret in its key file
        in the key store, outside the run folder (written with the first checkpoint, mode 0600), and a
        resume reads it back (:mod:`~lightning_fed.privacy.secret`). The run folder of an in-process
        run also holds the clients' own states (``client_states/``), reported against it."""
        self._in_process = True
        if self.key is not None:
            self.key.attach()

    @property
    def key_path(self) -> Path | None:
        """The run's key file (``None``: not a private training run, or a test's seeded one)."""
        return self.key.path if self.key is not None else None

    def plan_example_budget(
        self, module: ExampleLevelDP, num_clients: int, batch_size: int, rounds: int
    ) -> ExampleBudget:
        """DP-SGD's plan (:class:`ExampleBudget`), given to ``module``: the server's in process,
        each Flower client's own (``deploy/apps.py``), so both calibrate the same ``z_k``."""
        budget = self.example_budget_of(module.dp_sgd, num_clients, batch_size, rounds)
        module.example_budget = budget
        return budget

    def example_budget_of(
        self, settings: DPSGDSettings, num_clients: int, batch_size: int, rounds: int
    ) -> ExampleBudget:
        """DP-SGD's plan of ``settings`` (``model.dp_sgd``) in this run (its ``delta`` and accountant);
        ``lightning-fed plan`` calibrates it too, with no module built."""
        delta = self.config.delta_for(num_clients) if self.config is not None else default_delta(num_clients)
        mechanism = self.config.accountant if self.config is not None else "rdp"
        return ExampleBudget(
            settings.target_epsilon,
            settings.noise_multiplier,
            delta,
            int(batch_size),
            int(rounds),
            self.federation,
            mechanism,
        )

    # ------------------------------------------------------------------ every round
    def end_round(self, round_idx: int, updates: Any = ()) -> dict[str, float]:
        """Account round ``round_idx`` (0-based) whose admitted ``updates`` are given;
        ``privacy/epsilon`` (client level; with FedBiscuit's noised selector losses also
        ``privacy/epsilon_all_channels``: the update and the selector losses composed) and
        ``privacy/example_epsilon`` (the largest client's) after it.

        DP-SGD is accounted per client: every client sampled in the round trained in it (one that
        failed may have spent budget too), at the bucketed count its update reported."""
        self.rounds_accounted = round_idx + 1
        out: dict[str, float] = {}
        if self.client_dp is not None:
            self.client_dp.steps_done = self.rounds_accounted
            out["privacy/epsilon"] = self.client_dp.epsilon()
            selector = self.selector_channel()
            if selector is not None:  # the update channel and the selector losses composed
                parts = [(self.client_dp, self.rounds_accounted), selector[:2]]
                out["privacy/epsilon_all_channels"] = composed_epsilon(parts, self.client_dp.delta, self.mechanism)
        if self.example_budget is not None:
            self.ledger.record(self._server.clients if self._server is not None else [], updates)
            binding = self.binding_client()
            if binding is not None:
                out["privacy/example_epsilon"] = binding[1]
        return out

    def selector_channel(self) -> tuple[PrivacyAccountant, int, float] | None:
        """``(accountant, groupings, L)`` of FedBiscuit's noised selector losses: the Gaussian
        mechanism with ``z_s`` at rate 1 (every client answers every grouping), the groupings
        noised so far, the clip bound; ``None`` without a grouping hook or without DP. The first
        hook whose :meth:`~lightning_fed.federation.RoundHook.privacy_channels` names a
        ``mechanism`` gives it."""
        for hook in self._server.hooks if self._server is not None else []:
            mechanism = hook.privacy_channels(self).get("mechanism")
            if mechanism is not None and self.delta is not None:
                acc = PrivacyAccountant(mechanism["noise_multiplier"], 1.0, self.delta, mechanism=self.mechanism)
                return acc, int(mechanism["releases"]), mechanism["clip"]
        return None

    def would_exceed(self, next_round: int) -> bool:
        """Whether running round ``next_round`` (0-based) would spend more than a budget: the
        client-level one, or DP-SGD's for one of the clients the round samples
        (:attr:`exceeded` names which)."""
        self.exceeded = None
        if self.client_dp is not None and self.client_dp.would_exceed(next_round):
            self.exceeded = "federation.privacy.target_epsilon"
        elif self.example_budget is not None and self.example_budget.target_epsilon is not None:
            sampled = self._server.sample(next_round) if self._server is not None else []
            if self.ledger.would_exceed(self.example_budget, sampled):
                self.exceeded = "model.dp_sgd.target_epsilon"
        return self.exceeded is not None

    def binding_client(self) -> tuple[int, float] | None:
        """``(client, epsilon)`` of the client with the largest DP-SGD epsilon so far (``None``: none trained)."""
        return self.ledger.binding_client(self.example_budget) if self.example_budget is not None else None

    def stopped(self, next_round: int) -> None:
        self.stop = int(next_round)
        self._stop_option = self.exceeded or "federation.privacy.target_epsilon"

    # ------------------------------------------------------------------ the report
    def report(self) -> PrivacyReport:
        """The channels of this run (:class:`~lightning_fed.privacy.PrivacyReport`)."""
        hooks = self._server.hooks if self._server is not None else []
        channels = [hook.privacy_channels(self) for hook in hooks]  # RoundHook.privacy_channels
        centroids = None
        for channel in channels:
            if "centroids" in channel:
                centroids = channel["centroids"]
        selector_dp, groupings, clip = self.selector_channel() or (None, 0, None)
        binding = self.binding_client()
        example_dp, example_steps = None, 0
        if binding is not None:
            count = self.ledger.count_of(binding[0])
            example_dp = self.example_budget.accountant(count)
            example_steps = self.ledger.rounds_trained(binding[0]) * self.example_budget.steps_per_round(count)
        report = PrivacyReport(
            client_dp=self.client_dp,
            example_dp=example_dp,
            example_steps=example_steps,
            example_level_on=self.example_budget is not None,
            personal_parameters=self._personal,
            centroids=centroids,
            selector_losses=any(channel.get("selector_losses", False) for channel in channels),
            selector_dp=selector_dp,
            selector_groupings=groupings,
            selector_clip=clip,
            counts_bucketed=self.enabled,
            metrics_withheld=self.enabled,
            losses_sent=not self.enabled,
            validation="reported"
            if self.enabled and self.report_validation
            else "withheld"
            if self.enabled
            else "none",
            secure_sum=self._server is not None and self._server.strategy.secure_sum,
            hook_channels=[c for channel in channels for c in channel.get("channels", ())],
            client_states=self._in_process and (self._personal or self._keeps_controls()),
        )
        if self.stop is not None:  # reports number rounds from 1
            report.stopped(self.stop + 1, self._stop_option)
        return report

    def _keeps_controls(self) -> bool:
        """Whether each client keeps a control variate across rounds (SCAFFOLD under ``ClientLevelDP``)."""
        dp = client_level_dp(self._server.strategy) if self._server is not None else None
        return dp is not None and dp.has_controls

    def section(self, rounds: int) -> dict[str, Any]:
        """``summary.json``'s ``privacy`` section after ``rounds`` rounds."""
        return self.report().section(rounds)

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """The rounds accounted, the noise multiplier in use and DP-SGD's per-client ledger and
        planned rounds (a resume keeps all of them). Never the secret: a private run's first
        checkpoint writes it to the key file instead (:meth:`attach_run`)."""
        if self.key is not None:
            self.key.save()
        state: dict[str, Any] = {"rounds_accounted": self.rounds_accounted, "stop": self.stop}
        if self.example_budget is not None:
            state["example_clients"] = self.ledger.state_dict()
            state["example_planned_rounds"] = self.example_budget.rounds
        if self.client_dp is not None:
            state["noise_multiplier"] = self.client_dp.noise_multiplier
            if self.planned_rounds is not None:  # what z was calibrated for (checked on resume)
                state["planned_rounds"] = self.planned_rounds
        if self.key is not None and self.key.state_dict():
            state["run_key"] = self.key.state_dict()  # the run id and the key's fingerprint, not the key
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.key is not None and self.key.resume(state.get("run_key") or {}):
            self._apply_secret()
        self.rounds_accounted = int(state.get("rounds_accounted", self.rounds_accounted))
        self.stop = state.get("stop", self.stop)
        if self.example_budget is not None:
            self.ledger.load_state_dict(state.get("example_clients", {}))
            self.example_budget.replan(int(state.get("example_planned_rounds", self.example_budget.rounds)))
        if self.client_dp is not None:
            self.client_dp.steps_done = self.rounds_accounted
            if state.get("planned_rounds") is not None and self.planned_rounds is not None:
                self.planned_rounds = int(state["planned_rounds"])
            z = state.get("noise_multiplier")
            if z is not None:  # planned for the run's rounds when it started: keep that z
                self.client_dp.noise_multiplier = float(z)
                dp = client_level_dp(self._server.strategy) if self._server is not None else None
                if dp is not None:
                    dp.set_noise_multiplier(float(z))
