"""``lightning-fed <subcommand> --help``: a stored page, the live parser's, without importing torch.

Times are measured by ``benchmarks/cli_startup.py``, never asserted; what is asserted here is
what makes them short (nothing heavy imported) and that the stored pages are the live ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed import help_pages

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
for name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE", help_pages.LIVE_ENV):
    ENV.pop(name, None)
HEAVY = ("torch", "lightning", "transformers", "peft", "bitsandbytes", "datasets", "lm_eval", "pandas")
REGENERATE = "stale stored --help pages: commit lightning_fed/help_pages.json"


def test_the_stored_pages_are_the_live_parsers_pages():
    """Regenerates the pages from the live parsers; when they differ from the stored ones, the file
    is rewritten (nothing to remember or to run by hand) and the test fails until it is committed."""
    live = help_pages.live_pages()
    source = help_pages.render(live, help_pages.versions())
    if help_pages.PAGES_FILE.read_text(encoding="utf-8") != source:
        before = help_pages.stored()
        help_pages.PAGES_FILE.write_text(source, encoding="utf-8")
        changed = sorted(n for n in live if before["pages"].get(n) != live[n])
        if before["versions"] != help_pages.versions():
            changed.append(f"versions {before['versions']} -> {help_pages.versions()}")
        pytest.fail(
            f"{REGENERATE}: lightning_fed/help_pages.json was stale ({', '.join(changed)}) and is rewritten now"
        )
    assert sorted(live) == sorted(help_pages.SUBCOMMANDS)
    assert "--federation.rounds" in live["fit"] and "--benchmarks" in live["evaluate"]


def test_no_page_names_a_class_of_a_library_its_key_leaves_out():
    """The pages are keyed on the versions of :data:`help_pages.LIBRARIES` only, so a class of any
    other library (transformers, PEFT, accelerate's or bitsandbytes' optimizers...) on a page would
    tie it to that library's version without the key knowing."""
    keyed = {"lightning_fed", *(name.replace("-", "_") for name in help_pages.LIBRARIES)}
    for name, page in help_pages.stored()["pages"].items():
        lists = re.findall(r"known subclasses:([^)]*)\)", page)
        paths = [p for known in lists for p in re.sub(r"\s+", "", known).split(",")]  # wrapped across lines
        packages = {path.split(".")[0] for path in paths}
        assert packages <= keyed, (name, packages - keyed)
        assert name not in ("fit", "validate", "test") or {"lightning", "lightning_fed"} <= packages


def test_a_newer_transformers_or_peft_keeps_the_stored_page(monkeypatch):
    """Issue 41 item 9: ``pip install`` resolved transformers 5.24.0 (pages made with 5.23.0) and
    every ``--help`` built the live parser (12-19 s of CPU)."""
    monkeypatch.setenv("COLUMNS", "100")
    real = help_pages.version
    newer = {"transformers": "5.24.0", "peft": "0.21.9"}
    monkeypatch.setattr(help_pages, "version", lambda name: newer.get(name) or real(name))
    assert help_pages.stored_help(["fit", "--help"]) == help_pages.stored()["pages"]["fit"]


def test_every_subcommand_help_answers_without_importing_torch():
    probe = (
        "import contextlib, io, json, sys\n"
        "from lightning_fed.cli import console_main\n"
        "out = {}\n"
        f"for name in {list(help_pages.SUBCOMMANDS)!r}:\n"
        "    page = io.StringIO()\n"
        "    with contextlib.redirect_stdout(page):\n"
        "        code = console_main([name, '--help'])\n"
        "    out[name] = [code, page.getvalue()]\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps({'pages': out, 'heavy': heavy}))"
    )
    env = {**ENV, "COLUMNS": str(help_pages.COLUMNS)}
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert found["heavy"] == []
    for name in help_pages.SUBCOMMANDS:
        assert found["pages"][name] == [0, help_pages.stored()["pages"][name]], name


@pytest.mark.parametrize(
    "argv",
    [["fit", "--config", "tiny", "--help"], ["fit", "--print_config"], ["fit"], ["flower", "--help"], ["nope", "-h"]],
)
def test_only_the_bare_help_of_a_stored_subcommand_is_answered_from_the_page(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert help_pages.stored_help(["fit", "--help"]) == help_pages.stored()["pages"]["fit"]
    assert help_pages.stored_help(["plan", "-h"]) == help_pages.stored()["pages"]["plan"]
    assert help_pages.stored_help(argv) is None


def test_the_live_parser_answers_when_the_page_may_differ(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert help_pages.stored_help(["fit", "--help"]) is not None
    monkeypatch.setattr(help_pages, "versions", lambda: {**help_pages.stored()["versions"], "lightning": "9.9.9"})
    assert help_pages.stored_help(["fit", "--help"]) is None  # another Lightning: other Trainer options
    monkeypatch.undo()
    monkeypatch.setattr(help_pages, "entry_points", lambda group: ["a plugin"] if group.endswith("modules") else [])
    assert help_pages.stored_help(["fit", "--help"]) is None  # a plugin's objectives would join the page
    monkeypatch.undo()
    monkeypatch.setenv("COLUMNS", "60")
    assert help_pages.stored_help(["fit", "--help"]) is None  # narrower than the page: argparse wraps to fit
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv(help_pages.LIVE_ENV, "1")
    assert help_pages.stored_help(["fit", "--help"]) is None


def test_every_evaluate_option_has_a_description_and_each_group_a_whole_title():
    page = help_pages.stored()["pages"]["evaluate"]  # the live parser's page (test above)
    undescribed = re.findall(r"^  (--\S+)[^\n]*\n\s+\(type:", page, re.M) + re.findall(
        r"^  (--\S+) \S+ +\(type:", page, re.M
    )
    assert undescribed == []
    for title in ("lm-evaluation-harness tasks (--benchmarks '[lm_eval]'):", "HumanEval pass@1 (--benchmarks"):
        assert f"\n{title}" in page
    assert "\nLLM-as-judge evaluation (--benchmarks '[judge]'):\n  The judge is exactly one of --judge.url" in page
    assert "``" not in page.split("options:")[0]  # the description, without reST quotes


def test_a_class_s_help_needs_no_config(tmp_path):
    """Red team 14 L4: ``fit --federation.hooks.help RoundLRSchedule`` (``fit --help``'s "Show the help for
    the given subclass of RoundHook and exit") without ``--config`` was refused before the parser by the
    precheck's "fit.data, fit.model: required but missing from the config", exit 2. Now the precheck leaves
    ``--<option>.help`` to the live parser, as ``--help``: it prints the class's options, exit 0, from an
    empty folder that stays empty. Seen failing on 08c1cba (that line, exit 2)."""
    argv = [sys.executable, "-m", "lightning_fed.cli", "fit", "--federation.hooks.help", "RoundLRSchedule"]
    proc = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=1800)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "\nHelp for --federation.hooks.help=lightning_fed.callbacks.RoundLRSchedule\n" in proc.stdout
    assert "--federation.hooks.schedule SCHEDULE" in proc.stdout
    assert list(tmp_path.iterdir()) == []
