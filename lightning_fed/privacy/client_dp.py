"""Client-level differential privacy as a wrapper around any averaging server strategy
(DP-FedAvg: McMahan, Ramage, Talwar, Zhang, 2018, "Learning Differentially Private Recurrent
Language Models", ICLR, arXiv:1710.06963; adaptive clip: Andrew et al., 2021, arXiv:1905.03871).

Each round, for the participants ``S`` of a federation whose expected participation is ``m``:

    Delta_i = ClipFn(y_i - x, C)                              # flat L2 clip, Algorithm 1
    Delta~  = (sum_{i in S} Delta_i + N(0, z^2 C^2 I)) / m    # fixed-denominator estimator f~_f

(Algorithm 1 with every client weight ``w_k = 1``, so ``W = N`` and ``qW = m``), and
``Delta~`` is handed to the wrapped strategy, which steps on it as on a plain mean (FedAvg,
FedProx: ``x + eta Delta~``; FedAvgM: momentum on it; FedAdagrad/FedYogi/FedAdam: their
moments of it): post-processing of a private value, no extra privacy cost. Dividing by the expected
``m`` instead of ``|S|`` keeps the sensitivity at ``C / m`` whatever the sampled count; a
client that fails simply contributes a zero update. The accountant
(:class:`~lightning_fed.privacy.accountant.PrivacyAccountant`) is run with the same ``z`` and
the sampling rate of the federation.

What is clipped, per strategy (one vector per client, one norm ``C`` for all of it):

* every strategy: the client's change of each shared tensor it received,
  ``y_i[k] - x[k]``;
* SCAFFOLD (:class:`~lightning_fed.strategies.Scaffold`): the model change **and** the control
  change ``c_i+ - c_i`` (extras ``control/<name>``), clipped *together*, since the server
  publishes ``c`` as well. The control is usually ~``1 / (K lr)`` times larger than the model
  change; ``control_scale`` multiplies it before clipping and divides the noised result after
  (post-processing), so the two can share the norm budget. The noised control sum is handed
  to SCAFFOLD divided by ``|S|`` so that its line-17 step ``|S|/N * mean`` becomes
  ``(sum + noise) / N``: the realised count cancels;
* FedBiscuit (:class:`~lightning_fed.strategies.FedBiscuit`): a client receives and uploads
  only its cluster's selector, so the clipped vector is that selector's LoRA change. Noise is
  added to every selector a client could have trained, and each selector's noised sum is
  divided by the expected number of *its* participants, ``m * |M_u| / N`` (the share of
  clients whose :meth:`~lightning_fed.strategies.base.Strategy.client_model` holds the key).
  The cluster assignment itself comes from the clients' selector losses, a separate channel
  (see :mod:`lightning_fed.privacy.report`) that this wrapper does not privatize.

Strategies that need each client's individual update, not a mean, cannot sit behind a
Gaussian sum and are refused: FedNova (per-client step counts), FedAMP (per-client
personalised aggregates), CoordinateMedian and TrimmedMean (order statistics).

The wrapped strategy sees only pseudo-updates: one per participant (its id, weight 1,
``x + Delta~`` on the keys it trained), so every weighting rule returns ``Delta~`` and the
ids that FedBiscuit needs to find clusters are kept. Noise comes from the generator of
``(seed, round)``, keyed by all 256 bits of the seed
(:class:`~lightning_fed.federation.secret_seed.SecretSeed`); in a run the seed comes from the run's secret
(:mod:`~lightning_fed.privacy.secret`), never from the config or the checkpoint, so a run
resumed with its key file draws the same noise as an uninterrupted one.

A Poisson round that sampled no client still releases ``N(0, z^2 C^2) / m`` (the Gaussian
mechanism on a zero sum, :attr:`releases_empty_rounds`): the accountant counts every round as a
sampled Gaussian, and a round that released the state unchanged would tell an observer that
no client was sampled, which the noise otherwise hides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.federation.secret_seed import SecretSeed, as_secret_seed, standard_normal
from lightning_fed.privacy.adaptive_clipping import AdaptiveClipping, update_noise_multiplier
from lightning_fed.privacy.clipping import clip_to_norm
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, LocalCorrection, Strategy
from lightning_fed.wrapper_rules import CLIENT_DP_UNSUPPORTED, client_dp_problems, count_noise_problem, wrapped_problem

CONTROL_PREFIX = "control/"  # SCAFFOLD's named controls (lightning_fed.strategies.scaffold.PREFIX)
#: Strategies that aggregate individual updates, not a mean: no Gaussian-sum DP for them.
UNSUPPORTED = CLIENT_DP_UNSUPPORTED
_NOISE_TAG = 0x44_50  # separates this generator's seeds from the sampler's
#: Strategies publishing control variates that a round without update noises as well.
CONTROL_STRATEGIES = {"Scaffold"}


class ClientLevelDP(Strategy):
    """Clip each client's update, noise the sum, hand the noised mean to ``strategy``.

    :attr:`releases_empty_rounds`: a round with no update is aggregated too (noise only).

    Args:
        strategy: The server strategy stepping on the noised mean (FedAvg, FedProx, FedAvgM,
            FedAdagrad, FedYogi, FedAdam, Scaffold, FedBiscuit).
        noise_multiplier: ``z``, the noise standard deviation in units of ``C`` that the
            accountant sees. With ``adaptive`` it is shared between the update and the
            unclipped count (Andrew et al., Theorem 1), so the update gets a little more.
            ``None`` (the default) takes it from the run's ``federation.privacy``
            (:meth:`set_noise_multiplier`); in a run, give it in one of the two places.
        clip_norm: ``C`` (the initial ``C`` with ``adaptive``).
        expected_clients: ``m``, the expected number of participants per round:
            ``federation.clients_per_round`` for fixed-size sampling, ``q * N`` for Poisson
            sampling at rate ``q``. ``None`` until :meth:`set_expected_clients` is called (a run
            sets it from its sampler; leave it out of a config).
        adaptive: Track a target quantile of the update norms instead of a fixed ``C``.
        control_scale: SCAFFOLD only: factor on the control change before the joint clip.
        seed: Seed of the noise (per round: ``SecretSeed.of_int(seed).generator(tag, round)``). ``None`` (the
            default) draws a secret one (the run replaces it by one derived from its secret,
            :class:`~lightning_fed.privacy.run.RunPrivacy`): anyone who knows the seed can
            regenerate and subtract the noise, so a seed written in a shared config is for tests
            only. It is never in :meth:`state_dict` (the server's checkpoint).
    """

    def __init__(
        self,
        strategy: Strategy,
        noise_multiplier: float | None = None,
        clip_norm: float = 0.1,
        expected_clients: float | None = None,
        adaptive: AdaptiveClipping | None = None,
        control_scale: float = 1.0,
        seed: int | None = None,
    ) -> None:
        # lightning_fed/wrapper_rules.py: the precheck refuses the same values with the same line
        wrapped = wrapped_problem(type(strategy).__name__, isinstance(strategy, ClientLevelDP))
        problems = [f"ClientLevelDP: {wrapped}"] if wrapped else []
        problems += client_dp_problems(noise_multiplier, clip_norm, expected_clients, control_scale)
        count_stddev = adaptive.count_stddev if isinstance(adaptive, AdaptiveClipping) else None
        if not problems and (problem := count_noise_problem(noise_multiplier, count_stddev)):
            problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))
        self.strategy = strategy
        self.noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)
        self.clip_norm = float(clip_norm)
        self.expected_clients = None if expected_clients is None else float(expected_clients)
        self.adaptive = adaptive
        self.control_scale = float(control_scale)
        #: Noise is released in a round without update (:meth:`aggregate` of no update).
        self.releases_empty_rounds = True
        self.seed: int | SecretSeed = SecretSeed.fresh() if seed is None else int(seed)
        #: Whether ``seed`` was given (tests): other client-level noise of the run (FedBiscuit's
        #: selector losses) is then derived from it too; else each draws its own secret seed.
        self.seed_given = seed is not None
        self.rounds_done = 0
        self.num_clients = 0
        #: What the last :meth:`aggregate` did (clip used, noise std, noised unclipped fraction).
        self.last_round: dict[str, float] = {}
        self._check_split()

    # ------------------------------------------------------------------ delegation
    @property
    def wrapped(self) -> Strategy:
        """The server strategy stepping on the noised mean (e.g. the FedBiscuit a grouping hook drives)."""
        return self.strategy

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        super().setup(global_state, num_clients)
        self.strategy.setup(global_state, num_clients)

    def set_expected_clients(self, expected_clients: float) -> None:
        """Set ``m`` from the sampler (``clients_per_round``, or ``q * N``)."""
        if not expected_clients > 0:
            raise ValueError(f"ClientLevelDP: expected_clients must be > 0, got {expected_clients!r}")
        self.expected_clients = float(expected_clients)
        self._check_split()

    def set_noise_multiplier(self, noise_multiplier: float) -> None:
        """Set ``z`` from the plan (:meth:`~lightning_fed.privacy.PrivacyConfig.plan` calibrates it)."""
        if not noise_multiplier >= 0:
            raise ValueError(f"ClientLevelDP: noise_multiplier must be >= 0, got {noise_multiplier!r}")
        self.noise_multiplier = float(noise_multiplier)
        self._check_split()

    def _check_split(self) -> None:
        """With adaptive clipping, once ``z`` and ``m`` are known: a ``z`` the count cannot share
        (``z >= 2 sigma_b``) raises here, before training, not in the first aggregate."""
        if self.adaptive is not None and self.noise_multiplier is not None and self.expected_clients is not None:
            _ = self.update_noise_multiplier

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        return self.strategy.client_model(client_id, global_state)

    def downlink(self, client_id: int) -> StateDict:
        return self.strategy.downlink(client_id)

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> LocalCorrection:
        return self.strategy.local_correction(global_state, downlink, client_memory)

    # ------------------------------------------------------------------ the mechanism
    @property
    def update_noise_multiplier(self) -> float:
        """``z_Delta``: ``z`` itself, or its share left after the adaptive clip's count."""
        if self.noise_multiplier is None:
            raise RuntimeError("ClientLevelDP: noise_multiplier is not set (give it, or federation.privacy)")
        if self.adaptive is None:
            return self.noise_multiplier
        return update_noise_multiplier(self.noise_multiplier, self.adaptive.stddev(self._m()))

    def _m(self) -> float:
        if self.expected_clients is None:
            raise RuntimeError("ClientLevelDP: expected_clients is not set (give it, or call set_expected_clients)")
        return self.expected_clients

    def key_shares(self, global_state: Mapping[str, Tensor]) -> dict[str, float]:
        """For each key, the fraction of the ``N`` clients whose model holds it (1.0 for most strategies)."""
        if type(self.strategy).client_model is Strategy.client_model or self.num_clients < 1:
            return dict.fromkeys(global_state, 1.0)
        counts: Counter[str] = Counter()
        for c in range(self.num_clients):
            counts.update(self.strategy.client_model(c, global_state).keys())
        return {k: counts[k] / self.num_clients for k in global_state}

    def clip_update(self, global_state: Mapping[str, Tensor], update: ClientUpdate) -> tuple[StateDict, float]:
        """The client's clipped vector: model change and (scaled) control change, and its norm before clipping."""
        unknown = sorted(k for k in update.extras if not k.startswith(CONTROL_PREFIX))
        if unknown:
            raise AggregationError(f"client {update.client_id}: extras {unknown[:5]} are not covered by ClientLevelDP")
        vector: StateDict = {}
        for k, y in update.state.items():
            x = global_state[k]
            vector[k] = y.to(compute_dtype(y.dtype)) - x.to(compute_dtype(x.dtype))
        for k, dc in update.extras.items():
            vector[k] = dc.to(compute_dtype(dc.dtype)) * self.control_scale
        return clip_to_norm(vector, self.clip_norm)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """Clip, sum, noise, divide by ``m`` (per key by its expected contributors), then step with ``strategy``.

        With no update (a Poisson round that sampled no client) the sum is zero and the noise is
        released all the same (SCAFFOLD's control too), handed to ``strategy`` as pseudo-updates of
        :meth:`empty_round_senders`.
        """
        m = self._m()
        empty = len(updates) == 0
        clip, z_update = self.clip_norm, self.update_noise_multiplier
        sums: StateDict = {}
        unclipped = 0
        for u in updates:
            clipped, norm = self.clip_update(global_state, u)
            unclipped += int(norm <= clip)
            for k, v in clipped.items():
                sums[k] = v if k not in sums else sums[k] + v
        shares = self.key_shares(global_state)
        stray = sorted(k for k in sums if not k.startswith(CONTROL_PREFIX) and shares[k] == 0.0)
        if stray:  # the per-key denominator m * share would be 0
            raise AggregationError(f"ClientLevelDP: keys {stray[:5]} were uploaded but no client's model holds them")
        g = as_secret_seed(self.seed).generator("client-level noise", _NOISE_TAG, self.rounds_done)
        noised: StateDict = {}
        for k in list(global_state) + sorted(CONTROL_PREFIX + p for p in global_state):
            param = k[len(CONTROL_PREFIX) :] if k.startswith(CONTROL_PREFIX) else k
            control = k.startswith(CONTROL_PREFIX)
            if k not in sums and (shares[param] == 0.0 or (control and not (empty and self.has_controls))):
                continue  # no client could have sent it: no noise, no change (controls only if sent)
            ref = global_state[param]
            total = sums.get(k, torch.zeros(ref.shape, dtype=compute_dtype(ref.dtype)))
            noise = standard_normal(total.shape, g, total.dtype) * (z_update * clip)
            noised[k] = total + noise  # sum_i Delta_i + N(0, z^2 C^2), the numerator of f~_f
        mean: StateDict = {}
        for k, v in noised.items():
            if k.startswith(CONTROL_PREFIX):  # SCAFFOLD multiplies by |S| / N: (sum + noise) / N
                mean[k] = v / (max(len(updates), 1) * self.control_scale)  # empty: one pseudo-update
            else:
                mean[k] = v / (m * shares[k])  # fixed denominator: expected contributors of k
        senders = [(u.client_id, list(u.state), list(u.extras)) for u in updates]
        if empty:  # the Gaussian mechanism on a zero sum: the noise alone is released
            senders = self.empty_round_senders(global_state, [k for k in mean if k.startswith(CONTROL_PREFIX)])
        pseudo = [
            ClientUpdate(
                client_id=cid,
                num_examples=1,
                state={k: (global_state[k].to(mean[k].dtype) + mean[k]).to(global_state[k].dtype) for k in keys},
                extras={k: mean[k] for k in extras},
            )
            for cid, keys, extras in senders
        ]
        self.last_round = {"clip_norm": clip, "noise_stddev": z_update * clip, "unclipped": float(unclipped)}
        if self.adaptive is not None:
            gen = as_secret_seed(self.seed).generator("count noise", _NOISE_TAG + 1, self.rounds_done)
            self.clip_norm, fraction = self.adaptive.next_clip_norm(clip, unclipped, m, gen, participants=len(updates))
            self.last_round["unclipped_fraction"] = fraction
        self.rounds_done += 1
        return self.strategy.aggregate(global_state, pseudo)

    @property
    def has_controls(self) -> bool:
        """Whether the wrapped strategy publishes control variates (SCAFFOLD's ``c``), noised too."""
        return type(self.strategy).__name__ in CONTROL_STRATEGIES

    def empty_round_senders(
        self, global_state: Mapping[str, Tensor], controls: list[str]
    ) -> list[tuple[int, list[str], list[str]]]:
        """``(client id, keys, extras)`` of the pseudo-updates of a round without update: one per
        distinct model the strategy gives its clients (one client for FedAvg & co., one per
        selector for FedBiscuit), named by the first client holding it, so every key that any
        client could have sent carries the released noise."""
        if type(self.strategy).client_model is Strategy.client_model or self.num_clients < 1:
            return [(0, list(global_state), controls)]
        senders, seen = [], set()
        for c in range(self.num_clients):
            keys = tuple(self.strategy.client_model(c, global_state).keys())
            if keys and keys not in seen:
                seen.add(keys)
                senders.append((c, list(keys), controls))
        return senders

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """The wrapped strategy's state, the current ``C`` and the number of noised rounds; never the
        noise seed (whoever holds it can subtract the noise: it stays in the run's key file)."""
        return {"strategy": self.strategy.state_dict(), "clip_norm": self.clip_norm, "rounds_done": self.rounds_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.strategy.load_state_dict(state.get("strategy", {}))
        self.clip_norm = float(state.get("clip_norm", self.clip_norm))
        self.rounds_done = int(state.get("rounds_done", self.rounds_done))


def client_level_dp(strategy: Strategy) -> ClientLevelDP | None:
    """The run's :class:`ClientLevelDP`: ``strategy`` itself, or the one a wrapping strategy
    holds as its public ``dp`` (:class:`~lightning_fed.deploy.secure_aggregation.SecureAggregation`:
    distributed DP under SecAgg+); ``None`` when the run has no client-level DP."""
    if isinstance(strategy, ClientLevelDP):
        return strategy
    inner = getattr(strategy, "dp", None)
    return inner if isinstance(inner, ClientLevelDP) else None
