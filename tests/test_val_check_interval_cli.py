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
