"""Share of a federated round spent on evaluation, by evaluation plan (issue #13).

Runs ``lightning-fed fit`` on ``configs/tiny.yaml`` with N clients (default 1000), 10 per round,
K=2 local steps, through the same harness as ``benchmarks/scale_clients.py`` (its ``RoundTimer``
and arguments; one fresh subprocess per setting), under three evaluation settings:

- ``old``: every client, one client per batch (the layout before the evaluation plan;
  emulated by turning packing off);
- ``all``: ``federation.eval_clients=all`` with packed batches;
- ``default``: the package's defaults (a panel of ``federation.eval_panel_size`` clients, packed;
  ``--panel-size`` to try another size).

Reported per setting: the initial evaluation, and the median over rounds 2..R of the round's
wall time, its evaluation seconds and their ratio. The last line is
``eval_cost: N=<n> old=<r> all=<r> default=<r>`` (evaluation seconds / round seconds).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/eval_cost.py --clients 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"old": ["--federation.eval_clients=all"], "all": ["--federation.eval_clients=all"], "default": []}


def child(setting: str, args: argparse.Namespace) -> dict:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from scale_clients import cli_args  # its RoundTimer is given to the CLI as scale_clients.RoundTimer

    from lightning_fed import cli

    if setting == "old":  # one client per batch, as before packing
        import lightning_fed.callbacks.federated_loop as federated_loop

        federated_loop.packs_evaluation = lambda *a, **k: False
    with tempfile.TemporaryDirectory(prefix="lf_eval_cost_") as root:
        marks_file = str(Path(root) / "marks.json")
        argv = cli_args(args.clients, args.rounds, args.per_client, args.val_fraction, f"{root}/run", marks_file)
        t0 = time.perf_counter()
        extra = [f"--federation.eval_panel_size={args.panel_size}"] if args.panel_size else []
        cli.main([*argv, *SETTINGS[setting], *extra])
        total = time.perf_counter() - t0
        marks = json.loads(Path(marks_file).read_text())
    rounds = [{"wall": r["end"] - r["start"], "eval": r["val"]} for r in marks["rounds"]]
    return {"setting": setting, "fit_s": total, "initial_eval_s": marks["sanity"], "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000, help="N (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run (>= 2; round 1 is warm-up)")
    parser.add_argument("--per-client", type=int, default=4, help="preference pairs per client")
    parser.add_argument("--val-fraction", type=float, default=0.25, help="held-out share of each client's pairs")
    parser.add_argument("--panel-size", type=int, help="federation.eval_panel_size (default: the package's)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    ratios = {}
    for setting in args.settings:
        cmd = [sys.executable, __file__, "--child", setting, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ.copy())
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"setting {setting} failed with exit code {proc.returncode}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        measured = r["rounds"][1:] or r["rounds"]
        wall = statistics.median(x["wall"] for x in measured)
        evaluation = statistics.median(x["eval"] for x in measured)
        ratios[setting] = evaluation / wall
        print(
            f"{setting:8s} N={args.clients}: initial eval {r['initial_eval_s']:.2f}s; per round (median of rounds"
            f" 2..{len(r['rounds'])}) {wall:.2f}s, of which evaluation {evaluation:.2f}s = {ratios[setting]:.1%};"
            f" fit {r['fit_s']:.1f}s",
            flush=True,
        )
    print(f"eval_cost: N={args.clients} " + " ".join(f"{k}={v:.3f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
