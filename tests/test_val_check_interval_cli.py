"""``trainer.val_check_interval`` other than the whole round, refused before torch in one line
(lightning_fed/loop_conflicts.py's ``val_check_problem``).

A federated run validates the global model, which changes once a round. On a8354b9 (red team 11) a
count within a round's batches was accepted and left to Lightning: ``fit --config tiny
--federation.rounds=2 --trainer.val_check_interval=2`` exited 0 with ``summary.json`` ``"final": null``
(no validation after any round's aggregation: Lightning validated only on every 2nd batch), the
TensorBoard ``round/val_loss`` of the round before logged as this round's, twice a round, and
``report`` left the run out; a fraction (``0.5``) and a Poisson round the same (row 5); a duration
(``00:00:00:01``) exited 1 with ``AttributeError: 'Trainer' object has no attribute
'val_check_interval'`` after the run folder held a ``.lock`` and an events file (row 7). Earlier counts
above a round's batches were bounded before torch and again once K was decided (red team 8 row 0b,
red team 9 rows 3-4, red team 10 rows 2-5); none of that is needed now.
"""

from __future__ import annotations

import pytest
import yaml

from lightning_fed.loop_conflicts import val_check_problem
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch


def refusal(value: str) -> str:
    return (
        f"trainer.val_check_interval={value} would validate inside a round, but a federated run validates the"
        " global model, which changes once a round; leave it at 1.0 and validate every N rounds with"
        " trainer.check_val_every_n_epoch=N"
    )


@pytest.mark.parametrize(
    ("option", "shown"),
    [
        ("2", "2"),  # red team 11 row 1: exit 0, "final": null
        ("1", "1"),  # the int 1 is a count, every batch (red team 10 row 3)
        ("5.0", "5.0"),  # a whole float reads as a count
        ("11", "11"),
        ("0.5", "0.5"),  # red team 11 row 5
        ("00:00:00:01", "'00:00:00:01'"),  # red team 11 row 7: exit 1 after the run folder was made
    ],
)
def test_a_validation_inside_a_round_is_refused_before_torch(tmp_path, option, shown):
    assert_refused_before_torch(
        tmp_path, ["fit", "--config", "tiny", f"--trainer.val_check_interval={option}"], refusal(shown)
    )


def test_the_value_from_a_config_file_names_the_file(tmp_path):
    config = tmp_path / "vci.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"val_check_interval": 2}}), encoding="utf-8")
    assert_refused_before_torch(
        tmp_path, ["fit", "--config", "tiny", "--config", str(config)], refusal("2"), config_file=config
    )


@pytest.mark.parametrize(
    "options",
    [
        ["--federation.sampling=poisson", "--federation.sampling_rate=1.0"],  # red team 11 row 5
        ["--federation.local_steps=null", "--federation.local_epochs=1"],
        ["--trainer.check_val_every_n_epoch=null"],  # every 2 batches of the run, across rounds
    ],
)
def test_whatever_sizes_a_round_the_same_refusal(tmp_path, options):
    args = ["fit", "--config", "tiny", *options, "--trainer.val_check_interval=2"]
    assert_refused_before_torch(tmp_path, args, refusal("2"))


@pytest.mark.parametrize(
    "options",
    [
        ["--trainer.val_check_interval=1.0"],  # the whole round
        ["--trainer.check_val_every_n_epoch=2"],  # every 2 rounds
        ["--trainer.val_check_interval=2", "--trainer.limit_val_batches=0"],  # nothing validated
    ],
)
def test_a_validation_once_a_round_goes_on(tmp_path, options):
    work = tmp_path / "work"
    work.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *options, cwd=work, hook=tmp_path / "hook")
    assert proc.returncode != 0 and REACHED_TORCH in proc.stderr, proc.stderr  # past every check made before torch


def test_the_rule_reads_the_trainer_section_alone():
    assert val_check_problem({}) is None
    assert val_check_problem({"val_check_interval": None}) is None
    assert val_check_problem({"val_check_interval": 1.0}) is None
    assert val_check_problem({"val_check_interval": 1}) == refusal("1")
    assert val_check_problem({"val_check_interval": 0.25, "limit_val_batches": 0}) is None


@pytest.mark.parametrize(("word", "line"), [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("NaN", "nan")])
def test_a_number_word_that_is_no_finite_number_is_told_so(tmp_path, word, line):
    """Red team 12 row 7 (vci_nan): ``--trainer.val_check_interval=nan`` was told it "would validate inside
    a round" and to "leave it at 1.0"; the parser holds ``nan`` as a string (a duration it is not), and
    every float option must be finite: the line the other trainer floats get
    (``trainer_options.trainer_option_problem``). Seen failing on 7cc16c0."""
    args = ["fit", "--config", "tiny", f"--trainer.val_check_interval={word}"]
    assert_refused_before_torch(tmp_path, args, f"trainer.val_check_interval must be a finite number, got {line}")


@pytest.mark.parametrize(("text", "shown"), [('"0.5"', "0.5"), ('"2"', "2")])
def test_a_number_written_as_a_string_in_a_file_is_read_as_the_number(tmp_path, text, shown):
    """A YAML string that is a number (``val_check_interval: "0.5"``) is that number to the parser
    (jsonargparse tries ``int``, then ``float``, before ``str``): refused for what the number does."""
    config = tmp_path / "vci.yaml"
    config.write_text(f"trainer:\n  val_check_interval: {text}\n", encoding="utf-8")
    assert_refused_before_torch(
        tmp_path, ["fit", "--config", "tiny", "--config", str(config)], refusal(shown), config_file=config
    )


def test_the_whole_round_written_as_a_string_in_a_file_goes_on(tmp_path):
    """Red team 12 row 7 (vci_str_yaml): ``val_check_interval: "1.0"`` in a YAML file was refused as a
    validation "inside a round" with its own value, 1.0, as the advice; the parser reads it as the float
    1.0, the whole round (Lightning's default): it goes on past every check made before torch. Seen
    failing on 7cc16c0."""
    config = tmp_path / "vci.yaml"
    config.write_text('trainer:\n  val_check_interval: "1.0"\n', encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    proc = lightning_fed_without_torch(
        "fit", "--config", "tiny", "--config", str(config), cwd=work, hook=tmp_path / "hook"
    )
    assert proc.returncode != 0 and REACHED_TORCH in proc.stderr, proc.stderr  # past every check made before torch


def test_the_parser_reads_a_number_string_as_the_number():
    """What the two tests above rest on: jsonargparse, given Lightning's own annotation of
    ``val_check_interval``, holds a YAML ``"1.0"`` as the float 1.0 and ``nan`` as the string."""
    from datetime import timedelta
    from typing import Optional, Union

    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--v", type=Optional[Union[int, float, str, timedelta, dict[str, int]]])  # noqa: UP007
    assert parser.parse_string('v: "1.0"').v == 1.0 and type(parser.parse_string('v: "1.0"').v) is float
    assert parser.parse_string('v: "2"').v == 2
    assert parser.parse_args(["--v=nan"]).v == "nan"
