"""``SystemHeterogeneity(clock: wall)`` in process is something the user must fix: ``fit`` exits 2 with
one ``error:`` line naming ``federation.hooks[i].clock``, and writes nothing (red team 17 B22: the line
named ``federation.hooks: SystemHeterogeneity`` and came with the ``--debug`` hint, a second line)."""

from __future__ import annotations

from tests.helpers.cli import lightning_fed
from tests.helpers.refusals import shipped_config, write_config


def test_wall_clock_in_process_is_one_line_naming_the_hook_and_writes_nothing(tmp_path):
    config = shipped_config("tiny")
    config["federation"].update(rounds=1, local_steps=1)
    hook = {"deadline": 20.0, "target": 2, "partial_work": True, "seed": 0, "clock": "wall"}
    config["federation"]["hooks"] = [
        {"class_path": "lightning_fed.callbacks.RoundLRSchedule", "init_args": {"schedule": "cosine"}},
        {"class_path": "lightning_fed.heterogeneity.SystemHeterogeneity", "init_args": hook},
    ]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed("fit", "--config", str(write_config(tmp_path, config)), cwd=cwd)
    line = (
        "error: federation.hooks[1].clock='wall' runs over Flower only: in process the clients train one after"
        " another, so a wall-clock deadline would cut them by their place in the queue; use clock='virtual'\n"
    )
    assert (proc.returncode, proc.stderr) == (2, line), proc.stderr[-2000:]
    assert list(cwd.iterdir()) == []
