"""A private run through ``lightning-fed fit`` as people run it (issue 40, items 2-4): its key file
is in the key store, named on the closing line, and a key file swapped for another valid key is
refused on resume (exit 2, one line naming it, the run folder untouched); its log lines carry no
figure per client, while a run without DP shows them."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_fed.privacy.secret import RunSecret
from tests.helpers.cli import ENV, HEAVY_IMPORTED, run_process

ROOT = Path(__file__).resolve().parents[2]
PER_CLIENT = re.compile(r"per client: \[[\d, ]+\]")


def _config(tmp_path: Path, private: str) -> Path:
    """``configs/tiny.yaml`` cut to 1 round of 2 steps, ``max_length`` 64 so that examples are
    truncated (the warning that named per-client counts), with ``private`` DP."""
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["federation"].update(rounds=1, local_steps=2)
    cfg["data"]["init_args"].update(max_length=64, on_overflow="truncate")
    if private == "dp_sgd":  # as configs/fedit_dpsgd.yaml: DP-SGD inside every client
        cfg["model"]["class_path"] = "lightning_fed.privacy.DPDPOModule"
        cfg["model"]["init_args"]["dp_sgd"] = {"clip_norm": 1.0, "noise_multiplier": 1.0}
    elif private == "client_level":  # as configs/feddpo_dp.yaml: ClientLevelDP around the server strategy
        cfg["federation"]["privacy"] = {"noise_multiplier": 1.0}
        cfg["federation"]["strategy"] = {
            "class_path": "lightning_fed.privacy.ClientLevelDP",
            "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}, "clip_norm": 0.5},
        }
    cfg["trainer"]["default_root_dir"] = str(tmp_path / "run")
    path = tmp_path / f"{private}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _fit(config: Path, key_store: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.update(OMP_NUM_THREADS="1", LIGHTNING_FED_KEY_DIR=str(key_store))
    env.pop("LIGHTNING_FED_DEBUG", None)
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", str(config), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("private", ["none", "client_level"])
def test_per_client_figures_only_outside_a_private_run(tmp_path, key_store, private):
    proc = _fit(_config(tmp_path, private), key_store)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "examples truncated to fit data.max_length=64" in out  # the warning is there, with its total
    assert bool(PER_CLIENT.search(out)) is (private == "none"), out[-3000:]


def test_a_dp_sgd_run_keeps_its_key_in_the_store_and_refuses_a_swapped_or_damaged_one(tmp_path, key_store):
    """Each refusal is one line naming ``ckpt_path`` and the key file, the run folder unchanged. Issue 41, M13:
    on 08c1cba a key file of random bytes said ``error: UnicodeDecodeError: 'utf-8' codec can't decode byte ...``
    and the ``--debug`` hint, a cut key named the file with the hint as a second line; the lines named no
    ``ckpt_path``. One fit and four resumes (~60 s of wall time): the key is checked once the checkpoint is read."""
    config = _config(tmp_path, "dp_sgd")
    proc = _fit(config, key_store)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "examples truncated to fit data.max_length=64" in out and not PER_CLIENT.search(out)
    (key,) = key_store.glob("*.key")
    assert re.fullmatch(r"[0-9a-f]{32}\.key", key.name)
    closing = proc.stdout.strip().splitlines()[-1]
    assert closing.endswith(
        f"; secret key: {key} (not in the run folder; deleting it makes the run's randomness unrecoverable)"
    )
    run = tmp_path / "run"
    assert not list(run.rglob("*.key")) and not list(tmp_path.glob(".*.key"))
    ckpt = next(run.rglob("last.ckpt"))
    # No record of which examples were trained on: DPO's reference cache (keyed by each example's
    # content) is off in a private run, so the checkpoint cannot tell whose data was sampled.
    assert "reference_cache" not in torch.load(ckpt, map_location="cpu", weights_only=True)

    original, text = RunSecret.read(key), key.read_text()
    RunSecret.fresh().write(key)  # another valid key in the run's key file
    before = _hashes(run)
    resumed = _fit(config, key_store, "--ckpt_path", str(ckpt))
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    message = (
        f"ckpt_path {str(ckpt)!r}: {key}: not the key of the run that wrote this checkpoint (its fingerprint"
        " differs): put the run's own key file back, or delete this one to resume with fresh secret randomness"
    )
    assert resumed.stderr == f"error: {message}\n"
    assert _hashes(run) == before

    damaged = {  # random bytes (not text), a cut key
        bytes(range(0x80, 0xC0)): "not hex text: byte 0x80 at position 0",
        text[:20].encode(): "a run key is 32 bytes, got 10",
    }
    for content, why in damaged.items():
        key.write_bytes(content)
        resumed = _fit(config, key_store, "--ckpt_path", str(ckpt))
        message = (
            f"ckpt_path {str(ckpt)!r}: {key}: not a lightning-fed run key ({why}): put the run's own key file back,"
            " or delete this one to resume with fresh secret randomness"
        )
        assert (resumed.returncode, resumed.stderr) == (2, f"error: {message}\n")
        assert _hashes(run) == before and key.read_bytes() == content

    # The run's own key back: the resume goes on (the checkpoint checker knows the key's fingerprint).
    original.write(key)
    resumed = _fit(config, key_store, "--ckpt_path", str(ckpt), "--federation.rounds=2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_a_damaged_key_file_is_refused_before_lightning_in_one_line_even_with_a_changed_option(tmp_path, key_store):
    """Issue 41: a resume whose key file holds random bytes was refused only once Lightning was imported and the
    model built (~15 s of CPU), and with ``--federation.rounds 2`` the ``resuming ...: federation.rounds: 1 -> 2
    (allowed)`` line came first: two lines for a refused run. Now the early checkpoint check refuses it, torch
    alone imported (the child records whether it imported Lightning, transformers or PEFT), in one line, the run
    folder and the key file unchanged. One fit, then one resume. Seen failing on 1ce1023 (the allowed line, then
    the error; Lightning, transformers and PEFT imported)."""
    proc = _fit(_config(tmp_path, "dp_sgd"), key_store)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (key,) = key_store.glob("*.key")
    run = tmp_path / "run"
    ckpt = next(run.rglob("last.ckpt"))
    damaged = bytes(range(0x80, 0xC0))
    key.write_bytes(damaged)
    before = _hashes(run)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HEAVY_IMPORTED.format(path=str(tmp_path / "heavy.txt")))
    env = {**ENV, "LIGHTNING_FED_KEY_DIR": str(key_store), "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    args = ["fit", "--config", str(tmp_path / "dp_sgd.yaml"), "--ckpt_path", str(ckpt), "--federation.rounds", "2"]
    resumed = run_process([sys.executable, "-m", "lightning_fed.cli", *args], env=env)
    message = (
        f"ckpt_path {str(ckpt)!r}: {key}: not a lightning-fed run key (not hex text: byte 0x80 at position 0): put"
        " the run's own key file back, or delete this one to resume with fresh secret randomness"
    )
    assert (resumed.returncode, resumed.stderr) == (2, f"error: {message}\n")
    assert (tmp_path / "heavy.txt").read_text() == ""
    assert _hashes(run) == before and key.read_bytes() == damaged


def test_a_key_path_that_is_not_a_regular_file_is_refused_not_resumed_as_a_lost_key(tmp_path, key_store):
    """Red team 15, H3: on 4a8638c a FIFO, a folder or a symlink to ``/dev/zero`` at the run's key path was taken
    for a lost key: ``warning: resuming a private run without its key file ...``, fresh randomness, exit 0, a
    round trained. Now each is refused before Lightning in one line naming ``ckpt_path``, the key file and what
    it is (the FIFO never opened), the run folder and the key path unchanged. One fit, then three resumes."""
    proc = _fit(_config(tmp_path, "dp_sgd"), key_store)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (key,) = key_store.glob("*.key")
    run = tmp_path / "run"
    ckpt = next(run.rglob("last.ckpt"))
    before = _hashes(run)
    key.unlink()
    env = {**ENV, "LIGHTNING_FED_KEY_DIR": str(key_store), "PYTHONPATH": str(ROOT)}
    args = ["fit", "--config", str(tmp_path / "dp_sgd.yaml"), "--ckpt_path", str(ckpt), "--federation.rounds", "2"]
    for make, kind in (
        (os.mkfifo, "a FIFO"),
        (os.mkdir, "a folder"),
        (lambda p: os.symlink("/dev/zero", p), "a symlink to a character device /dev/zero"),
    ):
        make(key)
        resumed = run_process([sys.executable, "-m", "lightning_fed.cli", *args], env=env)
        message = (
            f"ckpt_path {str(ckpt)!r}: {key}: not a lightning-fed run key ({kind}): put the run's own key file back,"
            " or delete this one to resume with fresh secret randomness"
        )
        assert (resumed.returncode, resumed.stderr) == (2, f"error: {message}\n"), kind
        assert _hashes(run) == before and sorted(key_store.iterdir()) == [key], kind
        key.rmdir() if kind == "a folder" else key.unlink()


def test_a_new_run_never_writes_its_key_through_a_fifo_or_a_folder(tmp_path):
    """A FIFO at a new key path (or its ``.tmp``) would have blocked the run; a folder made ``os.replace`` fail."""
    for name in ("k.key", "k.key.tmp"):
        for make, kind in ((os.mkfifo, "a FIFO"), (os.mkdir, "a folder")):
            there = tmp_path / name
            make(there)
            with pytest.raises(ValueError, match=re.escape(f"{there}: not a lightning-fed run key ({kind})")):
                RunSecret.fresh().write(tmp_path / "k.key")
            there.rmdir() if kind == "a folder" else there.unlink()
            assert not list(tmp_path.iterdir())


def test_a_calibrated_private_run_prints_the_package_lines_without_a_level_prefix(tmp_path, key_store):
    """Red team 12 row 8 (dp_eps_1e4): in a ClientLevelDP run whose noise is calibrated for
    ``federation.privacy.target_epsilon`` (with an adaptive clip's ``count_stddev``, checked before
    Lightning: Opacus imported first, whose ``logging.basicConfig`` gives the root logger a handler), every
    package line read ``INFO: federation: 8 clients, ...``: Lightning then gave ``lightning.pytorch`` no
    handler of its own and its records reached the ``lightning`` logger's ``%(levelname)s: `` handler
    (lightning_fed/console.py own_handlers). One round of one step. Seen failing on 7cc16c0."""
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["data"]["init_args"]["num_clients"] = 8
    cfg["federation"].update(rounds=1, local_steps=1, sampling="poisson", sampling_rate=0.25)
    cfg["federation"]["privacy"] = {"target_epsilon": 4.0}
    cfg["federation"]["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {
            "strategy": {"class_path": "lightning_fed.strategies.FedAvg"},
            "clip_norm": 0.05,
            "adaptive": {"target_quantile": 0.5, "learning_rate": 0.2, "count_stddev": 2.0},
        },
    }
    cfg["trainer"].update(default_root_dir=str(tmp_path / "run"), enable_progress_bar=False)
    config = tmp_path / "calibrated.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = _fit(config, key_store)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("federation: 8 clients, "), proc.stderr[-3000:]
    assert [line for line in lines if line.startswith("INFO")] == []
