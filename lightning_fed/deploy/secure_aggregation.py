"""Secure aggregation (SecAgg+: Bell, Bonawitz, Gascon, Lepoint, Raykova, 2020, "Secure
Single-Server Aggregation with (Poly)Logarithmic Overhead", CCS, ePrint 2020/704) of the clients'
updates, as a strategy wrapper that runs the same arithmetic in process and over Flower.

Under Flower the cryptography is Flower's own (``SecAggPlusWorkflow`` on the server,
``secaggplus_mod`` on the clients: key agreement, Shamir shares of the mask seeds, pairwise and
private masks; see :mod:`lightning_fed.deploy.secure_aggregation_flower`): the server receives
only masked integer vectors and learns only their sum. What is summed is each client's
*contribution* (:meth:`SecureAggregation.contribution`), the change of every shared tensor,
``Delta_k = y_k - x``, with Flower's fixed-point encoding (``secaggplus_mod._collect_masked_vectors``)::

    r_k   = round(w_k / max_weight * Q) / Q                 # the client's weight on the grid
    q_k   = SR((clip(r_k Delta_k, -R, R) + R) * Q / (2R))   # SR: stochastic rounding to integers
    sum   = (sum_k q_k, sum_k r_k Q) mod M                  # what unmasking reveals
    mean  = (sum_k q_k * 2R / Q - |S| R) / sum_k r_k        # unmask_stage: dequantize, shift, divide

with ``R = clipping_range``, ``Q = quantization_range``, ``M = modulus_range``. In process
(:meth:`SecureAggregation.aggregate`) the same functions of Flower's
(``flwr.common.secure_aggregation.quantization``) encode and decode the same contributions
without the masks (they cancel exactly modulo ``M``), and the stochastic rounding draws from the
same seed, ``(seed, round, client)``: a simulated and a deployed run give the same aggregate.

The error of the mean, per coordinate, for contributions inside ``[-R, R]`` (no clipping): each
``q_k`` is off by less than one grid step ``2R / Q`` (:func:`quantization_error_bound`), so the
mean is off by less than ``|S| * 2R / Q / sum_k r_k``. Values beyond ``R`` are clipped: choose
``R`` above the largest coordinate of ``r_k Delta_k`` (with client-level DP, the clip norm ``C``
bounds every coordinate).

The wrapped strategy then steps on the securely computed mean as on any mean: every participant
becomes a pseudo-update ``x + mean`` (its id, its weight), so FedAvg, FedProx, FedAvgM,
FedAdagrad, FedYogi and FedAdam give the result they would give on the plain mean of the same
(quantized) updates. Strategies that need individual updates or send clients different keys
(SCAFFOLD's server-published controls, FedBiscuit, FedNova, FedAMP, median, trimmed mean,
heterogeneous ranks) are refused.

Distributed DP: wrapping :class:`~lightning_fed.privacy.ClientLevelDP` (fixed clip), each client
clips its contribution to ``C`` and adds its share of the noise, ``N(0, z^2 C^2 / k)``, before the
encoding; weights are uniform. ``k`` is the fewest contributions a round aggregates
(``federation.min_clients``, set by the run: :meth:`SecureAggregation.set_min_contributors`), so
any sum the round releases, of ``n >= k`` contributions, carries ``N(0, (n / k) z^2 C^2)``, at
least the ``N(0, z^2 C^2)`` of central DP-FedAvg that the accountant assumes, even when some of
the ``m`` sampled clients drop out; with ``k = m`` (``min_clients = clients_per_round``) it is
exactly that, and any drop-out fails the round. The epsilon therefore holds against the server
too, which sees nothing but the noised sum; it picks the sample, so it is accounted at rate 1
(fixed-size sampling; Poisson sampling is refused by the run's plan). The server divides the sum
by ``m`` and hands it to the wrapped strategy (post-processing).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
    parameters_multiply,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from torch import Tensor

from lightning_fed.federation.sampling import derive_seed
from lightning_fed.federation.secret_seed import as_secret_seed, standard_normal
from lightning_fed.privacy.client_dp import ClientLevelDP
from lightning_fed.privacy.clipping import clip_to_norm
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, LocalCorrection, Strategy
from lightning_fed.strategies.fedavg import FedAvg
from lightning_fed.strategies.fednova import FedNova
from lightning_fed.wrapper_rules import secure_aggregation_problems, secure_sum_problem

_ROUNDING_TAG = 0x5341  # separates the stochastic rounding's seeds from the sampler's
_NOISE_SHARE_TAG = 0x5344


@dataclass
class Contribution:
    """What one client feeds into the secure sum: its vector (one array per name, in ``names``
    order) and its weight (``|D_k|``, or ``max_weight`` for uniform weighting)."""

    client_id: int
    arrays: list[np.ndarray]
    weight: float


NOISE_SHARE_KEY = "secagg/noise_share_stddev"
"""Downlink key of a client's share of the distributed DP noise (a float64 scalar)."""


def quantization_error_bound(clipping_range: float, quantization_range: int) -> float:
    """One grid step, ``2R / Q``: stochastic rounding moves a coordinate by less than this."""
    return 2.0 * clipping_range / quantization_range


@contextmanager
def seeded_numpy(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (Flower's stochastic rounding draws from it), then restore it."""
    saved = np.random.get_state()
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        np.random.set_state(saved)


class SecureAggregation(Strategy):
    """Aggregate the clients' updates through a secure sum (see the module docstring).

    Args:
        strategy: The averaging strategy stepping on the mean (FedAvg, FedProx, FedAvgM,
            FedAdagrad, FedYogi, FedAdam), or :class:`~lightning_fed.privacy.ClientLevelDP`
            around one of them (fixed clip) for distributed DP.
        protocol: ``secagg+`` (Flower's ``SecAggPlusWorkflow``).
        num_shares: Flower's ``num_shares``: shares of each client's secrets (an int > 2, or a
            fraction of the round's clients).
        reconstruction_threshold: Flower's ``reconstruction_threshold``: shares needed to
            unmask (an int < ``num_shares``, or a fraction of them). Up to ``num_shares -
            threshold`` of a client's neighbours may drop out without stopping the round.
        max_weight: Flower's ``max_weight``: the largest client weight (``|D_k|``).
        clipping_range: Flower's ``clipping_range`` ``R``: every coordinate of a weighted
            contribution is clipped to ``[-R, R]`` before quantization.
        quantization_range: Flower's ``quantization_range`` ``Q``: the integer grid size.
        modulus_range: Flower's ``modulus_range`` ``M`` (a power of 2, > ``Q``, at most 2**32).
        timeout: Seconds each SecAgg+ stage waits for replies (``None``: the server's timeout).
        seed: Seed of the stochastic rounding, per ``(round, client)``. Not secret: the server
            sees only masked sums, and any DP noise is added before rounding.
    """

    secure_sum = True

    def __init__(
        self,
        strategy: Strategy,
        protocol: str = "secagg+",
        num_shares: int | float = 1.0,
        reconstruction_threshold: int | float = 0.5,
        max_weight: float = 1000.0,
        clipping_range: float = 8.0,
        quantization_range: int = 2**22,
        modulus_range: int = 2**32,
        timeout: float | None = None,
        seed: int = 0,
    ) -> None:
        # lightning_fed/wrapper_rules.py: the precheck refuses the same values with the same line
        problems = secure_aggregation_problems(
            protocol,
            num_shares,
            reconstruction_threshold,
            max_weight,
            clipping_range,
            quantization_range,
            modulus_range,
            wrapped=_strategy_problems(strategy),
            adaptive=asdict(strategy.adaptive) if isinstance(strategy, ClientLevelDP) and strategy.adaptive else None,
        )
        if problems:
            raise ValueError("; ".join(problems))
        self.strategy, self.protocol = strategy, protocol
        self.num_shares, self.reconstruction_threshold = num_shares, reconstruction_threshold
        self.max_weight, self.clipping_range = float(max_weight), float(clipping_range)
        self.quantization_range, self.modulus_range = int(quantization_range), int(modulus_range)
        self.timeout, self.seed = timeout, int(seed)
        self.rounds_done = 0
        #: ``k``: the fewest contributions a round aggregates (``federation.min_clients``); ``None``:
        #: not planned by a run, then ``m`` (every sampled client must contribute).
        self.min_contributors: int | None = None
        self._received: tuple[list[np.ndarray], list[int]] | None = None

    def set_min_contributors(self, min_contributors: int) -> None:
        """Size the noise shares for sums of at least ``min_contributors`` (the run's ``min_clients``)."""
        if isinstance(min_contributors, bool) or not int(min_contributors) >= 1:
            raise ValueError(f"SecureAggregation: min_contributors must be >= 1, got {min_contributors!r}")
        self.min_contributors = int(min_contributors)

    # ------------------------------------------------------------------ delegation
    @property
    def dp(self) -> ClientLevelDP | None:
        """The wrapped :class:`ClientLevelDP` (distributed DP), if any."""
        return self.strategy if isinstance(self.strategy, ClientLevelDP) else None

    @property
    def averaging(self) -> FedAvg:
        """The averaging strategy that steps on the mean."""
        dp = self.dp
        return dp.strategy if dp is not None else self.strategy  # type: ignore[return-value]

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        super().setup(global_state, num_clients)
        self.strategy.setup(global_state, num_clients)

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        return self.strategy.client_model(client_id, global_state)

    def downlink(self, client_id: int) -> StateDict:
        """The wrapped strategy's downlink and, with distributed DP, the client's noise share
        (``z C / sqrt(k)``, float64): the server alone knows ``k`` and a calibrated ``z``."""
        out = dict(self.strategy.downlink(client_id))
        if self.dp is not None:
            out[NOISE_SHARE_KEY] = torch.tensor(self.noise_share_stddev(), dtype=torch.float64)
        return out

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> LocalCorrection:
        inner = {k: v for k, v in downlink.items() if k != NOISE_SHARE_KEY}
        return self.strategy.local_correction(global_state, inner, client_memory)

    def state_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy.state_dict(), "rounds_done": self.rounds_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.strategy.load_state_dict(state.get("strategy", {}))
        self.rounds_done = int(state.get("rounds_done", self.rounds_done))

    # ------------------------------------------------------------------ the client's half
    def rounding_seed(self, round_idx: int, client_id: int) -> int:
        """Seed of ``client_id``'s stochastic rounding in round ``round_idx`` (both transports)."""
        return derive_seed(self.seed, _ROUNDING_TAG, round_idx, client_id) % 2**32

    def contribution(
        self, received: Mapping[str, Tensor], update: ClientUpdate, round_idx: int, noise_stddev: float | None = None
    ) -> Contribution:
        """``update``'s vector for the secure sum: ``y_k - x`` per shared tensor (sorted by name),
        clipped to ``C`` and noised with the client's share with distributed DP, and its weight.

        ``noise_stddev``: the share's standard deviation the server sent (its downlink's
        ``secagg/noise_share_stddev``); ``None``: this object's own :meth:`noise_share_stddev`
        (the server's, in process)."""
        if update.extras:
            raise AggregationError(f"client {update.client_id}: extras {sorted(update.extras)[:5]} cannot be summed")
        names = sorted(received)
        delta: StateDict = {}
        for k in names:
            x, y = received[k], update.state[k]
            delta[k] = y.to(compute_dtype(y.dtype)) - x.to(compute_dtype(x.dtype))
        dp = self.dp
        if dp is not None:
            delta, _ = clip_to_norm(delta, dp.clip_norm)
            std = self.noise_share_stddev() if noise_stddev is None else float(noise_stddev)
            g = as_secret_seed(dp.seed).generator("secagg noise share", _NOISE_SHARE_TAG, round_idx, update.client_id)
            delta = {k: v + standard_normal(v.shape, g, v.dtype) * std for k, v in delta.items()}
            weight = self.max_weight  # uniform: the fixed-denominator estimator needs the plain sum
        elif getattr(self.averaging, "weighting", "num_examples") == "uniform":
            weight = self.max_weight
        else:
            weight = float(update.num_examples)
            if weight > self.max_weight:
                raise AggregationError(
                    f"client {update.client_id}: num_examples={update.num_examples} exceeds"
                    f" secure aggregation max_weight={self.max_weight:g}"
                )
        arrays = [delta[k].detach().cpu().numpy() for k in names]
        return Contribution(update.client_id, arrays, weight)

    def noise_share_stddev(self) -> float:
        """``z C / sqrt(k)``: one client's share of the Gaussian noise (distributed DP), sized so that
        a sum of ``k`` (the fewest a round aggregates, at most ``m``) carries ``N(0, z^2 C^2)``."""
        dp = self.dp
        if dp is None:
            return 0.0
        if dp.expected_clients is None:
            raise ValueError("SecureAggregation: ClientLevelDP.expected_clients is not set")
        k = dp.expected_clients if self.min_contributors is None else min(self.min_contributors, dp.expected_clients)
        return dp.update_noise_multiplier * dp.clip_norm / math.sqrt(k)

    def encode(self, contribution: Contribution, rounding_seed: int) -> list[np.ndarray]:
        """Flower's fixed-point encoding of a contribution, without the masks
        (``secaggplus_mod._collect_masked_vectors``): weight factor first, then each array."""
        q_ratio = round(contribution.weight / self.max_weight * self.quantization_range)
        arrays = parameters_multiply(contribution.arrays, q_ratio / self.quantization_range)
        with seeded_numpy(rounding_seed):
            quantized = quantize(arrays, self.clipping_range, self.quantization_range)
        return [a.astype(np.int64) for a in factor_combine(q_ratio, quantized)]

    # ------------------------------------------------------------------ the server's half
    def check_capacity(self, num_contributors: int) -> None:
        """The sum of ``n`` encodings must not wrap around ``M``: ``n * Q < M``."""
        if num_contributors * self.quantization_range >= self.modulus_range:
            raise ValueError(
                f"secure aggregation: {num_contributors} clients * quantization_range={self.quantization_range}"
                f" must be < modulus_range={self.modulus_range} (the sum would overflow)"
            )

    def decode(self, total: list[np.ndarray], num_contributors: int) -> list[np.ndarray]:
        """The weighted mean from the unmasked sum (``SecAggPlusWorkflow.unmask_stage``)."""
        total = parameters_mod(total, self.modulus_range)
        q_total_ratio, total = factor_extract(total)
        inv_dq_total_ratio = self.quantization_range / q_total_ratio
        mean = dequantize(total, self.clipping_range, self.quantization_range)
        offset = -(num_contributors - 1) * self.clipping_range
        for vec in mean:
            vec += offset
            vec *= inv_dq_total_ratio
        return mean

    def simulate(self, contributions: Sequence[Contribution], round_idx: int) -> list[np.ndarray]:
        """The mean a SecAgg+ round would reveal for ``contributions`` (masks cancel mod ``M``)."""
        self.check_capacity(len(contributions))
        total: list[np.ndarray] | None = None
        for c in contributions:
            encoded = self.encode(c, self.rounding_seed(round_idx, c.client_id))
            total = encoded if total is None else parameters_addition(total, encoded)
        assert total is not None
        return self.decode(total, len(contributions))

    def use_received(self, mean: list[np.ndarray], contributors: list[int]) -> None:
        """The mean a deployed SecAgg+ round revealed (for ``contributors``): the next
        :meth:`aggregate` uses it instead of simulating the protocol."""
        self._received = (mean, sorted(contributors))

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """The wrapped strategy's step on the secure mean of ``updates`` (simulated in process)."""
        if len(updates) == 0:
            raise AggregationError("SecureAggregation: cannot aggregate zero updates")
        round_idx, received, self._received = self.rounds_done, self._received, None
        if received is None:
            mean = self.simulate([self.contribution(global_state, u, round_idx) for u in updates], round_idx)
        else:
            mean, contributors = received
            if contributors != sorted(u.client_id for u in updates):
                raise AggregationError(
                    f"SecureAggregation: the secure sum covers clients {contributors},"
                    f" the admitted updates {sorted(u.client_id for u in updates)}"
                )
        self.rounds_done += 1
        return self.step(global_state, mean, updates)

    def step(
        self, global_state: Mapping[str, Tensor], mean: Sequence[np.ndarray], updates: Sequence[ClientUpdate]
    ) -> StateDict:
        """Hand the mean (``names`` sorted) to the wrapped strategy as one pseudo-update per participant."""
        names = sorted(global_state)
        if len(mean) != len(names):
            raise AggregationError(f"SecureAggregation: the sum has {len(mean)} arrays, the state {len(names)}")
        delta = {k: torch.from_numpy(np.asarray(a, dtype=np.float64)) for k, a in zip(names, mean)}
        dp, weights = self.dp, {u.client_id: u.num_examples for u in updates}
        if dp is not None:  # Delta~ = (sum_k Delta_k + noise) / m, the fixed-denominator estimator
            if dp.expected_clients is None:
                raise ValueError("SecureAggregation: ClientLevelDP.expected_clients is not set")
            delta = {k: v * (len(updates) / dp.expected_clients) for k, v in delta.items()}
            dp.last_round = {"clip_norm": dp.clip_norm, "noise_stddev": dp.update_noise_multiplier * dp.clip_norm}
            dp.rounds_done += 1
            weights = dict.fromkeys(weights, 1)
        pseudo = [
            ClientUpdate(
                client_id=cid,
                num_examples=w,
                state={k: (global_state[k].to(torch.float64) + delta[k]).to(global_state[k].dtype) for k in names},
            )
            for cid, w in weights.items()
        ]
        return self.averaging.aggregate(global_state, pseudo)


def _strategy_problems(strategy: Strategy) -> list[str]:
    """What a secure sum cannot run on: a strategy that needs more than the mean (adaptive clipping:
    :func:`~lightning_fed.wrapper_rules.adaptive_secure_sum_problem`)."""
    out = []
    inside_client_dp = isinstance(strategy, ClientLevelDP)
    inner = strategy.strategy if inside_client_dp else strategy
    if not isinstance(inner, FedAvg) or isinstance(inner, FedNova):
        out.append(secure_sum_problem(type(inner).__name__, inside_client_dp=inside_client_dp))
    return out
