"""White-box one-run audit of the package's DP mechanisms, with negative controls (issue 32, item 9).

It calls the mechanisms itself (its own sampler seed, noise multiplier and canaries of norm ``C``), so
it sees only the functions it calls: a package broken elsewhere (clipping off, the sample from the
config's seed, a weak key, DP-SGD's noise cut inside the module) passes it. The end-to-end audit,
``benchmarks/run_audit.py`` (issue 40), runs the run's own objects and flags each of those.

The audit of ``benchmarks/privacy_audit.py`` trains a model and scores canaries through it: 64
canaries with 32 guesses can show at most epsilon 2.3, so "empirical <= accountant" was vacuous at
epsilon 8. Here the canaries are *white-box*: the mechanism itself is run on canary updates
(client level) or canary gradients (example level) whose direction the auditor knows, and the
auditor scores each canary by the released value along its direction. That is the strongest
attacker on the update channel, and cheap, so the audit can afford the ``m = 2^15`` canaries its
largest showable bound needs (:func:`audit_stats.largest_showable`: 8.24 at delta 1e-5, above every
shipped private config's epsilon, see below).

**The test** (Steinke, Nasr, Jagielski 2023, arXiv:2305.08846, Algorithm 1 and Theorem 3,
:mod:`audit_stats`): each of ``m`` canaries is included with probability 1/2 (a fair coin the
auditor keeps); after the run the ``k+`` highest scores are guessed "in" and the ``k-`` lowest
"out" (fractions fixed per setting before any score is seen); the empirical epsilon is the largest
epsilon that the right guesses reject at 95% confidence. A mechanism is **flagged** when it exceeds
the accountant's epsilon: by Theorem 3 this happens with probability at most 5% if the mechanism
keeps its guarantee. The shipped configs are audited with 48% of the canaries guessed "in" and 48%
"out": a score that separates the included canaries perfectly then gets every guess right (the
number included is within 7 standard deviations of ``m / 2``), so the largest showable bound, 8.20,
is reached; with 50% and 50% a perfect score still makes about 70 wrong guesses (the included
count is not exactly ``m / 2``) and shows only about 5.7.

**Client level** (:func:`client_level_scores`): ``ClientLevelDP`` around ``FedAvg`` (uniform
weights, server step 1), the package's class, with its own secret noise (no ``seed``: drawn from
the OS). Canary ``i`` is a client whose update is ``C e_i`` (a coordinate of its own, so canaries
do not interfere); an excluded canary's client slot holds a client whose update is 0, so the
federation's size ``N`` and the mechanism's ``m = q N`` do not depend on the coins. Clients are
Poisson-sampled at rate ``q`` each round from a secret seed, and the auditor sees every round's
release (each global state: what the model's users and the run's checkpoints see). The canaries
run in independent federations of ``group`` clients (parallel composition: a canary changes only
its own federation's releases, so each canary's (epsilon, delta) is that of one federation, and
Theorem 3 applies to all ``m`` at once); this keeps each release ``group``-dimensional. Score of
canary ``i``: the sum over rounds of the released noised sum along ``e_i``, in units of ``C``.

**Example level** (:func:`example_level_scores`): ``privatize_per_example`` (DP-SGD's clip, sum,
noise, divide) on canary gradients ``C e_i``, Poisson batches at rate ``B / |D|`` from a secret seed,
noise from a secret generator, for the config's steps; score: the sum of the released steps along
``e_i``.

**Negative controls** (each a deliberately broken variant the audit must flag):

* ``noise/10``: the mechanism run with a tenth of the accounted noise multiplier;
* ``public_sample``: the sampler seeded by the config's (public) seed, so the auditor recomputes
  each round's sample and scores a canary only over the rounds its slot was sampled in, while the
  accountant claims amplification by sampling. The gap is large only where amplification is
  large, so this control runs at ``q = 0.01`` over 400 rounds (accountant: 1.55);
* ``seed_in_checkpoint``: the noise seed in the strategy's ``state_dict`` (the server checkpoint);
  the auditor regenerates each round's noise with a ``ClientLevelDP`` built from that seed and
  subtracts it. The correct run gets the same attacker: it reads the real ``state_dict``.

The uncentred adaptive-clipping count (item 3) is not a control here: the count is one scalar per
round shared by all canaries, so no canary has a coordinate of its own in it and a one-run audit
cannot attribute it; ``benchmarks/count_audit.py`` audits that channel with many trials on
neighbouring inputs and flags the uncentred count.

**What a one-run audit can show.** The ``2 m delta`` term of Theorem 3 caps the largest showable
bound near ``ln(1 / delta) - 3`` (8.24 at delta 1e-5 with ``m = 2^15`` and every canary guessed,
8.20 with the shipped configs' guesses; more canaries lower it).
So each shipped private config has a budget at or below it: ``configs/secagg.yaml`` calibrates
``z = 2.02`` for epsilon 8 over its 10 rounds at rate 1 (it shipped ``z = 1``, epsilon 19.05, beyond
any membership audit). Its distributed noise (shares sized for ``min_clients``) sums to at least the
central ``N(0, z^2 C^2)``, so the central mechanism audited here is the one it accounts.

    OMP_NUM_THREADS=1 python benchmarks/mechanism_audit.py --seeds 0 1 2 --out runs/mechanism_audit.jsonl
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from audit_stats import largest_showable, one_run_audit  # noqa: E402  (a sibling file)

from lightning_fed.federation.sampling import derive_seed, poisson_sample_clients  # noqa: E402
from lightning_fed.privacy import ClientLevelDP, PrivacyAccountant  # noqa: E402
from lightning_fed.privacy.dp_sgd import privatize_per_example  # noqa: E402
from lightning_fed.strategies import FedAvg  # noqa: E402
from lightning_fed.strategies.base import ClientUpdate  # noqa: E402

CANARIES = 2**15
#: The config's public seed (``seed_everything``), which the ``public_sample`` control samples from.
PUBLIC_SEED = 0
VARIANTS = ("correct", "noise/10", "public_sample", "seed_in_checkpoint")


@dataclass(frozen=True)
class Setting:
    """One audited mechanism: its accountant's parameters and the audit's design.

    Args:
        name: What it audits (a shipped config, or a control's setting).
        unit: ``client`` (``ClientLevelDP``) or ``example`` (DP-SGD).
        noise_multiplier: ``z``.
        sample_rate: ``q``: clients per round (client level) or ``B / |D|`` (example level).
        steps: Rounds (client level) or local steps (example level) the accountant composes.
        delta: The config's delta.
        guesses: Fractions of the canaries guessed "in" and "out" (fixed before the run).
        canaries: ``m``.
        group: Canaries per independent federation (client level) or data set (example level).
    """

    name: str
    unit: str
    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float = 1e-5
    guesses: tuple[float, float] = (0.48, 0.48)
    canaries: int = CANARIES
    group: int = 512

    def epsilon(self) -> float:
        """The accountant's epsilon (Opacus RDP, as the run reports it)."""
        return PrivacyAccountant(self.noise_multiplier, self.sample_rate, self.delta).epsilon(self.steps)


def calibrated(target_epsilon: float, sample_rate: float, steps: int, delta: float = 1e-5) -> float:
    """``z`` as a run calibrates it for ``target_epsilon`` (Opacus' ``get_noise_multiplier``, RDP)."""
    return PrivacyAccountant.calibrated(target_epsilon, delta, sample_rate, steps).noise_multiplier


#: The shipped private configs, as their runs account them (``z`` as each run calibrates it).
SHIPPED = {
    # feddpo_dp.yaml: 64 clients Poisson-sampled at 0.25, 10 rounds, target 4 at delta 1e-5 (z = 1.383).
    # Its adaptive clip gives the update more noise than z (Andrew et al.'s split): audited at z.
    "feddpo_dp": Setting("feddpo_dp", "client", calibrated(4.0, 0.25, 10), 0.25, 10),
    # fedit_dpsgd.yaml: |D_k| = 57 bucketed to 32, batch 8 (rate 0.25), 10 rounds x 10 steps, target 8 (z = 1.82)
    "fedit_dpsgd": Setting("fedit_dpsgd", "example", calibrated(8.0, 0.25, 100), 0.25, 100),
    # secagg.yaml: fixed-size sampling (accounted at rate 1, the server picks it), 10 rounds, target 8 (z = 2.02)
    "secagg": Setting("secagg", "client", calibrated(8.0, 1.0, 10), 1.0, 10),
}
#: The settings of the negative controls (their guesses fixed here, before any run).
CONTROLS = {
    "noise/10": replace(SHIPPED["feddpo_dp"], name="feddpo_dp, noise / 10", guesses=(0.25, 0.0)),
    "public_sample": Setting("q=0.01, 400 rounds, public sample", "client", 1.0, 0.01, 400, guesses=(1 / 16, 0.0)),
    "seed_in_checkpoint": replace(SHIPPED["feddpo_dp"], name="feddpo_dp, seed in checkpoint", guesses=(0.25, 0.0)),
    # DP-SGD with a tenth of the noise, over one round of fedit_dpsgd (10 steps: accountant 2.3)
    "dp_sgd noise/10": replace(
        SHIPPED["fedit_dpsgd"], name="fedit_dpsgd 10 steps, noise / 10", steps=10, guesses=(0.25, 0.0)
    ),
    # secagg's own setting and guesses: the bound reaches its largest (8.20) above the budget (8.00)
    "secagg noise/10": replace(SHIPPED["secagg"], name="secagg, noise / 10"),
}


class SeedInCheckpoint(ClientLevelDP):
    """The broken variant of item 2: the noise seed saved with the server's state."""

    def state_dict(self) -> dict:
        return {**super().state_dict(), "seed": self.seed}


def coins(m: int, generator: torch.Generator) -> list[bool]:
    """The auditor's fair coins: canary ``i`` is included when ``coins[i]``."""
    return (torch.rand(m, generator=generator) < 0.5).tolist()


def _replayed_noise(seed: Any, rounds_done: int, setting: Setting, state: dict, m_exp: float) -> torch.Tensor:
    """The noise sum (in units of ``C``) a ``ClientLevelDP`` seeded ``seed`` (the run's secret seed, or
    a test's int) drew in its round ``rounds_done``: what an attacker holding the seed regenerates
    (one zero update: the sum is the noise)."""
    replica = ClientLevelDP(FedAvg(weighting="uniform"), setting.noise_multiplier, 1.0, expected_clients=m_exp)
    replica.seed = seed  # the seed as the checkpoint held it (a SecretSeed is not an int)
    replica.setup(state, len(state["w"]))
    replica.rounds_done = rounds_done
    out = replica.aggregate(state, [ClientUpdate(0, 1, {"w": state["w"].clone()})])
    return (out["w"] - state["w"]) * m_exp


def client_level_scores(
    setting: Setting,
    included: Sequence[bool],
    variant: str = "correct",
    mechanism: Callable[..., ClientLevelDP] = ClientLevelDP,
) -> list[float]:
    """The auditor's score of every canary after running ``mechanism`` (see the module docstring)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "seed_in_checkpoint":
        mechanism = SeedInCheckpoint
    b, q, clip = setting.group, setting.sample_rate, 1.0
    z = setting.noise_multiplier / (10.0 if variant == "noise/10" else 1.0)
    m_exp = q * b  # m = q N, N = b client slots whether or not their canary is included
    scores: list[float] = []
    for start in range(0, len(included), b):
        inc = list(included[start : start + b])
        state = {"w": torch.zeros(len(inc), dtype=torch.float64)}
        dp = mechanism(FedAvg(weighting="uniform"), z, clip, expected_clients=m_exp)  # no seed: a secret one
        dp.setup(state, len(inc))
        sampling_seed = PUBLIC_SEED if variant == "public_sample" else secrets.randbits(63)
        releases, samples, rounds_before = [], [], []
        for t in range(setting.steps):
            sampled = poisson_sample_clients(len(inc), q, sampling_seed, t)
            updates = []
            for i in sampled:
                y = state["w"].clone()
                if inc[i]:
                    y[i] += clip  # canary i's update: C e_i
                updates.append(ClientUpdate(i, 1, {"w": y}))
            if not updates and not getattr(dp, "releases_empty_rounds", False):
                continue  # the run keeps the state (ServerRound.close): nothing released
            rounds_before.append(dp.rounds_done)
            new = dp.aggregate(state, updates)
            releases.append((new["w"] - state["w"]) * m_exp / clip)  # the noised sum, in units of C
            samples.append(sampled)
            state = {"w": new["w"].to(torch.float64)}
        leaked = dp.state_dict().get("seed")  # the checkpoint, as an attacker holding it reads it
        zero = {"w": torch.zeros(len(inc), dtype=torch.float64)}
        if leaked is not None:
            releases = [
                r - _replayed_noise(leaked, k, replace(setting, noise_multiplier=z), zero, m_exp)
                for r, k in zip(releases, rounds_before)
            ]
        total = torch.zeros(len(inc), dtype=torch.float64)
        if variant == "public_sample":  # the likelihood-ratio statistic given the known sample
            times = torch.zeros(len(inc), dtype=torch.float64)
            for r, s in zip(releases, samples):
                total[s] += r[s]
                times[s] += 1
            total = torch.where(
                times > 0, (total - times / 2) / times.clamp(min=1).sqrt(), torch.full_like(total, -1e9)
            )
        else:
            for r in releases:
                total += r
        scores.extend(total.tolist())
    return scores


def example_level_scores(setting: Setting, included: Sequence[bool], variant: str = "correct") -> list[float]:
    """The auditor's score of every canary after DP-SGD's steps on canary gradients (module docstring)."""
    if variant not in ("correct", "noise/10"):
        raise ValueError(f"example-level variants are 'correct' and 'noise/10', got {variant!r}")
    b, q, clip = setting.group, setting.sample_rate, 1.0
    z = setting.noise_multiplier / (10.0 if variant == "noise/10" else 1.0)
    lot = q * b  # the expected batch size the noised sum is divided by
    scores: list[float] = []
    for start in range(0, len(included), b):
        inc = torch.tensor(list(included[start : start + b]), dtype=torch.float64)
        n = len(inc)
        batch_seed, noise_seed = secrets.randbits(63), secrets.randbits(63)
        total = torch.zeros(n, dtype=torch.float64)
        for step in range(setting.steps):
            rows = poisson_sample_clients(n, q, batch_seed, step)  # Poisson batch of the data set's slots
            grads = torch.zeros(len(rows), n, dtype=torch.float64)
            grads[torch.arange(len(rows)), rows] = clip * inc[rows]  # canary i's gradient C e_i; an excluded slot's 0
            gen = torch.Generator().manual_seed(derive_seed(noise_seed, step))
            mean, _ = privatize_per_example({"w": grads}, clip, z, lot, gen)
            total += mean["w"].to(torch.float64) * lot / clip
        scores.extend(total.tolist())
    return scores


def audit(setting: Setting, variant: str = "correct", seed: int = 0) -> dict:
    """One one-run audit: the empirical epsilon next to the accountant's, and whether it is flagged."""
    included = coins(setting.canaries, torch.Generator().manual_seed(seed))
    started = time.perf_counter()
    if setting.unit == "client":
        scores = client_level_scores(setting, included, variant)
    else:
        scores = example_level_scores(setting, included, variant)
    empirical = one_run_audit(scores, included, setting.delta, setting.guesses)
    accountant = setting.epsilon()
    return {
        "setting": setting.name,
        "variant": variant,
        "seed": seed,
        "canaries": setting.canaries,
        "guesses": list(setting.guesses),
        "delta": setting.delta,
        "accountant_epsilon": accountant,
        "largest_showable": largest_showable(setting.canaries, setting.delta, setting.guesses),
        "empirical_epsilon": empirical,
        "flagged": empirical > accountant,
        "seconds": time.perf_counter() - started,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", default=None, help="append one JSON line per audit here")
    args = parser.parse_args(argv)
    runs = [(s, "correct") for s in SHIPPED.values()]
    for name, setting in CONTROLS.items():  # each control, and the correct mechanism in its setting
        variant = "noise/10" if name.endswith("noise/10") else name
        runs += [(setting, variant), (setting, "correct")]
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for seed in args.seeds:
        for setting, variant in runs:
            row = audit(setting, variant, seed)
            print(
                f"{row['setting']:<36} {variant:<18} seed {seed}: accountant {row['accountant_epsilon']:.2f},"
                f" showable {row['largest_showable']:.2f}, empirical {row['empirical_epsilon']:.2f},"
                f" flagged {row['flagged']} ({row['seconds']:.0f} s)",
                flush=True,
            )
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
    if out:
        out.close()


if __name__ == "__main__":
    main()
