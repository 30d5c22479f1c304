"""A client's LoRA rank from a column of its data (``ClientRanks(column=...)``), in process and
over Flower; a missing or non-constant column is a one-line error before anything is written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_fed.datamodules.sources import read_source
from lightning_fed.federation import Replies
from lightning_fed.heterogeneity import ClientRanks
from lightning_fed.strategies import HetLoRA
from tests.helpers.files import snapshot
from tests.helpers.runs import preference_data, tiny_dpo

ROOT = Path(__file__).resolve().parents[2]
RANKS = [1, 2, 4, 4]  # client k's `rank` column; r_max = lora.r = 4


def _planted(path: Path, rank_of=lambda client, row: RANKS[client]) -> str:
    """The tiny synthetic preference set (4 clients, `client` column) with a `rank` column."""
    rows = read_source("synthetic:preferences", "train", {"num_clients": 4, "examples_per_client": 12}).to_list()
    with open(path, "w") as fh:
        for i, row in enumerate(rows):
            fh.write(json.dumps({**row, "rank": rank_of(row["client"], i)}) + "\n")
    return str(path)


def _config(tmp_path: Path, dataset: str, column: str = "rank") -> str:
    config = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    config["data"]["init_args"].update(dataset=dataset, synthetic_args=None, val_fraction=0.25)
    config["federation"].update(
        rounds=2,
        clients_per_round=2,
        local_steps=2,
        strategy={"class_path": "lightning_fed.strategies.HetLoRA"},
        hooks=[{"class_path": "lightning_fed.heterogeneity.ClientRanks", "init_args": {"column": column}}],
    )
    path = tmp_path / "rank_column.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _check_bytes(history, global_state) -> None:
    full = sum(4 * v.numel() for v in global_state.values())  # float32, all LoRA at rank 4
    for record in history:
        expected = sum(full * RANKS[c] // 4 for c in record["clients"])
        assert record["up_bytes"] == record["down_bytes"] == expected, record


def test_each_client_trains_the_rank_its_data_says_in_process(tmp_path):
    from tests.helpers.flower_sim import run_in_process

    loop = run_in_process(_config(tmp_path, _planted(tmp_path / "d.jsonl")), tmp_path / "run", [])
    assert loop.server.strategy.client_ranks == RANKS
    _check_bytes(loop.server.report.history, loop.server.global_state)
    assert loop.server.hook_summaries() == {"ClientRanks": {"clients_per_rank": {"1": 1, "2": 1, "4": 2}}}


def test_over_flower_the_clients_report_their_rank_and_the_bytes_match(tmp_path):
    """The Flower server holds no client data: it asks every client before round 1; same ranks
    and bytes as in process (the in-process run is the test above, on the same file and seed)."""
    from tests.helpers.flower_sim import run_in_process, run_on_grid

    config = _config(tmp_path, _planted(tmp_path / "d.jsonl"))
    server, _ = run_on_grid(config, tmp_path / "flower", [])
    assert server.server.strategy.client_ranks == RANKS
    _check_bytes(server.server.report.history, server.server.global_state)
    loop = run_in_process(config, tmp_path / "run", [])
    assert [r["up_bytes"] for r in server.server.report.history] == [r["up_bytes"] for r in loop.server.report.history]


def test_a_client_answers_from_its_own_rows():
    data = preference_data(num_clients=4, per_client=8)
    data.tokenizer = tiny_dpo().tokenizer
    data.setup("fit")
    hook = ClientRanks(column="rank")
    assert "rank" not in data.client(0).columns and data.client(0).columns["client"] == [0] * 8
    assert hook.answer_query(None, data.client(2), 2, 0, {"column": "rank"}) == {
        "error": "federation.hooks: ClientRanks.column='rank': no such column in client 2's data"
        " (its non-text columns: client, group)"
    }
    data.client(2).columns["rank"] = [8, 8, 4]
    assert hook.answer_query(None, data.client(2), 2, 0, {"column": "rank"}) == {
        "error": "federation.hooks: ClientRanks.column='rank': client 2 needs one positive integer rank, got [4, 8]"
    }
    data.client(2).columns["rank"] = [8, 8]
    assert hook.answer_query(None, data.client(2), 2, 0, {"column": "rank"}) == {"rank": 8}


def test_the_server_sets_the_ranks_from_the_replies_or_raises_the_clients_error():
    class Server:
        num_clients = 2
        strategy = HetLoRA()

    Server.strategy.setup(
        {"m.lora_A.default.weight": torch.zeros(4, 3), "m.lora_B.default.weight": torch.zeros(3, 4)}, 2
    )
    hook = ClientRanks(column="rank")
    assert hook.client_queries(Server, None, None, 0, [0]) == {0: {"column": "rank"}, 1: {"column": "rank"}}
    with pytest.raises(
        ValueError, match=r"^federation.hooks: ClientRanks.column='rank': client 1 did not report its rank$"
    ):
        hook.on_replies(Server, None, None, Replies(0, [0], {0: {"rank": 2}}))
    with pytest.raises(ValueError, match=r"^boom$"):
        hook.on_replies(Server, None, None, Replies(0, [0], {0: {"rank": 2}, 1: {"error": "boom"}}))
    hook.on_replies(Server, None, None, Replies(0, [0], {0: {"rank": 2}, 1: {"rank": 4}}))
    assert hook.ranks == [2, 4] and Server.strategy.client_ranks == [2, 4]
    assert hook.client_queries(Server, None, None, 1, [0]) == {}  # asked once


def _cli(config: str, root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    args = ["fit", "--config", config, f"--trainer.default_root_dir={root}"]
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("column", "rank_of", "message"),
    [
        (
            "device_rank",
            lambda client, row: RANKS[client],
            "error: federation.hooks: ClientRanks.column='device_rank': no such column in client 0's data"
            " (its non-text columns: client, group, rank)",
        ),
        (
            "rank",
            lambda client, row: 8 if (client, row % 2) == (1, 1) else RANKS[client],
            "error: federation.hooks: ClientRanks.column='rank': client 1 needs one positive integer rank, got [2, 8]",
        ),
    ],
    ids=["missing", "not_constant"],
)
def test_a_bad_column_is_one_line_exit_2_and_nothing_written(tmp_path, column, rank_of, message):
    config = _config(tmp_path, _planted(tmp_path / "d.jsonl", rank_of), column)
    before = snapshot(tmp_path)
    proc = _cli(config, tmp_path / "run")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == f"{message}\n(run with --debug or LIGHTNING_FED_DEBUG=1 for the traceback)\n"
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()
