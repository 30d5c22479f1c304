"""A private ``fit`` whose key store (``LIGHTNING_FED_KEY_DIR``) is no folder is refused before torch in
one line naming it and what it is (lightning_fed/federation/key_store.py's ``key_store_problem``).

On f6ad729 a DP-SGD run of the tiny config with ``LIGHTNING_FED_KEY_DIR`` a FIFO (or a regular file)
trained its round (34 s wall, 9 s CPU), wrote ``runs/.../version_0``, then exited 1 with
``error: NotADirectoryError: [Errno 20] Not a directory:`` and the ``--debug`` hint. The children
cannot import torch (tests/helpers/cli.py); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, no_torch_env, run_process
from tests.helpers.refusals import shipped_config, write_config

TAIL = ", not a folder: a private run writes its key file there; point LIGHTNING_FED_KEY_DIR at a folder"


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)


def _config(tmp_path: Path, privacy: str, seed: int | None = None) -> Path:
    config = shipped_config("tiny")
    if privacy == "dp_sgd":
        config["model"]["class_path"] = "lightning_fed.privacy.DPDPOModule"
        config["model"]["init_args"]["dp_sgd"] = {"clip_norm": 1.0, "noise_multiplier": 1.0, "seed": seed}
    elif privacy == "client_level":
        config["federation"]["strategy"] = {
            "class_path": "lightning_fed.privacy.ClientLevelDP",
            "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}, "noise_multiplier": 1.0},
        }
    config["trainer"]["default_root_dir"] = "runs"
    return write_config(tmp_path, config)


def _fit(tmp_path: Path, config: Path, store: Path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**no_torch_env(tmp_path / "hook"), "LIGHTNING_FED_KEY_DIR": str(store)}
    proc = run_process([sys.executable, "-m", "lightning_fed", "fit", "--config", str(config)], cwd=cwd, env=env)
    assert list(cwd.iterdir()) == []
    return proc


@pytest.mark.parametrize(
    ("privacy", "make", "below", "said"),
    [
        ("dp_sgd", _fifo, "", "is a FIFO"),
        ("dp_sgd", lambda p: p.write_text("x"), "", "is a regular file"),
        ("dp_sgd", lambda p: p.write_text("x"), "keys", ": {path} is a regular file"),
        ("client_level", _fifo, "", "is a FIFO"),
    ],
)
def test_a_private_run_s_key_store_that_is_no_folder_is_one_line_before_torch(tmp_path, privacy, make, below, said):
    path = tmp_path / "store"
    make(path)
    store = path / below if below else path
    proc = _fit(tmp_path, _config(tmp_path, privacy), store)
    what = said.format(path=path) if below else f" {said}"
    line = f"LIGHTNING_FED_KEY_DIR {store}{what}{TAIL}"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")


@pytest.mark.parametrize(("privacy", "seed"), [("none", None), ("dp_sgd", 3)])
def test_a_run_that_writes_no_key_is_not_refused_for_its_key_store(tmp_path, privacy, seed):
    """Not private, or a test's fixed noise seed (no key file): on to the live run (torch here)."""
    store = tmp_path / "store"
    _fifo(store)
    proc = _fit(tmp_path, _config(tmp_path, privacy, seed), store)
    assert REACHED_TORCH in proc.stderr
