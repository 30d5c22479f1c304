"""Client-level DP's plan, made once before training from the sampler and ``federation.privacy``.

:class:`~lightning_fed.privacy.run.RunPrivacy` calls :func:`plan_client_level` from
``ServerRound.bind``: the expected clients per round ``m`` and the sample rate ``q`` are the
sampler's (one source of truth), the noise multiplier ``z`` is given once or calibrated for the
planned rounds, and secure aggregation gets its minimum of contributors.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lightning_fed.errors import ValueRefusal
from lightning_fed.noise_calibration import sampled_at
from lightning_fed.privacy.accountant import POISSON_UNDER_SECURE_SUM, PrivacyAccountant, accounted_sample_rate
from lightning_fed.privacy.client_dp import ClientLevelDP
from lightning_fed.privacy.config import PrivacyConfig

if TYPE_CHECKING:
    from lightning_fed.federation.server_round import ServerRound


def plan_client_level(
    dp: ClientLevelDP, server: ServerRound, config: PrivacyConfig | None, delta: float
) -> PrivacyAccountant:
    """Client-level DP's accountant for the bound ``server``: ``m`` and ``q`` from its sampler, ``z``
    given once (``federation.privacy``, or the wrapper's without a ``privacy`` section) or
    calibrated for its rounds; a conflict or a budget spent by the first round is a one-line
    ``ValueError`` naming the options. Sets ``dp``'s expected clients and noise multiplier."""
    m = server.expected_clients
    if dp.expected_clients is not None and not math.isclose(dp.expected_clients, m, rel_tol=1e-9):
        sampler = "clients_per_round" if server.sampling == "fixed_size" else "sampling_rate * data.num_clients"
        raise ValueError(
            f"federation.strategy.expected_clients={dp.expected_clients:g} disagrees with the sampler's"
            f" expected clients per round {m:g} (federation.{sampler}): leave expected_clients out"
        )
    if server.strategy.secure_sum:  # distributed DP: the clients add the noise in shares
        if server.sampling == "poisson":
            raise ValueError(POISSON_UNDER_SECURE_SUM)
        server.strategy.set_min_contributors(server.min_clients)  # any released sum carries z^2 C^2
    dp.set_expected_clients(m)
    n, rate = server.num_clients, server.sampling_rate or 0.0
    q = accounted_sample_rate(server.sampling, n, server.clients_per_round, rate)
    if config is None or not config.client_level:
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
    acc = config.plan(n, server.rounds, server.sampling, server.clients_per_round, rate)
    if acc.would_exceed(0):  # one line, each value followed by its config file (config_precheck.named_source)
        raise ValueRefusal(
            f"federation.privacy.target_epsilon={acc.target_epsilon:g} is spent by the first round at"
            f" federation.privacy.noise_multiplier={acc.noise_multiplier:g} (epsilon {acc.epsilon(1):.3g}"
            f" per round with federation.privacy.delta={acc.delta:.3g} {sampled_at(server.sampling, rate)}):"
            " raise target_epsilon or noise_multiplier",
            "federation.privacy.target_epsilon",
        )
    dp.set_noise_multiplier(acc.noise_multiplier)
    return acc
