"""The two statistics of the privacy audit (``benchmarks/privacy_audit.py``), as pure functions.

* Exposure (Carlini, Liu, Erlingsson, Kos, Song 2019, "The Secret Sharer", USENIX Security,
  arXiv:1802.08232, Definition 3 / Eq. (1) of Sec. 4): ``exposure = log2 |R| - log2 rank``, the
  rank of the canary's log-perplexity among the candidates of the randomness space ``R``. The
  space (10^6 digit strings) is too large to score; as in their Sec. 4.2 (estimation by
  sampling) we score ``n`` random candidates and use the canary's rank among the ``n + 1``
  strings: ``log2(n + 1) - log2(rank)``, in ``[0, log2(n + 1)]``. A canary the model has not
  seen is on average at the median (exposure about 1 bit).
* One-run membership audit (Steinke, Nasr, Jagielski 2023, "Privacy Auditing with One (1)
  Training Run", NeurIPS, arXiv:2305.08846, Theorem 3 with Algorithm 1): ``m`` canaries, each
  included independently with probability 1/2; the auditor guesses in/out for ``r`` of them
  and ``v`` guesses are right. If the training is (eps, delta)-DP then

      P[W >= v] <= f(v) + 2 m delta max_{i in 1..v} (f(v - i) - f(v)) / i,
      f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v],

  so the largest eps whose bound is below ``beta`` (0.05: 95% confidence) is an empirical
  lower bound on the training's epsilon. It can never soundly exceed the accountant's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import binom


def exposure(canary_nll: float, candidate_nll: Sequence[float]) -> float:
    """Exposure in bits of a canary whose negative log-likelihood is ``canary_nll``.

    ``rank`` is 1 + the number of candidates strictly more likely than the canary, plus half of
    the ties (a tie is neither evidence for nor against memorisation).
    """
    better = sum(1 for c in candidate_nll if c < canary_nll)
    ties = sum(1 for c in candidate_nll if c == canary_nll)
    rank = 1.0 + better + 0.5 * ties
    return math.log2(len(candidate_nll) + 1) - math.log2(rank)


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Upper bound on P[at least ``v`` of ``r`` guesses right] under (``eps``, ``delta``)-DP (Theorem 3)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-eps))  # accuracy of eps-DP randomized response

    def tail(k: int) -> float:  # f(k) = P[Binomial(r, q) >= k]
        return float(binom.sf(k - 1, r, q))

    f_v = tail(v)
    slack = max(((tail(v - i) - f_v) / i for i in range(1, v + 1)), default=0.0)
    return min(1.0, f_v + 2.0 * m * delta * slack)


def empirical_epsilon(m: int, r: int, v: int, delta: float, beta: float = 0.05) -> float:
    """The largest eps (within 1e-4) that ``v`` right guesses of ``r`` reject at confidence ``1 - beta``; 0 if none."""
    if one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return math.inf
    while hi - lo > 1e-4:  # p-value grows with eps: keep p(lo) < beta <= p(hi)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if one_run_p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo
