"""Compressed uploads on real text (issue 26): FedDPO on the polarity set per compressor.

The run of the real-text table (``benchmarks/real_text/run.py``, ``configs/real_text_feddpo.yaml``:
SmolLM2-135M-Instruct, 4 users, 2 rounds of 3 local steps, LoRA r=8, held-out preference
accuracy on each user's TEST rows), once per ``federation.compression``: float32 (none), int8,
4-bit (``int4``) and top-1% with error feedback (``topk:0.01``). Reported: the upload bytes per
round (``summary.json``'s ``rounds[*].up_bytes``: the compressed payloads of all clients of the
round) and the final ``pref_acc``. Every finished run is appended to ``--results`` at once, so a
cut-off sweep still leaves numbers; ``--table`` prints the table of what is there.

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/compression_polarity.py --seeds 0
    .venv/bin/python benchmarks/compression_polarity.py --table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "real_text"))

SPECS = ["none", "int8", "int4", "topk:0.01"]


def tag(spec: str) -> str:
    """Run-name suffix of a compressor (``topk:0.01`` -> ``_c_topk0.01``)."""
    return "_c_" + spec.replace(":", "").replace("+", "")


def run_spec(spec: str, seed: int, setting: str, log_dir: Path) -> dict:
    """One FedDPO run through ``real_text/run.py``'s job runner; adds the bytes of every round."""
    from run import ROOT as RUN_ROOT
    from run import run_job

    extra = [] if spec == "none" else [f"--federation.compression={spec}"]
    r = run_job(
        setting, "feddpo", seed, initial=seed == 0 and spec == "none", extra=extra, tag=tag(spec), log_dir=log_dir
    )
    summary = json.loads(
        (RUN_ROOT / "runs/real_text" / f"{setting}_feddpo{tag(spec)}" / f"s{seed}" / "summary.json").read_text()
    )
    r["compression"] = spec
    r["up_bytes"] = [round_["up_bytes"] for round_ in summary["rounds"]]
    r["down_bytes"] = [round_["down_bytes"] for round_ in summary["rounds"]]
    return r


def final_val(r: dict, key: str) -> float:
    """A final validation metric of a run other than ``pref_acc``, read back from its ``summary.json``."""
    name = f"{r['setting']}_{r['method']}"
    summary = json.loads((ROOT / "runs/real_text" / name / f"s{r['seed']}" / "summary.json").read_text())
    return float(summary["final"]["val"][key])


def table(results: list[dict]) -> str:
    """Markdown rows: bytes per round against float32's, and the final metrics over seeds."""
    lines = [
        "| compressor | seeds | up bytes / round (4 clients) | vs float32 | before | pref_acc after, per seed | mean |"
        " val DPO loss | reward margin | reward acc |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    by_spec: dict[str, list[dict]] = {}
    for r in results:
        by_spec.setdefault(r["compression"], []).append(r)
    fp32 = by_spec["none"][0]["up_bytes"][0] if "none" in by_spec else None
    initial = next((r["initial"]["all"] for r in results if r["initial"] is not None), None)
    for spec in [s for s in SPECS if s in by_spec] + [s for s in by_spec if s not in SPECS]:
        runs = sorted(by_spec[spec], key=lambda r: r["seed"])
        up = runs[0]["up_bytes"][0]
        ratio = "-" if fp32 is None else f"{up / fp32:.4f}"
        after = [r["final"]["all"] for r in runs]
        per_seed = " / ".join(f"s{r['seed']} {r['final']['all']:.3f}" for r in runs)
        lines.append(
            f"| {'float32' if spec == 'none' else spec} | {len(runs)} | {up} | {ratio} | "
            f"{'-' if initial is None else f'{initial:.3f}'} | {per_seed} | {statistics.mean(after):.3f} | "
            f"{statistics.mean(final_val(r, 'loss') for r in runs):.4f} | "
            f"{statistics.mean(final_val(r, 'reward_margin') for r in runs):.4f} | "
            f"{statistics.mean(final_val(r, 'reward_acc') for r in runs):.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", nargs="+", default=SPECS, help="federation.compression values; none = float32")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--setting", default="iid", choices=["iid", "groups"])
    parser.add_argument("--results", default="runs/real_text/compression.jsonl")
    parser.add_argument("--table", action="store_true", help="only print the table of --results")
    args = parser.parse_args()
    os.chdir(ROOT)
    results_file = Path(args.results)
    if args.table:
        last = {(r["compression"], r["seed"]): r for r in map(json.loads, results_file.read_text().splitlines())}
        print(table(list(last.values())))
        return
    if not Path("runs/real_text/data").exists():
        import subprocess

        subprocess.run(
            [sys.executable, "benchmarks/real_text/build_data.py", "--out", "runs/real_text/data"], check=True
        )
    log_dir = ROOT / "runs/real_text/logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    results_file.parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for spec in args.specs:
            r = run_spec(spec, seed, args.setting, log_dir)
            with open(results_file, "a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(
                f"{spec} seed {seed}: up bytes/round {r['up_bytes']} final {r['final']['all']:.3f} "
                f"({r['seconds']:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
