"""A round hook's or a strategy wrapper's option refused before torch is imported, in one line naming
its full option path, its value and the file (red team 8's report, rows 6-13 and 21).

On 52f9c49 each of these was refused after torch, Lightning and transformers were imported (10-14 s
of CPU), most in two lines (jsonargparse's or the class's message and a hint), without the hook's
``[i]`` or the file; or was refused early under the wrong option path. The children cannot import
torch (``tests/helpers/cli.py``): a refusal that still needed the live run ends in that import error
instead; each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import lightning_fed_without_torch


def _hook(options: dict) -> Callable[[dict], None]:
    def mutate(config: dict) -> None:
        config["federation"]["hooks"][0]["init_args"].update(options)

    return mutate


def _short_hook(options: dict) -> Callable[[dict], None]:
    """The hook named by its short class name (``SystemHeterogeneity``), as the docs show it."""

    def mutate(config: dict) -> None:
        hook = config["federation"]["hooks"][0]
        hook["class_path"] = hook["class_path"].rpartition(".")[2]
        hook["init_args"].update(options)

    return mutate


FILE_CASES = {
    "short_name_unknown_key": (  # red team 8 row 8 (r04d)
        "feddpo_stragglers",
        _short_hook({"deadlin": 3}),
        "federation.hooks[0].deadlin is not an option of SystemHeterogeneity;"
        " did you mean federation.hooks[0].deadline?",
    ),
}


@pytest.mark.parametrize(("shipped", "mutate", "line"), list(FILE_CASES.values()), ids=list(FILE_CASES))
def test_a_hook_value_in_a_file_is_refused_in_one_line_before_torch(tmp_path, shipped, mutate, line):
    config = yaml.safe_load(Path(resolve_config(shipped)).read_text(encoding="utf-8"))
    mutate(config)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")
    assert list(cwd.iterdir()) == []


COMMAND_LINE_CASES = {
    "short_name_unknown_key": (  # red team 8 row 8 (r04)
        [
            "fit",
            "--config",
            "tiny",
            "--federation.hooks=[{class_path: RoundLRSchedule, init_args: {schedul: cosine}}]",
        ],
        "federation.hooks[0].schedul is not an option of RoundLRSchedule; did you mean federation.hooks[0].schedule?",
    ),
    "short_name_unknown_key_validate": (  # row 8b (q06)
        [
            "validate",
            "--config",
            "tiny",
            "--federation.hooks=[{class_path: RoundLRSchedule, init_args: {schedul: cosine}}]",
        ],
        "federation.hooks[0].schedul is not an option of RoundLRSchedule; did you mean federation.hooks[0].schedule?",
    ),
    "short_name_ranks_unknown_key": (  # row 8 (n01)
        [
            "fit",
            "--config",
            "feddpo_hetlora",
            "--federation.hooks=[{class_path: ClientRanks, init_args: {choises: [4]}}]",
        ],
        "federation.hooks[0].choises is not an option of ClientRanks; did you mean federation.hooks[0].choices?",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(COMMAND_LINE_CASES.values()), ids=list(COMMAND_LINE_CASES))
def test_a_hook_value_on_the_command_line_is_refused_in_one_line_before_torch(tmp_path, args, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook")
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []
