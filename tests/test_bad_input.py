"""Malformed CLI arguments, config values and data files: each fails early, in one line, losing nothing.

Every case runs ``lightning-fed fit --config configs/tiny.yaml`` in-process (``console_main``, the
process entry point, so exit status and printed lines are the process's) with overrides,
inside a run folder that already holds an earlier run (``version_0`` with its checkpoint,
``summary.json`` and adapter), and asserts that:

1. the error is raised before any training step (no batch of the training loop ran);
2. the exit status is 2 and the message is one ``error:`` line (plus at most a hint line) naming
   the field (or client, or file line) and the offending value, without a traceback;
3. the run folder and the data files are byte for byte what they were before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

from lightning_fed.cli import console_main, main
from tests.helpers.files import assert_unchanged, snapshot

BASE = ["fit", "--config", "configs/tiny.yaml", "--trainer.enable_progress_bar=false"]


def _good(n: int, **extra) -> list[dict]:
    return [
        {"prompt": f"Say something {i}", "chosen": "a kind answer", "rejected": "a rude answer", **extra}
        for i in range(n)
    ]


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _data(file: str, num_clients: int = 2) -> list[str]:
    """Overrides that train on the local file ``file`` (written by the case into the data folder)."""
    return [
        f"--data.init_args.dataset={{data}}/{file}",
        f"--data.init_args.num_clients={num_clients}",
        "--federation.clients_per_round=1",
        "--data.init_args.val_fraction=0",
    ]


# name -> (files to write into the data folder, CLI overrides, substrings the message must hold)
CASES = {
    # ------------------------------------------------------------ CLI arguments and config values
    "rounds_zero": ({}, ["--federation.rounds=0"], ["federation.rounds", "got 0"]),
    "batch_clients_zero": ({}, ["--federation.batch_clients=0"], ["federation.batch_clients", "got 0"]),
    "batch_clients_word": ({}, ["--federation.batch_clients=many"], ["federation.batch_clients", "got 'many'"]),
    "local_steps_zero": (
        {},
        ["--federation.local_steps=0"],
        ["federation.local_steps", "got 0"],
    ),
    "min_clients_above_clients_per_round": ({}, ["--federation.min_clients=3"], ["federation.min_clients", "got 3"]),
    "clients_per_round_above_num_clients": (
        {},
        ["--federation.clients_per_round=5"],
        ["federation.clients_per_round=5", "data.num_clients=4"],
    ),
    "unknown_option": ({}, ["--federation.roundz=3"], ["federation.roundz"]),
    "rounds_not_an_integer": ({}, ["--federation.rounds=abc"], ["federation.rounds", "abc"]),
    "unknown_strategy_class": ({}, ["--federation.strategy=FedFoo"], ["federation.strategy", "FedFoo"]),
    "unknown_partition_scheme": ({}, ["--data.init_args.partition=Foo"], ["partition", "Foo"]),
    "config_file_missing": ({}, ["--config", "{data}/none.yaml"], ["config", "none.yaml"]),
    "config_file_invalid_yaml": (
        {"bad.yaml": b"federation: [rounds: 1\n"},
        ["--config", "{data}/bad.yaml"],
        ["config", "bad.yaml", "not valid YAML"],
    ),
    "checkpoint_missing_for_resume": (
        {},
        ["--ckpt_path={data}/nope.ckpt"],
        ["nope.ckpt"],
    ),
    "negative_lr": ({}, ["--model.init_args.lr=-0.1"], ["model.lr", "got -0.1"]),
    "unknown_model_type": ({}, ["--model.init_args.backbone.config={model_type: foo}"], ["model_type", "'foo'"]),
    "lora_targets_absent": (
        {},
        ["--model.init_args.lora.target_modules=[q_proj]"],
        ["lora.target_modules", "'q_proj'"],
    ),
    "even_fedbiscuit_strategy_selectors": (
        {},
        ["--federation.strategy=FedBiscuit", "--federation.strategy.num_selectors=2"],
        ["num_selectors", "got 2"],
    ),
    "even_selector_module_selectors": (
        {},
        [
            "--model=BinarySelectorModule",
            "--model.init_args.num_selectors=2",
            "--data=SelectorDataModule",
            "--data.init_args.template=short",
        ],
        ["model.num_selectors", "got 2"],
    ),
    "trimmed_mean_trim_too_large": (
        {},
        ["--federation.strategy=TrimmedMean", "--federation.strategy.trim=0.5"],
        ["trim", "got 0.5"],
    ),
    "dirichlet_alpha_zero": (
        {},
        [
            "--data.init_args.partition=Dirichlet",
            "--data.init_args.partition.alpha=0",
            "--data.init_args.partition.key=group",
        ],
        ["alpha", "got 0"],
    ),
    "batch_size_zero": ({}, ["--data.init_args.batch_size=0"], ["data.batch_size", "got 0"]),
    "val_fraction_one": ({}, ["--data.init_args.val_fraction=1.0"], ["data.val_fraction", "got 1.0"]),
    "unknown_on_overflow": ({}, ["--data.init_args.on_overflow=bogus"], ["data.on_overflow", "'bogus'"]),
    "unknown_eval_clients": ({}, ["--federation.eval_clients=first"], ["federation.eval_clients", "'first'"]),
    "removed_data_eval_clients": (
        {},
        ["--data.init_args.eval_clients=4"],
        ["data.eval_clients", "removed", "federation.eval_clients"],
    ),
    "unknown_synthetic_set": ({}, ["--data.init_args.dataset=synthetic:foo"], ["data.dataset", "synthetic:foo"]),
    "responses_longer_than_max_length": (
        {},
        ["--data.init_args.max_length=8"],
        ["data.max_length", "max_length=8", "client 0"],
    ),
    # -------------------------------------------------------------------------------- data files
    "data_file_missing": ({}, _data("nope.jsonl"), ["data.dataset", "nope.jsonl", "no such file"]),
    "jsonl_missing_field": (
        {"d.jsonl": _jsonl([{"prompt": "p", "chosen": "c"}] * 4)},
        _data("d.jsonl"),
        ["missing field 'rejected'", "d.jsonl"],
    ),
    "csv_missing_field": (
        {"d.csv": b"prompt,chosen\np,c\nq,d\n"},
        _data("d.csv"),
        ["missing field 'rejected'", "d.csv"],
    ),
    "jsonl_empty_prompt": (
        {"d.jsonl": _jsonl(_good(3) + [{"prompt": "  ", "chosen": "a", "rejected": "b"}])},
        _data("d.jsonl"),
        ["row 3", "empty 'prompt'"],
    ),
    "jsonl_not_utf8": (
        {"d.jsonl": _jsonl(_good(1)) + b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n'},
        _data("d.jsonl"),
        ["line 2", "d.jsonl", "not UTF-8", "0xe9"],
    ),
    "jsonl_malformed_line": (
        {"d.jsonl": _jsonl(_good(2)) + b'{"prompt": "x", "chosen": \n'},
        _data("d.jsonl"),
        ["d.jsonl", "line 3 (row 2) is not valid JSON"],
    ),
    "jsonl_wrong_type": (
        {"d.jsonl": _jsonl([{"prompt": "p", "chosen": 3, "rejected": "r"}] * 4)},
        _data("d.jsonl"),
        ["'chosen'", "line 1 (row 0) has 3"],
    ),
    "jsonl_mixed_types": (
        {"d.jsonl": _jsonl(_good(2) + [{"prompt": "p", "chosen": ["a"], "rejected": "r"}])},
        _data("d.jsonl"),
        ["'chosen'", "line 3 (row 2) has ['a']"],
    ),
    "json_array_wrong_type": (
        {"d.json": json.dumps([{"prompt": "p", "chosen": "c", "rejected": 4.5}] * 4).encode()},
        _data("d.json"),
        ["'rejected'", "row 0 has 4.5"],
    ),
    "jsonl_empty_file": ({"d.jsonl": b""}, _data("d.jsonl"), ["d.jsonl", "is empty"]),
    "field_map_names_absent_column": (
        {"d.jsonl": _jsonl(_good(4))},
        _data("d.jsonl") + ["--data.init_args.field_map={prompt: question}"],
        ["data.field_map", "'question'"],
    ),
    "field_map_unknown_field": (
        {"d.jsonl": _jsonl(_good(4))},
        _data("d.jsonl") + ["--data.init_args.field_map={answer: chosen}"],
        ["data.field_map", "'answer'"],
    ),
    "client_partition_empty": (
        {"d.jsonl": _jsonl(_good(4, client=0))},
        _data("d.jsonl"),
        ["client 1", "got no examples"],
    ),
    "fewer_rows_than_clients": (
        {"d.jsonl": _jsonl(_good(3))},
        _data("d.jsonl", num_clients=4),
        ["client 3", "got no examples"],
    ),
    # ------------------------------------------------------------------- issue #11's messages
    "nan_lr": ({}, ["--model.init_args.lr=.nan"], ["model.lr", "finite", "got nan"]),
    "inf_nested_float": (
        {},
        ["--federation.strategy=FedProx", "--federation.strategy.mu=.inf"],
        ["federation.strategy.mu", "got inf"],
    ),
    "config_file_empty": ({"empty.yaml": b""}, ["--config", "{data}/empty.yaml"], ["empty.yaml", "is empty"]),
    "config_file_a_list": (
        {"list.yaml": b"- a\n- b\n"},
        ["--config", "{data}/list.yaml"],
        ["list.yaml", "holds a list"],
    ),
    "clients_per_round_zero": ({}, ["--federation.clients_per_round=0"], ["federation.clients_per_round", "got 0"]),
    "dataset_dir_missing": ({}, _data("no_such_dir"), ["data.dataset", "no_such_dir", "no such file"]),
    "dataset_unsupported_suffix": (
        {"d.txt": b"hello\n"},
        _data("d.txt"),
        ["d.txt", "unsupported file type '.txt'", ".jsonl"],
    ),
    "jsonl_row_is_a_list": (
        {"d.jsonl": _jsonl(_good(3)) + b'["a", "b"]\n' + _jsonl(_good(2))},
        _data("d.jsonl"),
        ["d.jsonl", "line 4 (row 3)", "is an array, expected a JSON object"],
    ),
    "client_value_not_an_integer": (
        {"d.jsonl": _jsonl(_good(2, client=0) + _good(1, client="zero") + _good(2, client=1))},
        _data("d.jsonl"),
        ["row 2 has 'zero'"],
    ),
    "resume_with_another_config": (
        {},
        [
            "--federation.rounds=1",
            "--federation.local_steps=1",
            "--model.init_args.beta=0.1",
            "--ckpt_path={run}/lightning_logs/version_0/checkpoints/last.ckpt",
        ],
        ["model.beta: 0.5 -> 0.1", "last.ckpt"],
    ),
}

# Substrings the message must not hold (a spurious second complaint).
ABSENT = {"clients_per_round_zero": ["min_clients"]}


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory) -> Path:
    """A finished one-round run: lightning_logs/version_0 with a checkpoint, summary.json, adapter."""
    root = tmp_path_factory.mktemp("earlier")
    main(BASE + [f"--trainer.default_root_dir={root}", "--federation.rounds=1", "--federation.local_steps=1"])
    version = root / "lightning_logs" / "version_0"
    assert (version / "summary.json").is_file() and list(version.rglob("*.ckpt"))
    return root


@pytest.fixture
def training_steps(monkeypatch) -> list[int]:
    """Records every batch the training loop runs."""
    steps: list[int] = []
    advance = _TrainingEpochLoop.advance

    def counting(self, *args, **kwargs):
        steps.append(1)
        return advance(self, *args, **kwargs)

    monkeypatch.setattr(_TrainingEpochLoop, "advance", counting)
    return steps


def _error_line(args: list[str], capsys) -> str:
    """Run the CLI as the process does (exit status 2 expected) and return its one ``error:`` line."""
    code = console_main(args)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, lines[-5:]
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(errors) == 1, lines[-5:]
    assert len(lines) - errors[0] - 1 <= 1, lines[errors[0] :]  # at most a hint line follows
    assert not any(line.startswith("Traceback") for line in lines)
    return lines[errors[0]][len("error: ") :]


@pytest.mark.parametrize(
    ("case", "files", "overrides", "expected"), [(k, *v) for k, v in CASES.items()], ids=list(CASES)
)
def test_bad_input_fails_early_in_one_line_and_keeps_earlier_files(
    case, files, overrides, expected, earlier_run, training_steps, tmp_path, capsys
):
    run, data = tmp_path / "run", tmp_path / "data"
    shutil.copytree(earlier_run, run)
    data.mkdir()
    for name, content in files.items():
        (data / name).write_bytes(content)
    before = snapshot(tmp_path)
    capsys.readouterr()

    args = [a.replace("{data}", str(data)).replace("{run}", str(run)) for a in overrides]
    message = _error_line(BASE + [f"--trainer.default_root_dir={run}"] + args, capsys)

    assert training_steps == []
    assert "\n" not in message.strip(), message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    for part in ABSENT.get(case, []):
        assert part not in message, f"{part!r} in {message!r}"
    assert_unchanged(before, tmp_path)


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20
