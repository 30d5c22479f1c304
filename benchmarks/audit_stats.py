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

import numpy as np
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
    # f(k) = P[Binomial(r, q) >= k] for k = 0..v, in one vectorised call (v can be ~10^4)
    tails = binom.sf(np.arange(-1, v), r, q)
    f_v = float(tails[v])
    i = np.arange(1, v + 1)
    slack = float(np.max((tails[v - i] - f_v) / i)) if v > 0 else 0.0
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


def guess_counts(m: int, guesses: tuple[float, float]) -> tuple[int, int]:
    """``(k+, k-)``: the fractions ``guesses`` of the ``m`` canaries guessed "in" and "out"."""
    kp, km = int(m * guesses[0]), int(m * guesses[1])
    if kp < 0 or km < 0 or kp + km == 0 or kp + km > m:
        raise ValueError(f"guesses must be two fractions >= 0 with 0 < sum <= 1, got {guesses!r}")
    return kp, km


def largest_showable(m: int, delta: float, guesses: tuple[float, float] = (0.5, 0.5), beta: float = 0.05) -> float:
    """The largest bound :func:`one_run_audit` can report with ``m`` canaries and ``guesses``: every
    guess right. An audit whose largest showable bound is below the accountant's epsilon cannot
    fail (issue 32): it could never flag a mechanism that breaks its guarantee. It does not grow
    without bound in ``m``: the ``2 m delta`` term of Theorem 3 caps it (about 8.2 at delta 1e-5)."""
    kp, km = guess_counts(m, guesses)
    return empirical_epsilon(m, kp + km, kp + km, delta, beta)


def one_run_audit(
    scores: Sequence[float],
    included: Sequence[bool],
    delta: float,
    guesses: tuple[float, float] = (0.5, 0.5),
    beta: float = 0.05,
) -> float:
    """Steinke et al.'s one-run audit of ``m = len(scores)`` canaries (Algorithm 1, Theorem 3).

    ``scores[i]`` is the auditor's membership score of canary ``i`` (higher: more likely "in"),
    ``included[i]`` the fair coin that put it in the training. The ``k+`` highest scores are
    guessed "in" and the ``k-`` lowest "out" (``guesses``: the two fractions of ``m``, fixed before
    any score is seen; the rest abstain); the result is the largest epsilon that the ``v`` right
    guesses of ``r = k+ + k-`` reject at confidence ``1 - beta`` (:func:`empirical_epsilon`). Ties
    are broken by index (the order the canaries were drawn in, independent of inclusion).
    """
    m = len(scores)
    if m != len(included) or m == 0:
        raise ValueError(f"need one inclusion flag per score, got {m} scores and {len(included)} flags")
    kp, km = guess_counts(m, guesses)
    order = sorted(range(m), key=lambda i: (-scores[i], i))
    right = sum(1 for i in order[:kp] if included[i]) + sum(1 for i in order[m - km :] if not included[i])
    return empirical_epsilon(m, kp + km, right, delta, beta)
