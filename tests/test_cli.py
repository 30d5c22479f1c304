"""The CLI: every shipped config parses; the tiny config runs end to end with its outputs."""

import json
from pathlib import Path

import pytest

from lightning_fed.cli import main

CONFIGS = sorted(str(p) for p in (Path(__file__).parents[1] / "configs").glob("*.yaml"))


def test_configs_are_shipped():
    names = {Path(c).name for c in CONFIGS}
    assert {"demo.yaml", "fedit.yaml", "feddpo.yaml", "tiny.yaml"} <= names


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: Path(c).name)
def test_shipped_config_parses(config, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", config, "--print_config"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "federation:" in printed and "class_path: lightning_fed" in printed


def test_help_documents_federation_options(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = capsys.readouterr().out
    for option in (
        "--federation.rounds",
        "--federation.clients_per_round",
        "--federation.strategy",
        "--federation.local_steps",
    ):
        assert option in out
    assert "Clients sampled uniformly without replacement" in out
    # The program introduces itself in a one-line usage (jsonargparse's own lists every option).
    first, blank, purpose = out.splitlines()[:3]
    assert first.startswith("usage: lightning-fed fit [-h] [-c CONFIG]") and not blank
    assert purpose.startswith("Train a federation") and "Lightning Trainer command line tool" not in out


@pytest.mark.parametrize("strategy", ["FedAvg", "FedProx", "Scaffold", "FedAvgM", "FedAdagrad", "FedYogi", "FedAdam"])
def test_every_server_algorithm_is_selectable_by_name(strategy, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/tiny.yaml", f"--federation.strategy={strategy}", "--print_config"])
    assert f"class_path: lightning_fed.strategies.{strategy}\n" in capsys.readouterr().out


def test_tiny_config_runs_and_writes_outputs(tmp_path):
    from peft import PeftModel

    from lightning_fed.federation.client_metrics import read_client_metrics

    main(
        [
            "fit",
            "--config",
            "configs/tiny.yaml",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
        ]
    )
    (run_dir,) = (tmp_path / "lightning_logs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["federation"]["rounds"] == 3
    assert summary["clients"]["num_clients"] == 4 and summary["clients"]["train_examples"] == 72
    assert len(summary["rounds"]) == 3 and summary["initial"] is not None
    assert summary["total_up_bytes"] > 0 and summary["total_down_bytes"] > 0
    assert summary["final"]["val"]["pref_acc"] > summary["initial"]["val"]["pref_acc"]
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    # the round history and the per-client records (lightning_fed/federation/round_history.py)
    assert [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()] == summary["rounds"]
    assert read_client_metrics(run_dir, "train").num_rows == 3 * 2  # 2 clients per round
    from lightning_fed.modules import BackboneConfig, load_backbone

    base, _ = load_backbone(
        BackboneConfig(
            config={"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256},
            tokenizer="bytes",
        )
    )
    peft_model = PeftModel.from_pretrained(base, str(run_dir / "adapter"))
    assert any("lora_A" in n for n, _ in peft_model.named_parameters())


def test_bad_input_fails_before_training_and_keeps_earlier_runs(tmp_path):
    args = [
        "fit",
        "--config",
        "configs/tiny.yaml",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.enable_progress_bar=false",
    ]
    main(args + ["--federation.rounds=1"])
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ValueError) as err:
        main(args + ["--data.init_args.max_length=8"])
    assert "data.max_length" in str(err.value) and "\n" not in str(err.value)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # nothing written earlier was touched, nothing half-written added


def test_evaluate_and_plan_dispatch_to_their_own_main_with_the_exit_status_mapping(tmp_path, monkeypatch, capsys):
    from lightning_fed import cli

    (tmp_path / "fake_subcommand.py").write_text(
        "def main(argv):\n"
        "    if argv == ['bad']:\n"
        "        raise FileNotFoundError('--run /x: no such run folder')\n"
        "    if argv == ['crash']:\n"
        "        raise RuntimeError('boom')\n"
        "    print('got', argv)\n"
        "    return 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.ELSEWHERE, "plan", "fake_subcommand")
    assert cli.console_main(["plan", "--x", "1"]) == 0
    assert capsys.readouterr().out == "got ['--x', '1']\n"
    assert cli.console_main(["plan", "bad"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: --run /x: no such run folder" and len(err) == 2 and "--debug" in err[1]
    assert cli.console_main(["plan", "crash"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == "error: RuntimeError: boom"
    monkeypatch.setitem(cli.ELSEWHERE, "evaluate", "lightning_fed.no_such_package.cli")
    assert cli.console_main(["evaluate", "--run", "x"]) == 2  # (`evaluate --help` is a stored page: help_pages.py)
    (line,) = capsys.readouterr().err.splitlines()  # a UserError: its line alone
    assert line.startswith("error: `lightning-fed evaluate` is not available") and "fit" in line


def test_parse_errors_name_the_missing_key_or_the_unknown_class_path():
    from lightning_fed.errors import simplify_parse_error

    union = (
        'Parser key "{key}": Does not validate against any of the Union subtypes Subtypes: [A, B]'
        " Errors: - {reason} - Expected a <class 'NoneType'> Given value: x"
    )
    unknown = (
        "Problem with given class_path 'lightning_fed.modules.Nope':"
        " module 'lightning_fed.modules' has no attribute 'Nope'"
    )
    assert simplify_parse_error(union.format(key="model", reason=unknown)) == (
        "model: unknown class_path 'lightning_fed.modules.Nope'"
        " (module 'lightning_fed.modules' has no attribute 'Nope')"
    )
    missing = (
        "Problem with given class_path 'lightning_fed.strategies.FedProx':"
        " the following arguments are required: init_args.mu"
    )
    assert (
        simplify_parse_error(union.format(key="federation.strategy", reason=missing))
        == "federation.strategy.mu: required but missing from the config"
    )
    nested = (
        "Problem with given class_path 'lightning_fed.modules.DPOModule':"
        " Parser key \"beta\": Expected a <class 'float'>. Got value: big"
    )
    assert (
        simplify_parse_error(union.format(key="model", reason=nested))
        == "model.beta: Expected a <class 'float'>. Got value: big"
    )
