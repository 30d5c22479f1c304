"""Warm long-prompt DPO steps (the new path) under torch.profiler: where their CPU time goes.

SmolLM2-135M-Instruct with ``configs/feddpo.yaml``'s settings (``step_flops.py``'s module), 4 pairs of a
256-token prompt and 64-token responses per client, the reference cache filled by an untimed step, 1
intra-op thread. With ``--clients 1`` (the default): one client's step; prints its process CPU time, the
profiler's 25 largest operators by self CPU time, and the optimizer's settings. With ``--clients K``
(K > 1): the K clients one after another (``new``) and in one batched step (``new-KK``, the batching
engine's :class:`~batched_clients.GroupStep`), each round split into its phases (the adapters stacked,
forward, backward, optimizer, unstacked; user and system CPU time, minor page faults) and then
profiled::

    nice -n 15 .venv/bin/python benchmarks/long_prompt_profile.py
    nice -n 5 .venv/bin/python benchmarks/long_prompt_profile.py --clients 4
    nice -n 5 .venv/bin/python benchmarks/long_prompt_profile.py --clients 4 --pairs 2 --no-profile
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import step_flops  # noqa: E402 (benchmarks/ on the path first)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


class Clock:
    """Process user and system CPU time and minor page faults, summed per phase."""

    def __init__(self) -> None:
        self.phases: dict[str, list[float]] = {}

    def __call__(self, phase: str, fn):
        t, u = os.times(), resource.getrusage(resource.RUSAGE_SELF)
        out = fn()
        t2, u2 = os.times(), resource.getrusage(resource.RUSAGE_SELF)
        acc = self.phases.setdefault(phase, [0.0, 0.0, 0.0])
        acc[0] += t2.user - t.user
        acc[1] += t2.system - t.system
        acc[2] += u2.ru_minflt - u.ru_minflt
        return out

    def report(self, name: str) -> None:
        total = [sum(v[i] for v in self.phases.values()) for i in range(3)]
        cells = ", ".join(f"{p} {v[0]:.2f}+{v[1]:.2f} s ({v[2]:.0f} faults)" for p, v in self.phases.items())
        print(f"{name}: user+system {total[0]:.2f}+{total[1]:.2f} CPU s, {total[2]:.0f} minor faults; {cells}")


def sequential_round(module, step: step_flops.Sequential, clock: Clock) -> None:
    module.scored_head, module.shared_prefix, module.pack_rows = step.flags
    for batch in step.batches:
        clock("load", lambda: module.load_state(step.start))
        loss = clock("forward", lambda b=batch: module.pair_metrics(b)["loss"].mean())
        clock("zero_grad", step.optimizer.zero_grad)
        clock("backward", loss.backward)
        clock("optimizer", step.optimizer.step)


def batched_round(module, group_batch: dict, clients: int, start: dict, clock: Clock) -> None:
    from batched_clients import GroupStep

    module.scored_head, module.shared_prefix, module.pack_rows = True, True, True
    clock("load", lambda: module.load_state(start))
    pairs = group_batch["chosen_input_ids"].shape[0] // clients
    group = clock("stack", lambda: GroupStep(module, "dpo", clients, pairs))
    loss = clock("forward", lambda: module.training_step(group_batch, 0)["loss"])
    clock("zero_grad", group.optimizer.zero_grad)
    clock("backward", loss.backward)
    clock("optimizer", group.optimizer.step)
    clock("unstack", group.close)


def table(prof) -> str:
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=40)


def one_client() -> None:
    module = step_flops.build_module(step_flops.feddpo_settings())
    vocab = module.model.get_base_model().config.vocab_size
    batches, _ = step_flops.long_prompt_batches(4, vocab, 1)
    start = {k: v.clone() for k, v in module.shared_parameters().items()}
    step = step_flops.Sequential(module, True, True, True, batches, start)  # scored head, prompt once, packed
    for name in ("untimed (fills the reference cache)", "warm step"):
        t = time.process_time()
        step.round()
        print(f"{name}: {time.process_time() - t:.2f} CPU s", flush=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step.round()
    print(table(prof))
    opt = step.optimizer
    settings = {k: v for k, v in opt.defaults.items() if k in ("foreach", "fused")}
    print(type(opt).__name__, settings, "tensors", sum(len(g["params"]) for g in opt.param_groups))


def k_clients(clients: int, pairs: int, profiled: bool) -> None:
    from lightning_fed.modules.reference_cache import ReferenceCache

    module = step_flops.build_module(step_flops.feddpo_settings())
    vocab = module.model.get_base_model().config.vocab_size
    batches, group = step_flops.long_prompt_batches(pairs, vocab, clients)
    start = {k: v.detach().clone() for k, v in module.shared_parameters().items()}
    step = step_flops.Sequential(module, True, True, True, batches, start)
    module.reference_cache = ReferenceCache()
    step.round()  # fills the reference cache (keyed by content: the batched step is served from it)
    rounds = {
        "new": lambda clock: sequential_round(module, step, clock),
        f"new-K{clients}": lambda clock: batched_round(module, group, clients, start, clock),
    }
    for name, run in rounds.items():
        run(Clock())  # untimed warm-up
        clock = Clock()
        run(clock)
        clock.report(name)
        sys.stdout.flush()
    for name, run in rounds.items() if profiled else ():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(Clock())
        print(f"\n### {name}, profiled\n{table(prof)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1, help="K clients (> 1: sequential against batched)")
    parser.add_argument("--pairs", type=int, default=4, help="pairs per client (K > 1)")
    parser.add_argument("--no-profile", action="store_true", help="K > 1: the phases' split only")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    glibc = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(f"torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.1f}, {glibc}", flush=True)
    one_client() if args.clients == 1 else k_clients(args.clients, args.pairs, not args.no_profile)


if __name__ == "__main__":
    main()
