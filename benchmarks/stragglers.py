"""Stragglers on the virtual clock: synchronous FedAvg with a deadline vs FedBuff.

A toy objective, not a language model: client ``k`` holds an optimum ``theta_k`` in R^10 and
its local training is ``K`` gradient steps on ``||theta - theta_k||^2 / 2`` with step ``eta``
(``theta_K = theta_k + (1 - eta)^K (theta_0 - theta_k)``, or fewer steps for partial work).
The federation's optimum is the mean of the ``theta_k``; the model starts at ``5 * ones``.
30% of the 100 clients are 10x slower, and their optima are shifted by 3 in one coordinate
(non-IID: leaving them out biases the model). Reported:
virtual time until the distance to the optimum falls below ``--target`` (relative to the
start), median over seeds, and the distance reached at the end of the time budget.

* ``sync, no deadline``: 10 clients a round, the round waits for the slowest;
* ``sync, deadline``: 13 selected (30% over-selection), the round closes at 10 reports or at
  1.5x a fast client's time; stragglers are discarded (``+partial``: they send what they did);
* ``FedBuff``: 10 clients training at once, a server step every 5 arrivals, staleness-weighted.

    .venv/bin/python benchmarks/stragglers.py --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

N, DIM, STEPS, ETA, START = 100, 10, 10, 0.02, 5.0


def setup(seed: int):
    import torch

    from lightning_fed.heterogeneity import profiles_from_distribution

    profiles = profiles_from_distribution(N, step_time=1.0, slow_fraction=0.3, slow_factor=10.0, seed=seed)
    g = torch.Generator().manual_seed(seed)
    optima = torch.randn(N, DIM, generator=g, dtype=torch.float64)
    for c, p in enumerate(profiles):
        if p.step_time > 1.0:
            optima[c, 0] += 3.0  # the slow clients want something else
    return profiles, optima


def local(theta, optimum, steps):
    return optimum + (1 - ETA) ** steps * (theta - optimum)


def run_sync(seed, budget, deadline, partial):
    import torch

    from lightning_fed.federation.sampling import sample_clients
    from lightning_fed.heterogeneity import SyncRoundSimulator
    from lightning_fed.strategies import ClientUpdate, FedAvg

    profiles, optima = setup(seed)
    sim = SyncRoundSimulator(
        profiles, STEPS, deadline=deadline, over_selection=0.3 if deadline else 0.0, partial_work=partial, seed=seed
    )
    theta, clock, r, trace = {"w": torch.full((DIM,), START, dtype=torch.float64)}, 0.0, 0, []
    strategy = FedAvg(weighting="uniform")
    while clock < budget:
        picked = sample_clients(N, sim.num_to_select(10), seed, r)
        out = sim.run_round(r, picked, 10, start=clock)
        if out.reports:
            ups = [
                ClientUpdate(rep.client, 1, {"w": local(theta["w"], optima[rep.client], rep.steps)})
                for rep in out.reports
            ]
            theta = strategy.aggregate(theta, ups)
        clock, r = out.end, r + 1
        trace.append((clock, float((theta["w"] - optima.mean(0)).norm())))
    return trace


def run_fedbuff(seed, budget):
    import torch

    from lightning_fed.heterogeneity import AsyncRoundSimulator
    from lightning_fed.strategies import ClientUpdate, FedBuff

    profiles, optima = setup(seed)
    sim = AsyncRoundSimulator(profiles, STEPS, concurrency=10, seed=seed)
    strategy = FedBuff(buffer_size=5)
    theta = {"w": torch.full((DIM,), START, dtype=torch.float64)}
    versions = {0: theta}
    trace = []
    while sim.now < budget:
        a = sim.next_arrival(strategy.version)
        start = versions[a.start_version]
        new = strategy.submit(
            theta, ClientUpdate(a.client, 1, {"w": local(start["w"], optima[a.client], STEPS)}), start, a.start_version
        )
        if new is not None:
            theta = new
            versions[strategy.version] = theta
        trace.append((a.time, float((theta["w"] - optima.mean(0)).norm())))
    return trace


def time_to(trace, start, target):
    return next((t for t, d in trace if d <= target * start), float("inf"))


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.1)
    parser.add_argument("--budget", type=float, default=3000.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = {
        "sync, no deadline": lambda s: run_sync(s, args.budget, None, False),
        "sync, deadline 15": lambda s: run_sync(s, args.budget, 15.0, False),
        "sync, deadline 15 +partial": lambda s: run_sync(s, args.budget, 15.0, True),
        "FedBuff (C=10, K=5)": lambda s: run_fedbuff(s, args.budget),
    }
    print(
        f"virtual time to distance <= {args.target} x start; distance at t = {args.budget};"
        f" median [min-max] over {args.seeds} seeds"
    )
    print("| variant | time to target | final distance / start |")
    print("|---|---:|---:|")
    for name, fn in variants.items():
        times, finals = [], []
        for s in range(args.seeds):
            start = float((setup(s)[1].mean(0) - START).norm())
            trace = fn(s)
            times.append(time_to(trace, start, args.target))
            finals.append(trace[-1][1] / start)
        fmt = lambda v: "never" if v == float("inf") else f"{v:.0f}"  # noqa: E731
        print(
            f"| {name} | {fmt(statistics.median(times))} [{fmt(min(times))}-{fmt(max(times))}]"
            f" | {statistics.median(finals):.3f} [{min(finals):.3f}-{max(finals):.3f}] |"
        )


# ------------------------------------------- --train: tiny FedDPO on the virtual clock, through the loop
TRAIN_TARGET = 0.45  # validation DPO loss (ln 2 = 0.693 at the start)


def train_main(seeds: int, rounds: int) -> None:
    """Virtual time to a validation DPO loss of TRAIN_TARGET: sync FedAvg (no deadline / deadline
    with over-selection and partial work) vs FedBuff; 6 clients, 30% (2) of them 10x slower."""
    import json
    import statistics

    from hetero_learning import run

    from lightning_fed.federation import RoundHook
    from lightning_fed.heterogeneity import AsyncArrivals, SystemHeterogeneity
    from lightning_fed.strategies import FedAvg, FedBuff

    class Clock(RoundHook):
        def __init__(self, hook):
            self.hook, self.times = hook, []

        def after_aggregate(self, server, trainer, module, round_idx):
            self.times.append(self.hook.clock)

    profile = {"local_steps": 3, "step_time": 1.0, "slow_fraction": 0.3, "slow_factor": 10.0}
    variants = {
        "sync FedAvg, 3 a round, no deadline": lambda s: (FedAvg(), SystemHeterogeneity(**profile, seed=s)),
        "sync FedAvg, 3 selected, 2 needed, deadline 6 s, partial work": lambda s: (
            FedAvg(),
            SystemHeterogeneity(**profile, deadline=6.0, target=2, partial_work=True, seed=s),
        ),
        "FedBuff, concurrency 3, K = 2": lambda s: (
            FedBuff(buffer_size=2),
            AsyncArrivals(concurrency=3, **profile, seed=s),
        ),
    }
    rows = {}
    for name, make in variants.items():
        rows[name] = []
        for seed in range(seeds):
            strategy, hook = make(seed)
            clock = Clock(hook)
            res = run(
                seed, 4, strategy, [hook, clock], rounds=rounds, clients_per_round=3, eval_every=1, keep_history=True
            )
            losses = [h["val"]["loss"] for h in res["history"]]
            hit = next((t for t, loss in zip(clock.times, losses) if loss <= TRAIN_TARGET), float("inf"))
            rows[name].append({"time_to_target": hit, "final_loss": losses[-1], "virtual_time": clock.times[-1]})
    print(
        f"tiny FedDPO, 6 clients (2 slow x10), 3 local steps of 1 s, {rounds} rounds, {seeds} seeds: median [min-max]"
    )
    print(f"| variant | virtual time to val loss {TRAIN_TARGET} | final val loss | virtual time of {rounds} rounds |")
    print("|---|---:|---:|---:|")
    fmt = lambda v: "never" if v == float("inf") else f"{v:.0f}"  # noqa: E731
    for name, res in rows.items():
        cells = []
        for key, f in (("time_to_target", fmt), ("final_loss", "{:.3f}".format), ("virtual_time", fmt)):
            values = [r[key] for r in res]
            cells.append(f"{f(statistics.median(values))} [{f(min(values))}-{f(max(values))}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(json.dumps(rows))


if __name__ == "__main__" and "--train" in sys.argv:
    argv = sys.argv
    train_main(
        int(argv[argv.index("--seeds") + 1]) if "--seeds" in argv else 2,
        int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 8,
    )
elif __name__ == "__main__":
    main()
