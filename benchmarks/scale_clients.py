"""Cost of a federated round against the number of simulated clients N (issue #13).

Each N runs in a fresh subprocess through the real CLI path (``lightning_fed.cli.main``, i.e.
``lightning-fed fit``) on ``configs/tiny.yaml`` (a config-built 2-layer GPT-2, byte tokenizer,
LoRA, DPO, FedAvg), with N clients of the planted ``synthetic:preferences`` set
(``examples_per_client`` pairs each, a ``val_fraction`` of them held out), 10 clients per round
and K=2 local steps. Everything else is the package's default: evaluation, checkpointing
(``ModelCheckpoint(save_last=True)`` after every round), TensorBoard logging, the progress bar,
the summary files; the benchmark prints the evaluation defaults it ran with.

Reported per N: the data build (``FederatedDataModule.setup``: read, partition, tokenize, one
``ClientData`` per client) in seconds and RSS; the initial evaluation (Lightning's sanity pass);
per round the wall time split into evaluation, checkpoint writing and the rest (sampling,
client turns, aggregation, logging: "training"), and the process CPU time, round 1 apart as
warm-up; peak RSS
(``ru_maxrss``) and its growth over the first N; the checkpoint (``last.ckpt`` plus any
client-state files beside it) and what the run wrote to TensorBoard and to the summary and
record files. Per-round figures are medians over rounds 2..R.

Comparing like with like (issue 23): with the defaults the two N do different per-client work.
At N=10 every client trains every round, so from round 2 on the DPO reference cache serves every
pair; at N=10000 the round's clients are new and their reference forwards run. The benchmark
counts those forwards and their CPU per round and prints the CPU ratio without them, with the
evaluation's CPU and the padded training tokens; ``--same-pairs`` gives every client copies of
one pair (the same tokens at both N, every client served by the cache from its first forward),
which with ``--cli-arg=--federation.eval_panel_size=10`` makes the rounds' work equal, so that
what is left of the ratio is overhead that grows with N.

The last line is ``scale: round_time_ratio_<N>_vs_<n>=<x> rss_growth_mib=<y>
ckpt_growth_ratio=<z>`` for the largest N against the first (targets for 10000 vs 10: x <= 1.3,
y <= 300, z <= 1.5). The machine is shared, so the smallest and largest N run back to back in
one invocation and the ratio is what is reported. Run with ``OMP_NUM_THREADS=1`` and ``nice``.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/scale_clients.py
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/scale_clients.py --clients 10 1000 --rounds 4
    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/scale_clients.py --clients 10 10000 --rounds 8 \
        --same-pairs --cli-arg=--federation.eval_panel_size=10                      # like with like
    .venv/bin/python benchmarks/scale_clients.py --clients 10 10000 --profile prof   # cProfile of rounds 2..R
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memory_clients import current_rss, peak_rss  # a sibling script: benchmarks/ is on sys.path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
MB = 2**20
CONFIG = ROOT / "configs" / "tiny.yaml"
CLIENTS_PER_ROUND = 10
LOCAL_STEPS = 2

try:  # the timer is a Lightning callback, built only where Lightning is importable
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover
    Callback = object


class RoundTimer(Callback):
    """Wall-clock marks of a fit: sanity (initial) evaluation, each round, its evaluations.

    Given to the CLI as ``--trainer.callbacks+=benchmarks.scale_clients.RoundTimer``; writes
    its marks as JSON to ``out`` at the end of fit.
    """

    def __init__(self, out: str, profile: str | None = None) -> None:
        self.out, self.profile = out, profile
        self.marks: dict = {"rounds": [], "val": [], "sanity": None}
        self._t: dict[str, float] = {}
        self._profiler = None  # cProfile of the measured rounds (2..R), when ``profile`` is set

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self._t["sanity"] = time.perf_counter()

    def on_sanity_check_end(self, trainer, pl_module) -> None:
        self.marks["sanity"] = time.perf_counter() - self._t["sanity"]

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        if self.marks["rounds"]:
            self.marks["rounds"][-1].update(end=now, cpu_end=cpu)
        if self.profile and len(self.marks["rounds"]) == 1:  # round 2 starts: the measured window
            import cProfile

            self._profiler = cProfile.Profile(time.process_time)  # CPU seconds: other jobs' load does not count
            self._profiler.enable()
        self.marks["rounds"].append({"start": now, "cpu_start": cpu, "val": 0.0, "val_cpu": 0.0, "tokens": 0})

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Padded tokens of the round's training batches (the forward/backward work follows them).
        self.marks["rounds"][-1]["tokens"] += sum(v.numel() for k, v in batch.items() if k.endswith("input_ids"))

    def on_validation_start(self, trainer, pl_module) -> None:
        self._t["val"], self._t["val_cpu"] = time.perf_counter(), time.process_time()

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or not self.marks["rounds"]:
            return
        self.marks["rounds"][-1]["val"] += time.perf_counter() - self._t["val"]
        self.marks["rounds"][-1]["val_cpu"] += time.process_time() - self._t["val_cpu"]

    def on_train_end(self, trainer, pl_module) -> None:
        self.marks["rounds"][-1].update(end=time.perf_counter(), cpu_end=time.process_time())
        if self._profiler is not None:
            self._profiler.disable()
            self._profiler.dump_stats(self.profile)
        Path(self.out).write_text(json.dumps(self.marks))


def _wrap_timed(owner: type, name: str, sink: list) -> None:
    """Record every call of ``owner.name`` in ``sink`` as (start, wall seconds, process CPU seconds)."""
    original = getattr(owner, name)

    def timed(self, *args, **kwargs):
        t, c = time.perf_counter(), time.process_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            sink.append((t, time.perf_counter() - t, time.process_time() - c))

    setattr(owner, name, timed)


def _record_gc(sink: list) -> None:
    """Record every collection of Python's cyclic garbage collector in ``sink`` as (start,
    wall seconds, generation): a full collection walks every tracked object, the N clients'
    token lists included, so it is the one per-round cost that could grow with N unseen by
    cProfile."""
    import gc

    started: dict = {}

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            sink.append((started["t"], time.perf_counter() - started.pop("t"), info["generation"]))

    gc.callbacks.append(callback)


def _in(calls: list, r: dict) -> list:
    return [c for c in calls if r["start"] <= c[0] < r["end"]]


def cli_args(
    num_clients: int,
    rounds: int,
    per_client: int,
    val_fraction: float,
    root: str,
    marks: str,
    extra: list[str],
    profile: str | None = None,
    pairs_file: str | None = None,
) -> list[str]:
    timer = {"class_path": f"{__name__}.RoundTimer", "init_args": {"out": marks, "profile": profile}}
    synthetic = json.dumps({"examples_per_client": per_client, "groups": ["positive"]})
    data = (
        [f"--data.init_args.dataset={pairs_file}"] if pairs_file else [f"--data.init_args.synthetic_args={synthetic}"]
    )
    return [
        "fit",
        "--config",
        str(CONFIG),
        f"--data.init_args.num_clients={num_clients}",
        *data,
        f"--data.init_args.val_fraction={val_fraction}",
        f"--federation.rounds={rounds}",
        f"--federation.clients_per_round={min(CLIENTS_PER_ROUND, num_clients)}",
        f"--federation.local_steps={LOCAL_STEPS}",
        f"--trainer.default_root_dir={root}",
        "--trainer.callbacks+=" + json.dumps(timer),
        *extra,
    ]


def write_same_pairs(path: Path, num_clients: int, per_client: int) -> str:
    """A JSONL file in which every one of ``num_clients`` clients holds ``per_client`` copies of
    one planted preference pair (``--same-pairs``).

    Every client then trains and evaluates on the same tokens, and from its first forward on the
    DPO reference cache (keyed by the tokens) serves every client: a round does the same work at
    any N, so what still grows with N is overhead.
    """
    from lightning_fed.datamodules.synthetic import planted_preferences

    row = {k: v[0] for k, v in planted_preferences(1, 1, groups=["positive"]).to_dict().items()}
    with path.open("w") as f:
        for client in range(num_clients):
            line = json.dumps({**row, "client": client}) + "\n"
            f.write(line * per_client)
    return str(path)


def _classify(run_dir: Path) -> dict[str, int]:
    """Bytes the run wrote, by kind: checkpoint (``last.ckpt`` + client-state files), all
    checkpoint files, TensorBoard, summary/records, other."""
    out = {"ckpt": 0, "ckpt_files_total": 0, "tensorboard": 0, "summary": 0, "other": 0, "files": 0}
    for path in run_dir.rglob("*"):
        if not path.is_file():
            continue
        size, rel = path.stat().st_size, path.relative_to(run_dir)
        out["files"] += 1
        in_ckpt_dir = "checkpoints" in rel.parts
        if path.name.startswith("events.out.tfevents"):
            out["tensorboard"] += size
        elif path.suffix in (".json", ".jsonl", ".parquet", ".csv") and not in_ckpt_dir:
            out["summary"] += size
        elif in_ckpt_dir or any("state" in p for p in rel.parts[:-1]):
            out["ckpt_files_total"] += size
            if path.name == "last.ckpt" or path.suffix != ".ckpt":  # the checkpoint and what it references
                out["ckpt"] += size
        else:
            out["other"] += size
    return out


def eval_defaults() -> dict:
    """The evaluation-related defaults of the package, read from the classes and the CLI."""
    import inspect

    from lightning_fed import cli
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules.federated import FederatedDataModule

    found = {}
    for cls in (FederatedDataModule, FederatedLoop):
        for name, p in inspect.signature(cls.__init__).parameters.items():
            if "eval" in name:
                found[f"{cls.__name__}.{name}"] = p.default
    try:  # what `eval_clients: None` means, where the package has an evaluation plan
        from lightning_fed.federation import evaluation_plan

        found["eval_clients None means"] = evaluation_plan.DEFAULT_EVAL_CLIENTS
    except (ImportError, AttributeError):
        pass
    source = inspect.getsource(cli.main)
    found["cli num_sanity_val_steps"] = "-1" if '"num_sanity_val_steps": -1' in source else "see cli.main"
    return found


def child(args: argparse.Namespace) -> dict:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    sys.path.insert(0, str(ROOT))
    import lightning.pytorch as pl

    from lightning_fed import cli
    from lightning_fed.datamodules.federated import FederatedDataModule
    from lightning_fed.modules.dpo import DPOModule

    setups: list = []
    saves: list = []
    references: list = []  # the DPO reference forwards (cache misses, or every pair without the cache)
    collections: list = []
    _wrap_timed(FederatedDataModule, "setup", setups)
    _wrap_timed(pl.Trainer, "save_checkpoint", saves)
    _wrap_timed(DPOModule, "compute_reference_log_probs", references)
    _record_gc(collections)
    rss: dict = {"start": current_rss()}
    original_setup = FederatedDataModule.setup

    def setup_with_rss(self, stage=None):
        before = current_rss()
        original_setup(self, stage)
        rss.setdefault("data_growth", current_rss() - before)

    FederatedDataModule.setup = setup_with_rss
    with tempfile.TemporaryDirectory(prefix="lf_scale_") as root:
        marks_file = str(Path(root) / "marks.json")
        run = str(Path(root) / "run")
        pairs = write_same_pairs(Path(root) / "pairs.jsonl", args.child, args.per_client) if args.same_pairs else None
        argv = cli_args(
            args.child,
            args.rounds,
            args.per_client,
            args.val_fraction,
            run,
            marks_file,
            args.cli_arg,
            args.profile,
            pairs,
        )
        t0 = time.perf_counter()
        cli.main(argv)
        total = time.perf_counter() - t0
        marks = json.loads(Path(marks_file).read_text())
        files = _classify(Path(root) / "run")
    rounds = []
    for r in marks["rounds"]:
        ckpt = sum(c[1] for c in _in(saves, r))
        wall = r["end"] - r["start"]
        cpu = r["cpu_end"] - r["cpu_start"]
        ref = _in(references, r)
        rounds.append(
            {
                "wall": wall,
                "cpu": cpu,
                "eval": r["val"],
                "ckpt": ckpt,
                "train": wall - r["val"] - ckpt,
                "eval_cpu": r.get("val_cpu", 0.0),
                "tokens": r.get("tokens", 0),
                "ref_forwards": len(ref),
                "ref_cpu": sum(c[2] for c in ref),
                "cpu_without_ref": cpu - sum(c[2] for c in ref),
                "gc_full_s": sum(c[1] for c in _in(collections, r) if c[2] == 2),
                "gc_s": sum(c[1] for c in _in(collections, r)),
            }
        )
    return {
        "clients": args.child,
        "fit_total_s": total,
        "setup_s": setups[0][1] if setups else None,
        "setup_calls": len(setups),
        "data_rss_growth": rss.get("data_growth"),
        "initial_eval_s": marks["sanity"],
        "rounds": rounds,
        "peak_rss": peak_rss(),
        "files": files,
    }


def _median(rounds: list[dict], key: str) -> float:
    measured = rounds[1:] or rounds  # round 1 is warm-up
    return statistics.median(r[key] for r in measured)


def run_child(n: int, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(n),
        "--rounds",
        str(args.rounds),
        "--per-client",
        str(args.per_client),
        "--val-fraction",
        str(args.val_fraction),
    ]
    if args.profile:
        cmd += ["--profile", f"{args.profile}.{n}"]
    if args.same_pairs:
        cmd += ["--same-pairs"]
    cmd += [f"--cli-arg={a}" for a in args.cli_arg]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ.copy())
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"child N={n} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 1000, 10000], help="values of N (first: base)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per run (>= 3; round 1 is warm-up)")
    parser.add_argument("--per-client", type=int, default=4, help="preference pairs per client (default 4)")
    parser.add_argument("--val-fraction", type=float, default=0.25, help="held-out share of each client's pairs")
    parser.add_argument(
        "--profile",
        help="write a cProfile of each child's measured rounds (2..R, with evaluation and checkpoints) to PROFILE.<N>",
    )
    parser.add_argument(
        "--same-pairs",
        action="store_true",
        help="every client holds copies of one pair (same tokens and reference-cache hits at every N)",
    )
    parser.add_argument(
        "--cli-arg",
        action="append",
        default=[],
        help="extra `lightning-fed fit` argument for every run, e.g. --cli-arg=--model.init_args.cache_reference=false",
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args)))
        return
    if args.rounds < 3:
        parser.error(f"--rounds must be >= 3 (round 1 is warm-up), got {args.rounds}")
    sys.path.insert(0, str(ROOT))
    print(
        f"# scale_clients: N={args.clients}, {CLIENTS_PER_ROUND} clients/round, K={LOCAL_STEPS}, rounds={args.rounds},"
        f" {args.per_client} {'copies of one pair' if args.same_pairs else 'pairs'} per client"
        f" (val_fraction {args.val_fraction}), {CONFIG.relative_to(ROOT)}"
        f" {' '.join(args.cli_arg)};"
        f" evaluation defaults: {eval_defaults()}",
        flush=True,
    )
    runs = []
    for n in args.clients:
        r = run_child(n, args)
        runs.append(r)
        print(
            f"# N={n}: fit {r['fit_total_s']:.1f}s, setup {r['setup_s']:.2f}s, initial eval {r['initial_eval_s']:.2f}s,"
            f" peak RSS {r['peak_rss'] / MB:.1f} MiB, files {r['files']}; rounds "
            + ", ".join(f"{x['wall']:.2f}s (eval {x['eval']:.2f}, ckpt {x['ckpt']:.2f})" for x in r["rounds"]),
            flush=True,
        )
    print()
    print(
        f"Date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, host {platform.node()},"
        f" {os.cpu_count()} CPU cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')};"
        f" per-round figures are medians of rounds 2..{args.rounds}"
    )
    print()
    print(
        "| N | data setup s | data RSS MiB | initial eval s | round 1 s | round s | train s | eval s | ckpt write s"
        " | peak RSS MiB | RSS growth MiB | ckpt KiB | all ckpt files KiB | TensorBoard KiB | summary/records KiB |"
    )
    print("|" + "---:|" * 15)
    base = runs[0]
    for r in runs:
        f = r["files"]
        print(
            f"| {r['clients']} | {r['setup_s']:.2f} | {r['data_rss_growth'] / MB:.1f} | {r['initial_eval_s']:.2f} |"
            f" {r['rounds'][0]['wall']:.2f} | {_median(r['rounds'], 'wall'):.2f} |"
            f" {_median(r['rounds'], 'train'):.2f} |"
            f" {_median(r['rounds'], 'eval'):.2f} | {_median(r['rounds'], 'ckpt'):.2f} | {r['peak_rss'] / MB:.1f} |"
            f" {(r['peak_rss'] - base['peak_rss']) / MB:.1f} | {f['ckpt'] / 1024:.1f} |"
            f" {f['ckpt_files_total'] / 1024:.1f} | {f['tensorboard'] / 1024:.1f} | {f['summary'] / 1024:.1f} |"
        )
    top = runs[-1]
    x = _median(top["rounds"], "wall") / _median(base["rounds"], "wall")
    cpu = _median(top["rounds"], "cpu") / _median(base["rounds"], "cpu")
    print(
        f"process CPU seconds per round (median): N={base['clients']} {_median(base['rounds'], 'cpu'):.2f},"
        f" N={top['clients']} {_median(top['rounds'], 'cpu'):.2f}, ratio {cpu:.2f} (less sensitive to other jobs)"
    )
    # Like with like: a DPO reference forward is per-client work (a client's first visit with the
    # reference cache on), not O(N) overhead; at N=10 with 10 clients per round the cache serves
    # every round after the first, at N=10000 the round's clients are new.
    for r in runs:
        per = [x["ref_cpu"] / x["ref_forwards"] for x in r["rounds"][1:] if x["ref_forwards"]]
        print(
            f"N={r['clients']}: reference forwards per round (median) {_median(r['rounds'], 'ref_forwards'):.0f},"
            f" their CPU {_median(r['rounds'], 'ref_cpu'):.3f} s"
            + (f" ({statistics.median(per) * 1000:.1f} ms each)" if per else "")
            + f"; CPU without them {_median(r['rounds'], 'cpu_without_ref'):.3f} s;"
            f" evaluation CPU {_median(r['rounds'], 'eval_cpu'):.3f} s;"
            f" training tokens {_median(r['rounds'], 'tokens'):.0f} (padded);"
            f" garbage collection {_median(r['rounds'], 'gc_s'):.3f} s (full {_median(r['rounds'], 'gc_full_s'):.3f} s)"
        )
    fair = _median(top["rounds"], "cpu_without_ref") / _median(base["rounds"], "cpu_without_ref")
    print(f"process CPU per round without the reference forwards: ratio {fair:.2f}")
    y = (top["peak_rss"] - base["peak_rss"]) / MB
    z = top["files"]["ckpt"] / base["files"]["ckpt"]
    print()
    print(
        f"scale: round_time_ratio_{top['clients']}_vs_{base['clients']}={x:.2f} rss_growth_mib={y:.0f}"
        f" ckpt_growth_ratio={z:.2f}"
    )


if __name__ == "__main__":
    main()
