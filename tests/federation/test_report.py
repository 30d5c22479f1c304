"""RoundReport at scale: round history in rounds.jsonl, per-client metrics in Parquet, resume
cuts the files back to the checkpoint, bounded checkpoints and summary.json, TensorBoard
histograms past federation.per_client_scalars. Values are worked out by hand."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fed.evaluation.stage_results import StageResults, stage_scalars
from lightning_fed.federation.client_metrics import client_file, read_client_metrics
from lightning_fed.federation.client_stats import client_summary, distribution
from lightning_fed.federation.report import RoundReport
from lightning_fed.strategies.base import ClientUpdate


def _trainer(folder: Path, loggers: list | None = None) -> SimpleNamespace:
    return SimpleNamespace(is_global_zero=True, loggers=loggers or [], log_dir=str(folder))


def _round(report: RoundReport, trainer, r: int, clients: list[int], evaluated: list[int] | None = None) -> None:
    """Round ``r`` (0-based): client c trains with loss c + r and 3 steps on c + 1 examples;
    each evaluated client c has two examples of pref_acc 1 and c / 10."""
    updates = [ClientUpdate(c, c + 1, {}, metrics={"train_loss": float(c + r), "steps": 3}) for c in clients]
    report.end_round(trainer, r, clients, updates, [], {}, up_bytes=10, down_bytes=20, seconds=1.5)
    if evaluated is not None:
        _evaluate(report, trainer, r + 1, evaluated)


def _evaluate(report: RoundReport, trainer, round_number: int, evaluated: list[int], initial: bool = False) -> None:
    report.start_eval()
    ids = torch.tensor([c for c in evaluated for _ in range(2)])
    acc = torch.tensor([v for c in evaluated for v in (1.0, c / 10)])
    report.add_eval(ids, {"pref_acc": acc})
    report.end_eval(trainer, None, round_number=round_number, initial=initial)


def test_distribution_over_clients_by_hand():
    # sorted 1..5: p10 = 1 + 0.1 * 4 * (2 - 1) = 1.4, p50 = 3, p90 = 4 + 0.6 * (5 - 4) = 4.6
    assert distribution([5.0, 1.0, 4.0, 2.0, 3.0]) == pytest.approx(
        {"mean": 3.0, "min": 1.0, "max": 5.0, "p10": 1.4, "p50": 3.0, "p90": 4.6}
    )
    # b is reported by two clients only: its stats are over those two
    stats = client_summary({0: {"a": 0.0, "b": 2.0}, 1: {"a": 1.0}, 2: {"a": 2.0, "b": 4.0}})
    assert stats["a_client_mean"] == 1.0 and stats["a_client_p10"] == pytest.approx(0.2)
    assert stats["b_client_min"] == 2.0 and stats["b_client_p50"] == 3.0 and stats["b_client_p90"] == pytest.approx(3.8)


def test_one_line_per_round_per_client_metrics_in_parquet(tmp_path):
    report, trainer = RoundReport(), _trainer(tmp_path)
    _evaluate(report, trainer, 0, [0, 1, 2], initial=True)
    _round(report, trainer, 0, [1, 3], evaluated=[0, 2])
    _round(report, trainer, 1, [0, 2])  # a round without evaluation
    _round(report, trainer, 2, [1, 2], evaluated=[1])

    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [x["round"] for x in lines] == [1, 2, 3]
    assert all("train" not in x and "val_clients" not in x for x in lines)  # per-client values are not in it
    # round 1: losses 1 and 3; round 2: 0 + 1 and 2 + 1
    assert lines[0]["train_stats"]["train_loss_client_mean"] == 2.0
    assert lines[0]["train_stats"]["train_loss_client_p90"] == pytest.approx(2.8)
    assert lines[1]["train_stats"]["train_loss_client_min"] == 1.0 and "val" not in lines[1]
    # round 1 evaluates clients 0 (1, 0) and 2 (1, 0.2): example mean 0.55, client means 0.5 and 0.6
    assert lines[0]["val"]["pref_acc"] == pytest.approx(0.55)
    assert lines[0]["val"]["pref_acc_client_p10"] == pytest.approx(0.51)

    train = read_client_metrics(tmp_path, "train").to_pylist()
    assert len(train) == 2 + 2 + 2  # rows = clients reported
    assert train[0] == {"round": 1, "client": 1, "stage": "train", "num_examples": 2, "train_loss": 1.0, "steps": 3.0}
    val = read_client_metrics(tmp_path, "val").to_pylist()
    assert [(r["round"], r["client"], r["num_examples"]) for r in val] == [(0, 0, 2), (0, 1, 2), (0, 2, 2)] + [
        (1, 0, 2),
        (1, 2, 2),
        (3, 1, 2),
    ]
    assert [r["pref_acc"] for r in val][3:] == pytest.approx([0.5, 0.6, 0.55])

    # the in-memory view: count and last record; older records read back from the files, as they were made
    history = report.history
    assert len(history) == 3 and history[-1] is history[2]
    assert history[0]["train"] == {"1": {"train_loss": 1.0, "steps": 3}, "3": {"train_loss": 3.0, "steps": 3}}
    assert history[0]["val_clients"] == {"0": {"pref_acc": 0.5}, "2": {"pref_acc": pytest.approx(0.6)}}
    assert "val_clients" not in history[1] and history[1]["clients"] == [0, 2]
    assert [r["round"] for r in history] == [1, 2, 3]

    summary = json.loads(Path(report.write_summary(trainer, {})).read_text())
    assert summary["rounds"] == lines and summary["round_history"] == "rounds.jsonl"
    assert summary["final"] == {"val": lines[2]["val"], "val_clients": {"1": {"pref_acc": pytest.approx(0.55)}}}
    assert summary["initial"]["val_clients"].keys() == {"0", "1", "2"}
    assert summary["total_up_bytes"] == 30 and summary["seconds_per_round"] == [1.5] * 3


def test_resume_cuts_the_files_back_to_the_checkpoint(tmp_path):
    straight = tmp_path / "straight"
    report = RoundReport()
    for r in range(3):
        _round(report, _trainer(straight), r, [r, r + 1], evaluated=[r])

    killed = tmp_path / "killed"
    report = RoundReport()
    _round(report, _trainer(killed), 0, [0, 1], evaluated=[0])
    state = report.state_dict()  # the checkpoint after round 1 ...
    _round(report, _trainer(killed), 1, [1, 2], evaluated=[1])  # ... round 2 recorded, then killed
    assert len((killed / "rounds.jsonl").read_text().splitlines()) == 2

    resumed = RoundReport()
    resumed.load_state_dict(state)
    assert len(resumed.history) == 1 and resumed.history[0]["train"].keys() == {"0", "1"}  # read before writing
    trainer = _trainer(killed)
    resumed.history.attach(killed)
    assert len((killed / "rounds.jsonl").read_text().splitlines()) == 1  # round 2 dropped ...
    assert not client_file(killed, "train", 2).exists() and not client_file(killed, "val", 2).exists()
    for r in (1, 2):  # ... and done again
        _round(resumed, trainer, r, [r, r + 1], evaluated=[r])
    assert (killed / "rounds.jsonl").read_bytes() == (straight / "rounds.jsonl").read_bytes()
    for stage in ("train", "val"):
        assert read_client_metrics(killed, stage).equals(read_client_metrics(straight, stage))

    # resumed into another folder: the checkpoint's round comes along, not the killed round 2
    other = RoundReport()
    other.load_state_dict(state)
    for r in (1, 2):
        _round(other, _trainer(tmp_path / "elsewhere"), r, [r, r + 1], evaluated=[r])
    assert (tmp_path / "elsewhere" / "rounds.jsonl").read_bytes() == (straight / "rounds.jsonl").read_bytes()

    # a checkpoint of the earlier format (the records themselves) is written out
    legacy = RoundReport()
    legacy.load_state_dict({"history": [dict(report.history[0])]})
    _round(legacy, _trainer(tmp_path / "legacy"), 1, [1, 2], evaluated=[1])
    assert [r["train"].keys() for r in legacy.history] == [{"0", "1"}, {"1", "2"}]
    assert len((tmp_path / "legacy" / "rounds.jsonl").read_text().splitlines()) == 2


def _nbytes(state: dict) -> int:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


def test_checkpoint_and_summary_do_not_grow_with_rounds_or_clients(tmp_path):
    report, trainer = RoundReport(), _trainer(tmp_path / "a")
    _evaluate(report, trainer, 0, [0, 1], initial=True)
    _round(report, trainer, 0, [0, 1], evaluated=[0, 1])
    after_one = _nbytes(report.state_dict())
    for r in range(1, 30):
        _round(report, trainer, r, [r, r + 1], evaluated=[r, r + 1])
    assert report.state_dict()["rounds"] == 30 and "history" not in report.state_dict()
    assert _nbytes(report.state_dict()) == after_one

    sizes = {}
    for n in (10, 10_000):  # the same 2 clients trained and evaluated per round, N clients in all
        report, trainer = RoundReport(), _trainer(tmp_path / f"n{n}")
        report.set_clients([7] * n, [2] * n)
        _evaluate(report, trainer, 0, [0, 1], initial=True)
        for r in range(3):
            _round(report, trainer, r, [r, r + 1], evaluated=[r, r + 1])
        path = report.write_summary(trainer, {})
        sizes[n] = path.stat().st_size
        summary = json.loads(path.read_text())
        assert summary["clients"]["num_clients"] == n and summary["clients"]["train_examples"] == 7 * n
        sizes_table = pq.read_table(tmp_path / f"n{n}" / "client_sizes.parquet")
        assert sizes_table.num_rows == n and sum(sizes_table.column("val_size").to_pylist()) == 2 * n
    assert abs(sizes[10_000] - sizes[10]) <= 16  # the digits of N and of the totals


def _tags(folder: Path) -> dict[str, list[str]]:
    (events,) = folder.rglob("events.out.tfevents.*")
    acc = EventAccumulator(str(events), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    return acc.Tags()


@pytest.mark.parametrize("threshold", [2, 3])
def test_histograms_instead_of_per_client_scalars_past_the_threshold(tmp_path, threshold):
    logger = TensorBoardLogger(str(tmp_path), name="", version="")
    report, trainer = RoundReport(per_client_scalars=threshold), _trainer(tmp_path, [logger])
    _round(report, trainer, 0, [0, 1, 2], evaluated=[0, 1, 2])
    # `lightning-fed test`: clients 0, 1, 2 with pref_acc 0, 1 / 2 and 1 (1, 2 and 1 examples)
    stage = StageResults()
    stage.add(torch.tensor([0, 1, 1, 2]), {"pref_acc": torch.tensor([0.0, 1.0, 0.0, 1.0])})
    results = stage.summary()
    assert results["metrics"]["pref_acc"] == 0.5 and results["metrics"]["pref_acc_client_p10"] == pytest.approx(0.1)
    logger.log_metrics(stage_scalars(trainer, results, "test", 1, threshold), step=1)
    logger.experiment.flush()
    tags = _tags(tmp_path)
    per_client = sorted(t for t in tags["scalars"] if t.startswith(("client_", "test_client_")))
    if threshold < 3:
        assert per_client == []
        assert sorted(tags["histograms"]) == [
            "clients/steps",
            "clients/train_loss",
            "clients/val_pref_acc",
            "test_clients/num_examples",
            "test_clients/pref_acc",
        ]
    else:  # at the threshold: one scalar per client and metric, as before, and no histogram
        assert len(per_client) == 3 * 2 + 3 + 3 * 2 and {"client_2/val_pref_acc", "test_client_1/pref_acc"} <= set(
            per_client
        )
        assert tags["histograms"] == []
    # the distribution over clients, for every logger, either way
    assert {"round/train_loss_client_p50", "round/val_pref_acc_client_p90", "test/pref_acc_client_p50"} <= set(
        tags["scalars"]
    )


def test_per_client_scalars_is_a_federation_option():
    from lightning_fed.callbacks import FederatedLoop

    with pytest.raises(ValueError, match=r"federation.per_client_scalars must be >= 0, got -1"):
        FederatedLoop(per_client_scalars=-1)
    assert FederatedLoop(per_client_scalars=0).server.report.per_client_scalars == 0
    assert FederatedLoop().server.report.per_client_scalars == 32
