"""A run folder copied, moved or renamed is resumed where its checkpoint lies
(lightning_fed/federated_cli.py, federation/early_check.py, federation/version_folder.py;
docs/guides/resume-signals.md).

Issue 41 (red team, installed wheel): ``cp -r``/``mv`` of a run's ``default_root_dir`` and a resume from
``<new place>/lightning_logs/version_0/checkpoints/last.ckpt`` forked a new ``version_1`` under the
configured ``trainer.default_root_dir`` (the docs promise the same folder), and it held no lock on the
folder it resumed, so two resumes of that checkpoint both trained: the run folder was the one under
``trainer.default_root_dir``, not the one holding the checkpoint. Then (red team 14, H1/M1/M2) the same
for a run folder copied under another name (``cp -r .../version_0 copies/c/runX``): the rule keyed on the
``version_N`` name; a run folder is now told by its own ``rounds.jsonl``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed, lightning_fed_without_torch
from tests.helpers.tiny_run import ARGS, CHECKPOINT, tiny_run

RUN = CHECKPOINT.parents[1]
"""The run folder under a ``default_root_dir``: ``lightning_logs/version_0``."""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """The ``default_root_dir`` of one round of configs/tiny.yaml (shared: each test copies it)."""
    return tiny_run(tmp_path_factory)


def _relocated(configured: Path, place: Path, how: str) -> Path:
    """The run folder of the ``default_root_dir`` ``configured``, ``copied`` or ``moved`` whole to ``place``,
    or ``renamed``: the run folder alone copied to ``place/c/runX`` (no ``version_N`` name)."""
    if how == "copied":
        shutil.copytree(configured, place)
    elif how == "moved":
        shutil.move(configured, place)
    else:
        shutil.copytree(configured / RUN, place / "c" / "runX")
        return place / "c" / "runX"
    return place / RUN


@pytest.mark.parametrize("how", ["copied", "moved", "renamed"])
def test_a_resume_of_a_copied_or_moved_run_folder_continues_where_its_checkpoint_lies(tmp_path, earlier, how):
    """On 3df2116 copied and moved forked ``<configured root>/lightning_logs/version_1`` (the closing line named
    it); on 08c1cba renamed forked ``<configured root>/lightning_logs/version_1`` and copied X's round history
    into it (M1)."""
    configured = tmp_path / "X"
    shutil.copytree(earlier, configured)
    kept = _files(configured) if how != "moved" else {}
    run = _relocated(configured, tmp_path / "Y", how)
    first = (run / "rounds.jsonl").read_text().replace('"up_bytes": ', '"up_bytes": 1', 1)
    (run / "rounds.jsonl").write_text(first)  # the copy's own record of round 1: X's differs (when X is there)
    proc = lightning_fed(
        "fit",
        "--config",
        "configs/tiny.yaml",
        f"--trainer.default_root_dir={configured}",
        *ARGS[:-1],
        "--federation.rounds=2",
        f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1].startswith(f"run folder: {run};"), proc.stdout[-2000:]
    lines = (run / "rounds.jsonl").read_text().splitlines(keepends=True)
    assert [json.loads(line)["round"] for line in lines] == [1, 2]
    assert lines[0] == first  # the history read from the copy, not from X stored in the checkpoint (M1)
    assert sorted(p.name for p in (run / "client_metrics" / "train").iterdir()) == [
        "round_000001.parquet",
        "round_000002.parquet",
    ]
    assert sorted(p.name for p in run.parent.iterdir()) == [run.name]  # no fork there
    assert _files(configured) == kept  # the configured root: untouched (nothing made where it was moved from)


@pytest.mark.parametrize("how", ["copied", "renamed"])
def test_a_second_resume_of_a_copied_run_folder_is_refused_before_torch(tmp_path, earlier, how):
    """A resume of the copy holds the copy's folder from before torch, whatever ``default_root_dir`` says and
    whatever the copy is named: a second one is refused while it trains. On 3df2116 (copied) and 08c1cba
    (renamed, H1) it went on to torch, and then trained too, into a new ``version_N``."""
    run = _relocated(earlier, tmp_path / "Y", how)
    ckpt = run / "checkpoints" / "last.ckpt"
    before = _files(run)
    (tmp_path / "cwd").mkdir()
    with open(run / ".lock", "a+b") as held:  # the first resume of the copy, still training
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = lightning_fed_without_torch(
            "fit",
            "--config",
            "tiny",
            f"--trainer.default_root_dir={tmp_path / 'X'}",
            "--federation.local_steps=1",
            "--federation.rounds=2",
            f"--ckpt_path={ckpt}",
            cwd=tmp_path / "cwd",
            hook=tmp_path / "hook",
        )
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: ckpt_path {str(ckpt)!r}: another run holds its run folder {str(run)!r}"
        " (.lock is locked); resume once that run has ended\n",
    )
    assert _files(run) == before
    assert not (tmp_path / "X").exists()
    assert list((tmp_path / "cwd").iterdir()) == []


@pytest.mark.parametrize(
    ("stage", "logger", "how"),
    [
        ("validate", "true", "copied"),
        ("test", "true", "copied"),
        ("validate", "false", "copied"),
        ("validate", "true", "renamed"),
        ("test", "true", "renamed"),
    ],
    ids=["validate", "test", "validate_no_logger", "validate_renamed", "test_renamed"],
)
def test_validate_under_another_root_writes_only_into_the_checkpoint_s_run_folder(
    tmp_path, earlier, stage, logger, how
):
    """Issue 41 (red team): ``validate --ckpt_path <run>/.../last.ckpt --trainer.default_root_dir <other>`` wrote
    its results into the run folder and made ``<other>/lightning_logs/version_0`` besides (on 3df2116: a lock
    file, config.yaml, and with the default logger hparams.yaml and an events file; on 08c1cba the same for a
    run folder copied under another name, M2). It evaluates the run in its folder, as a resume continues
    there: nothing under the other root; the run's files as they were."""
    run = _relocated(earlier, tmp_path / "X", how)
    before = _files(run)
    rows = tmp_path / "test.jsonl"  # `test` needs a test set
    rows.write_text('{"prompt": "p", "chosen": "a", "rejected": "b", "client_id": 0}\n')
    given = [f"--data.init_args.test_dataset={rows}"] if stage == "test" else []
    proc = lightning_fed(
        stage,
        "--config",
        "configs/tiny.yaml",
        "--trainer.enable_progress_bar=false",
        f"--trainer.logger={logger}",
        f"--trainer.default_root_dir={tmp_path / 'other'}",
        *given,
        f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "other").exists()
    after = _files(run)
    added = sorted(set(after) - set(before))
    assert added[-1] == f"{stage}_results.json"
    events = [name for name in added[:-1] if Path(name).name.startswith("events.out.tfevents.")]
    assert added[:-1] == events and len(events) == (logger == "true"), added
    assert {name: after[name] for name in before} == before


@pytest.mark.parametrize(
    ("stage", "logger", "where"),
    [("validate", "true", "checkpoints"), ("test", "true", "alone"), ("validate", "false", "checkpoints")],
    ids=["validate", "test_alone", "validate_no_logger"],
)
def test_a_checkpoint_outside_a_run_folder_is_evaluated_in_one_new_version_folder(
    tmp_path, earlier, stage, logger, where
):
    """Issue 41: ``validate --ckpt_path n/mine/checkpoints/last.ckpt --trainer.default_root_dir n/root`` (a
    checkpoint copied out alone: ``n/mine`` is no run folder) split its outputs: ``validate_results.json`` into
    ``n/mine`` (into ``n`` for ``n/last.ckpt``), the events, ``config.yaml``, ``hparams.yaml`` and ``.lock`` into
    ``n/root/lightning_logs/version_0``. All of them now go into that new ``version_N``, as a resume of such a
    checkpoint starts one; the user's folder is left as it was."""
    mine = tmp_path / "n" / "mine"
    ckpt = mine / "checkpoints" / "last.ckpt" if where == "checkpoints" else mine / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    shutil.copyfile(earlier / CHECKPOINT, ckpt)
    before = _files(mine)
    rows = tmp_path / "test.jsonl"  # `test` needs a test set
    rows.write_text('{"prompt": "p", "chosen": "a", "rejected": "b", "client_id": 0}\n')
    given = [f"--data.init_args.test_dataset={rows}"] if stage == "test" else []
    root = tmp_path / "n" / "root"
    proc = lightning_fed(
        stage,
        "--config",
        "configs/tiny.yaml",
        "--trainer.enable_progress_bar=false",
        f"--trainer.logger={logger}",
        f"--trainer.default_root_dir={root}",
        *given,
        f"--ckpt_path={ckpt}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    version = root / "lightning_logs" / "version_0"
    assert f"results in {version / f'{stage}_results.json'}" in proc.stderr, proc.stderr[-3000:]
    assert _files(mine) == before and sorted(p.name for p in (tmp_path / "n").iterdir()) == ["mine", "root"]
    made = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert all(name.startswith(f"lightning_logs{os.sep}version_0{os.sep}") for name in made), made
    assert {f"{stage}_results.json", "config.yaml"} <= {Path(name).name for name in made}, made


def _rounds(run: Path) -> list[dict]:
    """``rounds.jsonl`` of ``run`` without the wall-clock seconds (the only field two equal runs differ in)."""
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in (run / "rounds.jsonl").open()]


def _states(run: Path) -> list[str]:
    """The tensors of each client state file in ``run``, by client (not by name: the file names and metadata
    hold the run's folder)."""
    from safetensors.torch import load_file

    return sorted(
        json.dumps([p.name.split("-")[0], {k: v.tolist() for k, v in sorted(load_file(p).items())}])
        for p in (run / "client_states").iterdir()
    )


def test_a_copy_resumes_from_its_own_client_states_after_the_original_moved_on(tmp_path):
    """A resume of a copy reads its records and client states from the copy, never from the folder the
    checkpoint names: that one (X) was resumed since, to more rounds, and rewrote its state files. The copy (Y)
    must end as another copy (Z) resumed while X was untouched. SCAFFOLD keeps a state per client. Five runs of
    one round or two (about 90 s): X must move on after the copies were made, and the reference needs its own.
    On 593429a Y's resume read X's client_states/ and stopped: ``error: ckpt_path '.../Y/.../last.ckpt': client 3's
    state file '.../X/lightning_logs/version_0/client_states/client_3-<digest>.safetensors' is missing``."""
    args = (*ARGS[:-1], "--federation.strategy=lightning_fed.strategies.Scaffold")
    x, y, z = tmp_path / "X", tmp_path / "Y", tmp_path / "Z"

    def fit(rounds: int, *more: str) -> None:
        proc = lightning_fed("fit", "--config", "configs/tiny.yaml", *args, f"--federation.rounds={rounds}", *more)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr.count("error:") == 0, proc.stderr[-3000:]

    fit(1, f"--trainer.default_root_dir={x}")
    assert any((x / RUN / "client_states").iterdir())
    shutil.copytree(x, y)
    shutil.copytree(x, z)
    fit(2, f"--ckpt_path={z / CHECKPOINT}")  # the reference: X as it was when copied
    fit(3, f"--ckpt_path={x / CHECKPOINT}")  # X moves on: its round 1 states are replaced
    lines = (x / RUN / "rounds.jsonl").read_text().splitlines(keepends=True)
    (x / RUN / "rounds.jsonl").write_text(lines[0].replace('"up_bytes": ', '"up_bytes": 1') + "".join(lines[1:]))
    moved_on = _files(x)  # and its round 1 record differs from the copies' (a history read from X shows it)
    fit(2, f"--ckpt_path={y / CHECKPOINT}")
    assert _rounds(y / RUN) == _rounds(z / RUN)
    assert _states(y / RUN) == _states(z / RUN)
    assert _files(x) == moved_on  # nothing written into X
