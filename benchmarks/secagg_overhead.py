"""SecAgg+ round time / plain round time (issue 24), for 4 and 16 clients.

The same FedDPO round on the tiny GPT-2 of ``configs/tiny.yaml`` (every client trains, 2 local
steps) through the package's Flower ``ServerApp``/``ClientApp``, once with plain FedAvg and once
with :class:`~lightning_fed.deploy.secure_aggregation.SecureAggregation` around it (Flower's
SecAgg+: ``num_shares`` = all clients, threshold 0.5). A round's time is the server's record of
it (``summary.json`` ``seconds``: from sampling to the new global state, the SecAgg+ stages
included); round 1 warms up (model loads), the later rounds' mean is reported (``--rounds``).

``--transport grid`` (default) runs every ClientApp in this process on an in-process grid: the
ratio is the protocol's compute (key agreement, Shamir shares, encryption, masks, quantization,
four exchanges instead of one) against the same training, and the process CPU time of each run
is reported too. ``--transport deployment`` runs a local deployment (SuperLink + one SuperNode per
client, TLS, ``isolation=process``): wall time, with the transport and process hops included, and
the CPU time of all the deployment's processes over the whole run (start-up included).

    python benchmarks/secagg_overhead.py --clients 4 16 [--transport deployment] [--rounds 3] [--out F.jsonl]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def write_config(folder: Path, clients: int, secure: bool, rounds: int = 2) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["data"]["init_args"].update(
        num_clients=clients, synthetic_args={"examples_per_client": 16, "groups": ["positive"]}
    )
    cfg["federation"].update(rounds=rounds, clients_per_round=clients, local_steps=2, eval_every=rounds)
    if secure:
        cfg["federation"]["strategy"] = {
            "class_path": "lightning_fed.deploy.secure_aggregation.SecureAggregation",
            "init_args": {
                "strategy": {"class_path": "lightning_fed.strategies.FedAvg"},
                "num_shares": 1.0,
                "reconstruction_threshold": 0.5,
                "clipping_range": 0.5,
                "max_weight": 32.0,
            },
        }
    cfg["trainer"] = {"default_root_dir": str(folder / "runs"), "enable_model_summary": False}
    path = folder / f"{'secagg' if secure else 'plain'}_{clients}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class Grid:
    """Every node's ClientApp in this process; messages copied on delivery, as a transport does."""

    def __init__(self, client_app, num_nodes: int, run_config: dict) -> None:
        from flwr.app import Context, RecordDict

        self.client_app = client_app
        self.contexts = {
            k + 1: Context(k + 1, k + 1, {"partition-id": k, "num-partitions": num_nodes}, RecordDict(), run_config)
            for k in range(num_nodes)
        }

    def get_node_ids(self):
        return list(self.contexts)

    def send_and_receive(self, messages, *, timeout=None):
        return [self.client_app(copy.deepcopy(m), self.contexts[m.metadata.dst_node_id]) for m in messages]


def run_grid(config: Path, out: Path) -> tuple[list[float], float]:
    from flwr.supercore.task_identity import TaskIdentity

    from lightning_fed.deploy.apps import client_app, load_run
    from lightning_fed.deploy.server import FederatedServer

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    cpu = time.process_time()
    module, datamodule, loop, _ = load_run(str(config))
    server = FederatedServer(loop, module, datamodule.num_clients, out, timeout=600)
    server.start(Grid(client_app, datamodule.num_clients, {"config": str(config)}), min_nodes=datamodule.num_clients)
    return [r["seconds"] for r in server.server.report.history], time.process_time() - cpu


def deployment_cpu() -> float:
    """CPU seconds (user + system, their waited-for children included) of every live process under
    this one: the SuperLink, the SuperNodes, their ClientApp processes and the ServerApp."""
    from lightning_fed.deploy.processes import _descendants

    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in _descendants([os.getpid()]):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime (fields 14-17 of stat)
    return total / tick


def run_deployment(config: Path, out: Path, clients: int) -> tuple[list[float], float]:
    from lightning_fed.deploy.local_deployment import LocalDeployment

    app = ROOT / "lightning_fed" / "deploy" / "flower_app"
    env = {"PYTHONPATH": str(ROOT)}
    with LocalDeployment(
        app, num_supernodes=clients, workdir=out / "dep", extra_env=env, tls=True, isolation="process"
    ) as dep:
        result = dep.run({"config": str(config), "output-dir": str(out / "run"), "timeout": 600.0}, timeout=3600)
        if not result.ok:
            raise RuntimeError(result.output[-3000:])
        cpu = deployment_cpu()  # before the processes are stopped: start-up, model loads and every round
    summary = json.loads((out / "run" / "summary.json").read_text())
    return [r["seconds"] for r in summary["rounds"]], cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--transport", choices=("grid", "deployment"), default="grid")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per run; round 1 warms up, the rest are averaged")
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per client count here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.clients:
            times = {}
            for secure in (False, True):
                folder = Path(tmp) / f"{n}_{secure}"
                folder.mkdir()
                config = write_config(folder, n, secure, args.rounds)
                if args.transport == "grid":
                    times[secure] = run_grid(config, folder / "out")
                else:
                    times[secure] = run_deployment(config, folder, n)
            (plain, plain_cpu), (secure, secure_cpu) = times[False], times[True]
            p, q = sum(plain[1:]) / len(plain[1:]), sum(secure[1:]) / len(secure[1:])
            rows.append((n, p, q, q / p, plain_cpu, secure_cpu))
            if args.out is not None:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                record = {"transport": args.transport, "clients": n, "plain_rounds_s": plain, "secagg_rounds_s": secure}
                record |= {"plain_cpu_s": plain_cpu, "secagg_cpu_s": secure_cpu, "ratio": q / p}
                with args.out.open("a") as f:
                    f.write(json.dumps(record) + "\n")
    print(f"\ntransport: {args.transport}")
    cpu = "process" if args.transport == "grid" else "deployment processes'"
    print(f"| clients | plain round (s) | SecAgg+ round (s) | ratio | {cpu} CPU plain / SecAgg+ run (s) |")
    print("|---|---|---|---|---|")
    for n, p, s, r, pc, sc in rows:
        print(f"| {n} | {p:.2f} | {s:.2f} | {r:.2f} | {pc:.1f} / {sc:.1f} |")


if __name__ == "__main__":
    main()
