"""``trainer.val_check_interval`` given as more batches than a federated round can have, refused before
torch in one line (red team 8 row 0b; lightning_fed/loop_conflicts.py's ``val_check_problem``).

On 52f9c49 ``--trainer.val_check_interval=5.0`` with ``--federation.local_steps=1`` exited 1 with
Lightning's ``val_check_interval (5) must be less than or equal to the number of the training batches (1)``
and a hint line, 12-15 s of CPU after the data and the model loaded (a resume added an events file).
A round has at most ``clients_per_round x local_steps x accumulate_grad_batches`` batches; a count
within that is left to the run (how many clients train together decides).
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch

FIX = "give a fraction of a round (1.0 validates once a round) or a count of at most"
CASES = {
    "float_count": (
        ["--federation.local_steps=1", "--trainer.val_check_interval=5.0"],
        "trainer.val_check_interval=5.0 exceeds the training batches of a round (at most 2:"
        f" federation.clients_per_round=2 x federation.local_steps=1); {FIX} 2",
    ),
    "int_count": (
        ["--trainer.val_check_interval=11"],
        "trainer.val_check_interval=11 exceeds the training batches of a round (at most 10:"
        f" federation.clients_per_round=2 x federation.local_steps=5); {FIX} 10",
    ),
    "accumulating": (
        ["--trainer.accumulate_grad_batches=2", "--trainer.val_check_interval=21"],
        "trainer.val_check_interval=21 exceeds the training batches of a round (at most 20:"
        f" federation.clients_per_round=2 x federation.local_steps=5 x trainer.accumulate_grad_batches=2); {FIX} 20",
    ),
}


@pytest.mark.parametrize(("options", "line"), list(CASES.values()), ids=list(CASES))
def test_more_batches_than_a_round_has_are_refused_before_torch(tmp_path, options, line):
    assert_refused_before_torch(tmp_path, ["fit", "--config", "tiny", *options], line)


@pytest.mark.parametrize(
    "options",
    [
        ["--trainer.val_check_interval=10"],  # 2 clients one after another: 10 batches
        ["--trainer.val_check_interval=0.5"],  # a fraction
        ["--trainer.val_check_interval=5.0", "--federation.local_steps=1", "--trainer.check_val_every_n_epoch=null"],
        ["--trainer.val_check_interval=5.0", "--federation.local_steps=null", "--federation.local_epochs=1"],
    ],
)
def test_a_count_a_round_may_have_goes_on(tmp_path, options):
    work = tmp_path / "work"
    work.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *options, cwd=work, hook=tmp_path / "hook")
    assert proc.returncode != 0 and REACHED_TORCH in proc.stderr, proc.stderr  # past every check made before torch
