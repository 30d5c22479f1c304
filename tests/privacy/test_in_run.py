"""Privacy wired into whole runs: Poisson rounds (an empty one included), the budget stop,
``privacy/epsilon`` per round, resume, and reports without raw per-client figures in both transports."""

import json
import math

import pytest
import torch
import yaml
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.deploy.records import METRICS
from lightning_fed.federation.hooks import RoundHook
from lightning_fed.federation.sampling import poisson_sample_clients
from lightning_fed.privacy import ClientLevelDP, PrivacyAccountant, PrivacyConfig
from lightning_fed.state import clone_state
from lightning_fed.strategies import FedAvg
from tests.helpers import uploads
from tests.helpers.flower_sim import ROOT, assert_same_state, run_in_process, run_on_grid
from tests.helpers.runs import fit, preference_data, tiny_dpo


class Snapshots(RoundHook):
    def __init__(self):
        self.states = []

    def after_aggregate(self, server, trainer, module, round_idx):
        self.states.append(clone_state(server.global_state))


def test_poisson_rounds_in_process_an_empty_one_has_no_update(tmp_path):
    """Seed 18, N = 4, q = 0.3: rounds sample [1, 3], [], [0] (poisson_sample_clients)."""
    expected = [poisson_sample_clients(4, 0.3, 18, r) for r in range(3)]
    assert expected == [[1, 3], [], [0]]
    snaps = Snapshots()
    loop = FederatedLoop(rounds=3, local_steps=1, sampling="poisson", sampling_rate=0.3, seed=18, hooks=[snaps])
    fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    history = list(loop.server.report.history)
    assert [r["clients"] for r in history] == expected and [r["aggregated"] for r in history] == expected
    assert len(snaps.states) == 3
    for k, v in snaps.states[1].items():  # the empty round changed nothing
        assert torch.equal(v, snaps.states[0][k])
    assert any(not torch.equal(v, snaps.states[1][k]) for k, v in snaps.states[2].items())


def _dp_loop(rounds, target=None, hooks=None):
    dp = ClientLevelDP(FedAvg(), clip_norm=0.5, seed=0)
    privacy = PrivacyConfig(noise_multiplier=1.0, target_epsilon=target, delta=4**-1.1)
    return FederatedLoop(rounds=rounds, local_steps=1, strategy=dp, privacy=privacy, seed=0, hooks=hooks)


def test_the_run_stops_before_the_round_that_would_exceed_the_budget(tmp_path):
    """z = 1, 2 of 4 clients (fixed size: accounted at rate 1), delta = 4^-1.1: epsilon 1.11, 2.13,
    3.06 after rounds 1-3; target 2.5 allows 2 of the 4 rounds. TensorBoard gets privacy/epsilon."""
    loop = _dp_loop(4, target=2.5)
    logger = TensorBoardLogger(str(tmp_path), name="tb", version=0)
    trainer = fit(tiny_dpo(), preference_data(), loop, str(tmp_path), logger=logger)
    assert len(loop.server.report.history) == 2 and trainer.current_epoch == 2
    summary = json.loads((tmp_path / "tb" / "version_0" / "summary.json").read_text())
    privacy = summary["privacy"]
    assert privacy["stopped"] == {
        "before_round": 3,
        "reason": "the next round would exceed federation.privacy.target_epsilon",
    }
    assert privacy["epsilon"]["client"] == pytest.approx(2.134, abs=1e-3)
    assert privacy["client_level"]["noise_multiplier"] == 1.0 and privacy["client_level"]["target_epsilon"] == 2.5
    events = EventAccumulator(str(tmp_path / "tb" / "version_0"))
    events.Reload()
    eps = [(e.step, e.value) for e in events.Scalars("privacy/epsilon")]
    assert [s for s, _ in eps] == [1, 2]
    assert [v for _, v in eps] == [pytest.approx(1.1076, abs=1e-3), pytest.approx(2.134, abs=1e-3)]
    assert not [t for t in events.Tags()["scalars"] if t.startswith("client_")]


def test_resume_continues_the_same_noise_and_epsilon(tmp_path):
    straight = _dp_loop(4)
    fit(tiny_dpo(), preference_data(), straight, str(tmp_path / "straight"))
    first = _dp_loop(2)
    fit(tiny_dpo(), preference_data(), first, str(tmp_path / "first"))
    ckpt = tmp_path / "first" / "ckpt" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["federation"]["privacy"]["rounds_accounted"] == 2
    resumed = _dp_loop(4)
    fit(tiny_dpo(), preference_data(), resumed, str(tmp_path / "resumed"), ckpt_path=str(ckpt))
    assert_same_state(resumed.server.global_state, straight.server.global_state)
    a, b = resumed.server.privacy_section(), straight.server.privacy_section()
    assert a["epsilon"] == b["epsilon"] and a["epsilon"]["client"] == pytest.approx(3.933, abs=1e-3)
    assert resumed.server.privacy.client_dp.steps_done == 4


def _private_config(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    fed = cfg["federation"]
    fed.update(rounds=2, local_steps=2, privacy={"noise_multiplier": 1.0})
    fed["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}, "clip_norm": 0.5, "seed": 0},
    }
    fed["hooks"] = [{"class_path": "tests.helpers.uploads.RecordUploads"}]
    path = tmp_path / "private.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _numbers(value):
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, float) else []


def _assert_no_raw_client_figures(run, losses):
    texts = {p: p.read_text() for p in list(run.rglob("*.json")) + list(run.rglob("*.jsonl"))}
    assert any(p.name == "summary.json" for p in texts) and any(p.name == "rounds.jsonl" for p in texts)
    for path, text in texts.items():
        for key in ('"val_clients"', "train_loss", '"update_norm"', "_client_p"):
            assert key not in text, (path, key)
        records = [json.loads(line) for line in text.splitlines()] if path.suffix == ".jsonl" else [json.loads(text)]
        rounds = records if path.suffix == ".jsonl" else records[0].get("rounds", [])
        assert not [r for r in rounds if "train" in r], path  # no per-client training record
        found = [x for x in _numbers(records) if any(math.isclose(x, v, rel_tol=1e-9) for v in losses)]
        assert not found, (path, found)
    assert not list(run.rglob("client_metrics/**/*.parquet"))
    summary = json.loads(next(p for p in texts if p.name == "summary.json").read_text())
    assert summary["privacy"]["enabled"]
    assert summary["privacy"]["channels"]["metrics"]["protection"] == "not_sent+withheld"
    for stat in (summary["clients"].get("train_size") or {}).values():
        assert stat == 16  # 18 examples per client, bucketed


def test_private_reports_hold_no_raw_client_figures_in_both_transports(tmp_path):
    """tiny.yaml's clients hold 18 training examples each (not a power of two): they upload 16,
    and no training loss (a non-private client sends it: tests/privacy/test_selector_noise.py)."""
    config = _private_config(tmp_path)
    uploads.SEEN.clear()
    uploads.LOSSES.clear()
    wire = []  # the train replies' metric names, as they travel

    def record(reply):
        if reply.metadata.message_type == "train":
            wire.append(set(reply.content.metric_records[METRICS].keys()))
        return reply

    local = run_in_process(config, tmp_path / "local", [])
    server, _ = run_on_grid(config, tmp_path / "flower", [], tamper=record)
    assert_same_state(local.server.global_state, server.server.global_state)
    assert wire == [{"num-examples", "client-id"}] * 4
    assert len(uploads.SEEN) == 8  # 2 rounds x 2 clients x 2 transports
    assert {n for _, n, _ in uploads.SEEN} == {16}
    assert not [m for _, _, m in uploads.SEEN if "train_loss" in m]  # the loss never leaves the client
    losses = uploads.LOSSES
    _assert_no_raw_client_figures(tmp_path / "local", losses)
    _assert_no_raw_client_figures(tmp_path / "flower", losses)
    import pyarrow.parquet as pq

    (sizes,) = list((tmp_path / "local").rglob("client_sizes.parquet"))
    table = pq.read_table(sizes).to_pydict()
    assert set(table["train_size"]) == {16} and set(table["val_size"]) == {4}  # 6 validation examples -> 4
    events = EventAccumulator(str(tmp_path / "flower"))
    events.Reload()
    assert [e.step for e in events.Scalars("privacy/epsilon")] == [1, 2]
    assert not [t for t in events.Tags()["scalars"] if t.startswith("client_")]


def _dp_sgd_module():
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, LoraSettings
    from lightning_fed.privacy import DPDPOModule, DPSGDSettings
    from tests.helpers.runs import TINY_GPT2

    pl.seed_everything(0, verbose=False)
    return DPDPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=0.1,
        optimizer="sgd",
        dp_sgd=DPSGDSettings(clip_norm=0.1, noise_multiplier=1.0),  # seed=None: a secret one
    )


def test_dp_sgd_budget_is_calibrated_and_accounted_per_client_in_both_transports(tmp_path):
    """DP-SGD with model.dp_sgd.target_epsilon = 8 (delta: min(4^-1.1, 1e-5) = 1e-5), 4-pair batches,
    2 local steps per round, 2 rounds. Every client holds 18 pairs, bucketed to 16 (what a private
    client reports): rate 4/16, and z calibrated for 2 rounds x 2 steps, by each Flower client as by the
    in-process server. Epsilon is per client, over the rounds each trained in; the run's is the largest."""
    from opacus.accountants.utils import get_noise_multiplier

    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["model"]["class_path"] = "lightning_fed.privacy.DPDPOModule"
    cfg["model"]["init_args"]["dp_sgd"] = {"clip_norm": 1.0, "target_epsilon": 8.0, "seed": 0}
    cfg["federation"].update(rounds=2, local_steps=2)
    path = tmp_path / "dpsgd.yaml"
    path.write_text(yaml.safe_dump(cfg))
    local = run_in_process(str(path), tmp_path / "local", [])
    server, _ = run_on_grid(str(path), tmp_path / "flower", [])
    assert_same_state(local.server.global_state, server.server.global_state)
    z = get_noise_multiplier(target_epsilon=8.0, target_delta=1e-5, sample_rate=0.25, steps=4, accountant="rdp")
    assert local.server.privacy.example_budget.noise_multiplier_for(18) == pytest.approx(z)
    a, b = local.server.privacy_section(), server.server.privacy_section()
    assert a == b
    assert all("clients" not in r for r in local.server.report.history.lines())  # the sample is secret: not written
    rounds = [local.server.sample(r) for r in range(2)]  # the seeded test run's sample
    most = max(sum(c in r for r in rounds) for c in range(4))  # the client sampled most often
    expected = PrivacyAccountant(z, 0.25, 1e-5).epsilon(2 * most)
    assert a["epsilon"] == {"example": pytest.approx(expected)} and expected <= 8.0
    assert a["example_level"]["sample_rate"] == 0.25 and a["example_level"]["noise_multiplier"] == pytest.approx(z)
    assert a["channels"]["update"]["protection"] == "example_dp"
    assert a["channels"]["validation"]["protection"] == "withheld"


def test_dp_sgd_budget_stops_a_run_extended_past_its_plan(tmp_path):
    """A DP-SGD run planned for 2 rounds (z calibrated for 2 rounds x 1 step at rate 4/16), resumed
    with federation.rounds = 4: every client trains every round, so round 3 would take each over
    target_epsilon; the run stops before it, and the summary says which budget."""

    def module():
        m = _dp_sgd_module()
        m.dp_sgd = type(m.dp_sgd)(clip_norm=0.1, target_epsilon=2.0, seed=0)
        return m

    def loop(rounds):
        return FederatedLoop(rounds=rounds, clients_per_round=4, local_steps=1, seed=0)

    first = loop(2)
    fit(module(), preference_data(), first, str(tmp_path / "first"))
    eps = first.server.privacy_section()["epsilon"]["example"]
    assert 1.5 < eps <= 2.0  # the plan spends (nearly) the whole budget in its 2 rounds
    ckpt = tmp_path / "first" / "ckpt" / "last.ckpt"
    resumed = loop(4)
    logger = TensorBoardLogger(str(tmp_path), name="tb", version=0)
    trainer = fit(module(), preference_data(), resumed, str(tmp_path / "resumed"), ckpt_path=str(ckpt), logger=logger)
    assert len(resumed.server.report.history) == 2 and trainer.current_epoch == 2
    summary = json.loads((tmp_path / "tb" / "version_0" / "summary.json").read_text())
    assert summary["privacy"]["stopped"] == {
        "before_round": 3,
        "reason": "the next round would exceed model.dp_sgd.target_epsilon for one of its clients",
    }
    assert summary["privacy"]["epsilon"]["example"] == pytest.approx(eps)


class RawValidation:
    """Records every client's raw validation losses and reward margins (and their example-weighted
    means) as the server's report receives them, in both transports (the in-process grid runs the
    server here). Accuracies are left out: fractions such as 0.5 also occur in any config."""

    def __init__(self, monkeypatch):
        from lightning_fed.federation.report import RoundReport

        self.values, seen = [], set()
        add_eval, add_client_eval, end_eval = RoundReport.add_eval, RoundReport.add_client_eval, RoundReport.end_eval

        def record_ids(report, client_ids, outputs):
            seen.update(int(c) for c in client_ids.tolist())
            add_eval(report, client_ids, outputs)

        def record_client(report, client_id, means, count):
            seen.add(int(client_id))
            add_client_eval(report, client_id, means, count)

        def record_end(report, *args, **kwargs):
            weighted, total = {}, 0
            for cid in sorted(seen):
                means, count = report.client_means(cid)
                means = {k: v for k, v in means.items() if k in ("loss", "reward_margin")}
                self.values.extend(means.values())
                total += count
                for k, v in means.items():
                    weighted[k] = weighted.get(k, 0.0) + v * count
            self.values.extend(v / total for v in weighted.values() if total)
            seen.clear()
            end_eval(report, *args, **kwargs)

        monkeypatch.setattr(RoundReport, "add_eval", record_ids)
        monkeypatch.setattr(RoundReport, "add_client_eval", record_client)
        monkeypatch.setattr(RoundReport, "end_eval", record_end)


def _written_numbers(run):
    """Every number the run wrote: JSON/JSONL/YAML values, TensorBoard scalars, and the scalars of
    its checkpoints (callback states, loop states, metadata; not the weights)."""
    out = []
    for path in run.rglob("*"):
        if path.suffix in (".json", ".jsonl"):
            lines = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
            out += [(path, x) for line in lines if line for x in _numbers(json.loads(line))]
        elif path.suffix in (".yaml", ".yml"):
            out += [(path, x) for x in _numbers(yaml.safe_load(path.read_text()))]
        elif path.name.startswith("events.out.tfevents"):
            events = EventAccumulator(str(path.parent))
            events.Reload()
            out += [(path, e.value) for tag in events.Tags()["scalars"] for e in events.Scalars(tag)]
        elif path.suffix == ".ckpt":
            ckpt = torch.load(path, weights_only=True)
            ckpt.pop("state_dict", None)
            ckpt.pop("optimizer_states", None)
            out += [(path, x) for x in _scalars(ckpt)]
    return out


def _scalars(value):
    if isinstance(value, dict):
        return [n for v in value.values() for n in _scalars(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _scalars(v)]
    if torch.is_tensor(value) and value.numel() == 1 and value.is_floating_point():
        return [float(value)]
    return [value] if isinstance(value, float) else []


def _assert_no_validation_written(run, raw):
    written = _written_numbers(run)
    assert any(p.name.startswith("events.out.tfevents") for p, _ in written), "no TensorBoard events checked"
    assert any(p.suffix == ".ckpt" for p, _ in written) or "flower" in run.name, "no checkpoint checked"
    leaks = [(p, x) for p, x in written if any(math.isclose(x, v, rel_tol=1e-6) for v in raw)]
    assert not leaks, leaks


def test_private_runs_write_no_validation_figure_in_both_transports(tmp_path, monkeypatch):
    """The clients' validation losses (each client's and their mean) are in no file a private run
    writes, in process (TensorBoard, checkpoints) and over the in-process Flower grid."""
    raw = RawValidation(monkeypatch)
    config = _private_config(tmp_path)
    logging = ["--trainer.logger=true", "--trainer.enable_checkpointing=true"]
    local = run_in_process(config, tmp_path / "local", logging)
    server, _ = run_on_grid(config, tmp_path / "flower", [])
    assert len(raw.values) >= 2 * 3 * 3  # loss and reward margin, 3 evaluations, each client's and the mean
    losses = [v for v in raw.values if v != 0.0]  # the margin of the initial model is 0
    _assert_no_validation_written(tmp_path / "local", losses)
    _assert_no_validation_written(tmp_path / "flower", losses)
    for server_round in (local.server, server.server):
        section = server_round.privacy_section()
        assert section["channels"]["validation"]["protection"] == "withheld"
        assert all("val" not in r for r in server_round.report.history) and server_round.report.initial_eval is None


def test_report_validation_writes_only_the_means_and_says_they_are_unprotected(tmp_path, monkeypatch):
    raw = RawValidation(monkeypatch)
    cfg = yaml.safe_load(open(_private_config(tmp_path)).read())
    cfg["federation"]["privacy"]["report_validation"] = True
    path = tmp_path / "opted.yaml"
    path.write_text(yaml.safe_dump(cfg))
    local = run_in_process(str(path), tmp_path / "local", [])
    final = local.server.report.history[-1]["val"]
    assert {"loss", "pref_acc"} <= set(final) and "val_clients" not in local.server.report.history[-1]
    assert any(math.isclose(final["loss"], v, rel_tol=1e-9) for v in raw.values)  # the mean, as received
    channel = local.server.privacy_section()["channels"]["validation"]
    assert channel["protection"] == "reported" and "not covered by any epsilon" in channel["note"]


def test_validate_after_a_private_fit_writes_nothing_of_the_clients_validation_data(tmp_path):
    from lightning_fed.cli import main

    config = _private_config(tmp_path)
    run_in_process(config, tmp_path / "run", ["--trainer.enable_checkpointing=true", "--federation.rounds=1"])
    (ckpt,) = list((tmp_path / "run").rglob("last.ckpt"))
    with pytest.warns(UserWarning, match="^validate: with differential privacy on, nothing computed on the clients'"):
        main(["validate", "--config", config, "--ckpt_path", str(ckpt), f"--trainer.default_root_dir={tmp_path / 'v'}"])
    assert not list(tmp_path.rglob("validate_results.json"))
