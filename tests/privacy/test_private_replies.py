"""What a private run lets out besides the update, in both transports (issue 32, items 5 and 6):
a Flower client's evaluation reply follows the in-process rule (nothing, or means with a bucketed
count), and an update rejected by ``federation.max_update_norm`` is named by neither its client nor
its norm in any file or log line."""

import json
import math
import re
import warnings

import torch
import yaml

from lightning_fed.deploy.records import METRICS
from lightning_fed.federation import RoundHook
from tests.helpers.flower_sim import ROOT, run_in_process, run_on_grid

NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def _config(tmp_path, name="private.yaml", **privacy):
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    fed = cfg["federation"]
    fed.update(rounds=2, local_steps=2, privacy={"noise_multiplier": 1.0, **privacy})
    fed["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}, "clip_norm": 0.5},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return cfg, path


def _evaluate_replies(config, out):
    replies = []

    def record(reply):
        if reply.metadata.message_type == "evaluate":
            replies.append(dict(reply.content.metric_records[METRICS]))
        return reply

    run_on_grid(str(config), out, [], tamper=record)
    return replies


def test_a_private_flower_client_sends_no_evaluation(tmp_path):
    """tiny.yaml's clients hold 6 validation examples; a non-private client sends them and its
    loss (the control), a private one only its id and a count of 0, as the in-process report
    writes nothing of the clients' evaluations."""
    _, config = _config(tmp_path)
    replies = _evaluate_replies(config, tmp_path / "flower")
    assert replies and all(r == {"client-id": r["client-id"], "num-examples": 0} for r in replies)

    cfg = yaml.safe_load(config.read_text())
    del cfg["federation"]["privacy"]
    cfg["federation"]["strategy"] = {"class_path": "lightning_fed.strategies.FedAvg"}
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(cfg))
    replies = _evaluate_replies(plain, tmp_path / "plain")
    assert replies and all(r["num-examples"] == 6 and "loss" in r for r in replies)


def test_report_validation_sends_the_means_with_a_bucketed_count(tmp_path):
    _, config = _config(tmp_path, report_validation=True)
    replies = _evaluate_replies(config, tmp_path / "flower")
    assert replies and all(r["num-examples"] == 4 and {"loss", "pref_acc"} <= set(r) for r in replies)  # 6 -> 4


class Inflate(RoundHook):
    """Client 0 uploads its state times 1000 (a change far above any ``max_update_norm`` below)."""

    def on_client_end(self, turn, trainer, module, update):
        if update.client_id == 0:
            for k, v in update.state.items():
                update.state[k] = v * 1000.0


def _numbers_in(text):
    return [float(x) for x in NUMBER.findall(text)]


def test_a_rejected_update_is_named_by_neither_client_nor_norm_in_both_transports(tmp_path, monkeypatch):
    """Every client trains every round (4 of 4), client 0's upload is inflated and rejected by
    ``max_update_norm = 50`` (the others' changes are below 1); nothing the run writes or warns
    holds ``client 0``'s id with the rejection, or the rejected norm (to 4 digits, as printed)."""
    import lightning_fed.federation.screening as screening
    import lightning_fed.federation.server_round as server_round

    norms = []

    def recording_norm(received, state):
        norms.append(real_norm(received, state))
        return norms[-1]

    real_norm = screening.update_norm
    monkeypatch.setattr(screening, "update_norm", recording_norm)
    monkeypatch.setattr(server_round, "update_norm", recording_norm)
    cfg, _ = _config(tmp_path)
    cfg["federation"].update(clients_per_round=4, max_update_norm=50.0)
    cfg["federation"]["hooks"] = [{"class_path": "tests.privacy.test_private_replies.Inflate"}]
    config = tmp_path / "screened.yaml"
    config.write_text(yaml.safe_dump(cfg))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local = run_in_process(str(config), tmp_path / "local", [])
        server, _ = run_on_grid(str(config), tmp_path / "flower", [])
    rejected = [n for n in norms if n > 50.0]
    assert len(rejected) >= 4 and max(n for n in norms if n <= 50.0) < 1.0  # 2 rounds x 2 transports
    for loop in (local.server, server.server):
        assert loop.fault_counts()["rejected_updates"] == 2  # the run's total is kept
    lines = [str(w.message) for w in caught if str(w.message).startswith("round ") and "rejected" in str(w.message)]
    assert len(lines) == 4, lines
    texts = {p: p.read_text() for p in list(tmp_path.rglob("*.json")) + list(tmp_path.rglob("*.jsonl"))}
    assert any(p.name == "rounds.jsonl" for p in texts) and any(p.name == "summary.json" for p in texts)
    for where, text in [*((str(p), t) for p, t in texts.items()), *(("warning", line) for line in lines)]:
        assert not re.search(r"client 0\b|update norm \d", text), (where, text[:300])
        leaked = [x for x in _numbers_in(text) for n in rejected if math.isclose(x, n, rel_tol=1e-3)]
        assert not leaked, (where, leaked)
    for path, text in texts.items():
        if path.name == "rounds.jsonl":
            for record in map(json.loads, text.splitlines()):
                assert "rejected" not in record, record
                assert "round/rejected_updates" not in record.get("scalars", {})


def test_a_non_private_run_still_names_the_rejected_client_and_its_norm(tmp_path):
    """The control: without DP the record keeps the client and its norm."""
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["federation"].update(rounds=1, local_steps=2, clients_per_round=4, max_update_norm=50.0)
    cfg["federation"]["hooks"] = [{"class_path": "tests.privacy.test_private_replies.Inflate"}]
    config = tmp_path / "plain.yaml"
    config.write_text(yaml.safe_dump(cfg))
    local = run_in_process(str(config), tmp_path / "local", [])
    (record,) = local.server.report.history.lines()
    assert list(record["rejected"]) in (["0"], [0]) and "update norm" in next(iter(record["rejected"].values()))
    assert torch.is_tensor(next(iter(local.server.global_state.values())))


def test_a_private_secagg_client_sends_no_evaluation_either(tmp_path):
    """SecAgg+ with client-level DP (distributed noise shares): the evaluate replies are the same
    handler's, so they carry no metric and a count of 0 there too."""
    cfg, _ = _config(tmp_path)
    fed = cfg["federation"]
    fed.update(rounds=1, clients_per_round=3)
    fed["strategy"] = {
        "class_path": "lightning_fed.deploy.secure_aggregation.SecureAggregation",
        "init_args": {
            "protocol": "secagg+",
            "num_shares": 3,
            "reconstruction_threshold": 2,
            "clipping_range": 0.5,
            "max_weight": 1.0,
            "strategy": fed["strategy"],
        },
    }
    config = tmp_path / "secagg.yaml"
    config.write_text(yaml.safe_dump(cfg))
    replies = _evaluate_replies(config, tmp_path / "flower")
    assert replies and all(r == {"client-id": r["client-id"], "num-examples": 0} for r in replies)
