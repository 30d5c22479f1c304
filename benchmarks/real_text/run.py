"""Learning on real text, offline (issue 16): FedDPO / FedPDPO on movie-review preference
pairs and FedIT on HumanEval code, SmolLM2-135M-Instruct with its chat template, every
client scored on its own rows of a separate TEST file.

As a user would run it: the data are local JSONL files (``build_data.py``), the clients are
``ByKey(user)``, and every fit is ``lightning-fed fit --config configs/real_text_<method>.yaml``
in a subprocess; the numbers are read back from each run's ``summary.json`` (``initial`` = the
evaluation before round 1, ``final`` = after the last round). The "before" number of a setting
is the base model (FedDPO's or FedIT's ``initial``; else FedPDPO's ``initial``, the model with
freshly initialised personal parts, which is exactly the base model since the bottleneck fix of
commit 49e33d3, also reported in its own column). Seeds vary training (LoRA and head
initialisation, batch order); the data are fixed.

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python benchmarks/real_text/run.py \\
        --jobs iid:feddpo iid:fedpdpo groups:feddpo groups:fedpdpo --seeds 0 1 2

Each job runs with ``OMP_NUM_THREADS=1`` under ``nice -n 5``: on a shared 2-core machine
(load 10+) one thread was 6x faster than two for SmolLM2's forward (4.6 s vs 28 s for 8x48
tokens). ``--initial-seeds`` lists the seeds that also run the evaluation before round 1
(the base model is the same for every seed of FedDPO/FedIT, so once is enough there).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = "runs/real_text/data"
#: The CLI beside the running interpreter (``.venv/bin/lightning-fed`` when run as documented;
#: also right for a worktree that uses another checkout's venv).
CLI = str(Path(sys.executable).parent / "lightning-fed")
SETTINGS = {
    "iid": ("polarity_iid_train.jsonl", "polarity_iid_test.jsonl", "pref_acc"),
    "groups": ("polarity_groups_train.jsonl", "polarity_groups_test.jsonl", "pref_acc"),
    "code": ("humaneval_train.jsonl", "humaneval_test.jsonl", "loss"),
}


def command(setting: str, method: str, seed: int, initial: bool, extra: list[str], tag: str) -> list[str]:
    train, test, _ = SETTINGS[setting]
    name = f"{setting}_{method}{tag}"
    return [
        "nice",
        "-n",
        "5",
        CLI,
        "fit",
        "--config",
        f"configs/real_text_{method}.yaml",
        f"--seed_everything={seed}",
        f"--federation.seed={seed}",
        f"--data.init_args.dataset={DATA}/{train}",
        f"--data.init_args.val_dataset={DATA}/{test}",
        f"--data.init_args.test_dataset={DATA}/{test}",
        f"--trainer.logger.init_args.name={name}",
        f"--trainer.logger.init_args.version=s{seed}",
        f"--trainer.num_sanity_val_steps={-1 if initial else 0}",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]


def run_job(
    setting: str, method: str, seed: int, initial: bool, extra: list[str], tag: str, log_dir: Path, reuse: bool = False
) -> dict:
    cmd = command(setting, method, seed, initial, extra, tag)
    out = ROOT / "runs/real_text" / f"{setting}_{method}{tag}" / f"s{seed}"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    t0 = time.perf_counter()
    log = log_dir / f"{setting}_{method}{tag}_s{seed}.log"
    done = out / "summary.json"
    if (
        reuse
        and done.exists()
        and json.loads(done.read_text()).get("final")
        and "stopped" not in json.loads(done.read_text())
    ):
        seconds = float("nan")  # a finished run of the same name: read, not re-run
    else:
        with open(log, "w") as fh:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
        seconds = time.perf_counter() - t0
        if rc != 0:
            raise SystemExit(f"{shlex.join(cmd)} exited {rc}; see {log}")
    summary = json.loads(done.read_text())
    metric = SETTINGS[setting][2]
    pick = lambda ev: (
        None
        if not ev
        else {"all": ev["val"][metric], "clients": {c: m[metric] for c, m in ev.get("val_clients", {}).items()}}
    )  # noqa: E731  (a DP run withholds per-client metrics: no val_clients)
    return {
        "setting": setting,
        "method": method + tag,
        "seed": seed,
        "seconds": seconds,
        "command": shlex.join(cmd[3:]),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "initial": pick(summary.get("initial")),
        "final": pick(summary.get("final")),
        "metric": metric,
    }


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    return (
        f"{statistics.mean(values):.3f}"
        if len(values) == 1
        else f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"
    )


def table(results: list[dict]) -> str:
    lines = [
        "| setting | method | metric | seeds | before (base model) | after, mean ± sd | gain | gain > 2 sd? | per "
        "client after (mean over seeds) | initial with fresh personal parts |",
        "|---|---|---|---|---:|---:|---:|---|---|---:|",
    ]
    base = {}  # FedDPO's/FedIT's initial; else FedPDPO's, which is the base model too since 49e33d3
    for r in sorted(results, key=lambda r: r["method"].startswith("fedpdpo")):
        if r["initial"] is not None:
            base.setdefault(r["setting"], r["initial"]["all"])
    keys = list(dict.fromkeys((r["setting"], r["method"]) for r in results))
    for setting, method in keys:
        runs = [r for r in results if (r["setting"], r["method"]) == (setting, method)]
        after = [r["final"]["all"] for r in runs]
        b = base.get(setting)
        sign = -1 if runs[0]["metric"] == "loss" else 1
        gain = sign * (statistics.mean(after) - b) if b is not None else None
        sd = statistics.stdev(after) if len(after) > 1 else None
        verdict = "-" if gain is None or sd is None else ("yes" if gain > 2 * sd else "no")
        clients = sorted(runs[0]["final"]["clients"])
        per_client = ", ".join(f"c{c} {statistics.mean(r['final']['clients'][c] for r in runs):.2f}" for c in clients)
        fresh = [r["initial"]["all"] for r in runs if r["initial"] is not None and method.startswith("fedpdpo")]
        lines.append(
            f"| {setting} | {method} | {runs[0]['metric']} | {len(runs)} | {'-' if b is None else f'{b:.3f}'} | "
            f"{fmt(after)} | {'-' if gain is None else f'{gain:+.3f}'} | {verdict} | {per_client} | {fmt(fresh)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--jobs",
        nargs="+",
        default=["iid:feddpo", "iid:fedpdpo", "groups:feddpo", "groups:fedpdpo"],
        help="setting:method",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--initial-seeds", type=int, nargs="*", default=[0], help="seeds that also evaluate before round 1"
    )
    parser.add_argument("--tag", default="", help="suffix of the run names (ablations)")
    parser.add_argument("--results", default="runs/real_text/results.jsonl", help="append every finished job here")
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument(
        "--reuse", action="store_true", help="read finished runs of the same name instead of re-running them"
    )
    parser.add_argument(
        "--table", action="store_true", help="only print the table of every job in --results (last run of each name)"
    )
    args, extra = parser.parse_known_args()  # anything else goes to `lightning-fed fit`
    os.chdir(ROOT)
    if args.table:
        last = {
            (r["setting"], r["method"], r["seed"]): r
            for r in map(json.loads, Path(args.results).read_text().splitlines())
        }
        print(table(list(last.values())))
        return
    if not args.skip_build or not Path(DATA).exists():
        subprocess.run([sys.executable, "benchmarks/real_text/build_data.py", "--out", DATA], check=True)
    log_dir = ROOT / "runs/real_text/logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for job in args.jobs:
        setting, method = job.split(":")
        for seed in args.seeds:
            r = run_job(setting, method, seed, seed in args.initial_seeds, extra, args.tag, log_dir, args.reuse)
            results.append(r)
            with open(args.results, "a") as fh:
                fh.write(json.dumps(r) + "\n")
            init = "" if r["initial"] is None else f" initial {r['initial']['all']:.3f}"
            print(
                f"{setting} {method}{args.tag} seed {seed}:{init} final {r['final']['all']:.3f} "
                f"{r['final']['clients']} ({r['seconds']:.0f}s)",
                flush=True,
            )
    print(table(results))


if __name__ == "__main__":
    main()
