"""Differentially private centroids (FedHDS, Sec. 4.5 and Theorem 1) and their accounting.

Each element of a centroid is scaled to ``[-1, 1]`` with ``tanh`` (which keeps extreme
values distinguishable), then Gaussian noise ``N(0, sigma^2 I)`` is added before the
centroid leaves the client. Theorem 1 is the Gaussian mechanism of Dwork & Roth (2014):
the noised centroid is ``(epsilon, delta)``-DP when
``sigma >= Delta_2 * sqrt(2 * ln(1.25 / delta)) / epsilon`` for ``epsilon, delta in (0, 1)``.

Sensitivity. The paper takes ``Delta_2 = 2``, the range of one tanh-scaled element. But the
mechanism releases the whole ``dim``-element centroid, and the Gaussian mechanism needs the
*L2* sensitivity of that vector: two centroids in ``[-1, 1]^dim`` can differ by up to the
diagonal, ``2 * sqrt(dim)`` (``2 * sqrt(2)`` for the paper's 2-D t-SNE centroids).
``dp_sensitivity="l2"`` (the default) uses that; ``"paper"`` keeps Theorem 1's 2, which
gives the stated ``(epsilon, delta)`` only per coordinate.

Accounting. Theorem 1 covers one release. A client sends one centroid per local group in
every round it is sampled, each with fresh noise, so its privacy loss composes over the
rounds and the centroids. :class:`CentroidAccountant` counts each client's releases and
converts them to ``(epsilon, delta)`` with opacus' accountants (RDP, Mironov 2017; or the
PRV accountant of Gopi et al. 2021), each release a Gaussian mechanism with noise
multiplier ``sigma / Delta_2`` and sampling rate 1: the server sees which clients take part,
so client sampling gives no amplification. Releases are composed sequentially: one sample
can move HDBSCAN's grouping, so the centroids of one round are not treated as disjoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

SENSITIVITY = 2.0  # Theorem 1's value: the range of one tanh-scaled element, [-1, 1]
SENSITIVITIES = ("l2", "paper")
ACCOUNTANTS = ("rdp", "prv")


def centroid_sensitivity(dim: int, kind: str = "l2") -> float:
    """L2 sensitivity of a tanh-scaled ``dim``-element centroid.

    Args:
        dim: Number of elements of the centroid (the fused dimension, 2 in the paper).
        kind: ``l2``: the diagonal of ``[-1, 1]^dim``, ``2 * sqrt(dim)``; ``paper``:
            Theorem 1's 2 (one element's range).
    """
    if kind not in SENSITIVITIES:
        raise ValueError(f"`dp_sensitivity` must be one of {SENSITIVITIES}, got {kind!r}")
    if dim < 1:
        raise ValueError(f"`dim` must be >= 1, got {dim}")
    return 2.0 * math.sqrt(dim) if kind == "l2" else SENSITIVITY


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = SENSITIVITY) -> float:
    """Theorem 1: the smallest noise standard deviation giving ``(epsilon, delta)``-DP.

    Args:
        epsilon: Privacy budget, in (0, 1) as Theorem 1 assumes.
        delta: Failure probability, in (0, 1).
        sensitivity: L2 sensitivity of the released value (see :func:`centroid_sensitivity`).

    Returns:
        ``sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon``.
    """
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"`dp_epsilon` must be in (0, 1) (Theorem 1), got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"`dp_delta` must be in (0, 1), got {delta}")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def privatize_centroids(centroids: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``tanh(c) + N(0, sigma^2 I)`` for every centroid (Sec. 4.5); ``sigma=0`` only scales."""
    if sigma < 0:
        raise ValueError(f"`dp_sigma` must be >= 0, got {sigma}")
    scaled = np.tanh(np.asarray(centroids, dtype=np.float64))
    return scaled + rng.normal(0.0, sigma, size=scaled.shape) if sigma > 0 else scaled


def composed_epsilon(noise_multiplier: float, releases: int, delta: float, accountant: str = "rdp") -> float:
    """``epsilon`` of ``releases`` Gaussian mechanisms with ``noise_multiplier = sigma / Delta_2``.

    Computed by opacus' ``RDPAccountant`` or ``PRVAccountant`` (sampling rate 1); ``0`` for
    no release, ``inf`` without noise.
    """
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"`dp_accountant` must be one of {ACCOUNTANTS}, got {accountant!r}")
    if releases <= 0:
        return 0.0
    if not noise_multiplier > 0:
        return math.inf
    import warnings

    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = [(float(noise_multiplier), 1.0, int(releases))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # PRV's log(1 - q) at q = 1 is handled, but warns
        return float(acc.get_epsilon(delta=delta))


class CentroidAccountant:
    """Per-client count of noised centroid releases and the ``(epsilon, delta)`` they add up to.

    Args:
        sigma: Noise standard deviation added to each tanh-scaled centroid.
        sensitivity: L2 sensitivity of one centroid (``Delta_2``).
        delta: The ``delta`` at which ``epsilon`` is reported.
        accountant: ``rdp`` or ``prv`` (opacus).
    """

    def __init__(self, sigma: float, sensitivity: float, delta: float, accountant: str = "rdp") -> None:
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"`dp_accountant` must be one of {ACCOUNTANTS}, got {accountant!r}")
        self.sigma, self.sensitivity, self.delta, self.accountant = (
            float(sigma),
            float(sensitivity),
            float(delta),
            accountant,
        )
        self.releases: dict[int, int] = {}

    @property
    def noise_multiplier(self) -> float:
        return self.sigma / self.sensitivity

    def record(self, client: int, count: int) -> None:
        """Client ``client`` sent ``count`` noised centroids."""
        self.releases[client] = self.releases.get(client, 0) + int(count)

    def epsilon(self, client: int) -> float:
        return composed_epsilon(self.noise_multiplier, self.releases.get(client, 0), self.delta, self.accountant)

    def report(self) -> dict[str, Any]:
        """What goes to ``summary.json``: the mechanism and each client's ``(epsilon, delta)``."""
        per_client = {
            str(c): {"releases": n, "epsilon": self.epsilon(c), "delta": self.delta}
            for c, n in sorted(self.releases.items())
        }
        worst = max((v["epsilon"] for v in per_client.values()), default=0.0)
        return {
            "sigma": self.sigma,
            "sensitivity": self.sensitivity,
            "noise_multiplier": self.noise_multiplier,
            "accountant": self.accountant,
            "delta": self.delta,
            "max_epsilon": worst,
            "clients": per_client,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"releases": dict(self.releases)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.releases = {int(k): int(v) for k, v in state.get("releases", {}).items()}
