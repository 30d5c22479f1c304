"""``lightning-fed flower`` without the ``flower`` extra (red team 12 row 6, help_flower): its help
answers and says what installs Flower; ``flower clientapp ...`` is one line naming the extra, exit 2
(lightning_fed/deploy/flower_command.py). On 7cc16c0 both printed ``error: ModuleNotFoundError: No
module named 'httpx'`` and the ``--debug`` hint (the subcommand's module imported httpx and flwr at
the top). The children cannot import ``flwr`` nor ``httpx`` (a ``sitecustomize`` sets
``sys.modules[name] = None``: ``find_spec`` then answers ``None``, as for a package never installed),
nor torch; each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.cli import NO_TORCH, REACHED_TORCH, ROOT, lightning_fed

WITHOUT_FLOWER = """import sys
for name in ("flwr", "httpx"):
    sys.modules[name] = None
"""
INSTALL = "pip install 'lightning-fed[flower]'"


def _without_flower(tmp_path, *args: str):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WITHOUT_FLOWER + NO_TORCH)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    env.pop("LIGHTNING_FED_DEBUG", None)
    proc = lightning_fed(*args, cwd=cwd, env=env)
    assert REACHED_TORCH not in proc.stderr
    assert list(cwd.iterdir()) == []
    return proc


@pytest.mark.parametrize("args", [["flower", "--help"], ["flower", "clientapp", "--help"]], ids=["flower", "clientapp"])
def test_the_flower_help_answers_without_the_extra_and_names_it(tmp_path, args):
    proc = _without_flower(tmp_path, *args)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith(f"usage: lightning-fed {' '.join(args[:-1])} [-h]")
    assert INSTALL in " ".join(proc.stdout.split())  # argparse wraps the description


def test_flower_clientapp_without_the_extra_is_one_line_naming_it(tmp_path):
    proc = _without_flower(tmp_path, "flower", "clientapp", "--insecure")
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "error: lightning-fed flower clientapp needs Flower (module flwr), which is not installed: it comes"
        f" with the `flower` extra: {INSTALL}\n",
    )


def test_the_help_names_flwrs_default_runtime_api_address():
    """The help's default is written in flower_command.py (no flwr there): it is flwr's."""
    pytest.importorskip("flwr")
    from flwr.supercore.constant import SUPERNODE_DEFAULT_CLIENT_ADDRESS

    from lightning_fed.deploy.flower_command import SUPERNODE_DEFAULT_CLIENT_ADDRESS as OURS

    assert OURS == SUPERNODE_DEFAULT_CLIENT_ADDRESS
