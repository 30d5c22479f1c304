"""A planted set's list of names given ``null`` where its generator takes no ``None`` (``groups``,
``held_out_families``), refused before torch in one line (red team 8, row 21's neighbour; the
generators' ``list(None)`` was ``TypeError: 'NoneType' object is not iterable`` and a ``--debug`` line,
exit 2 after the imports, on 52f9c49). ``families: null`` is every family and passes; ``groups: positive``
(one name for a list) is the generators' documented form (``[groups] if isinstance(groups, str)``) and
passes too. The children cannot import torch (``tests/helpers/cli.py``); the folder stays empty.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch

CASES = {
    "groups_null": (
        ["--config", "tiny", "--data.init_args.synthetic_args={examples_per_client: 24, groups: null}"],
        "data.synthetic_args.groups must be a name or a list of names, got None",
    ),
    "held_out_null": (
        [
            "--config",
            "fedbiot",
            "--data.init_args.synthetic_args={examples_per_client: 24, held_out_families: null}",
        ],
        "data.synthetic_args.held_out_families must be a name or a list of names, got None",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(CASES.values()), ids=list(CASES))
def test_a_null_name_list_is_refused_before_torch(tmp_path, args, line):
    assert_refused_before_torch(tmp_path, ["fit", *args], line)


@pytest.mark.parametrize(
    "args",
    [
        ["--config", "tiny", "--data.init_args.synthetic_args={examples_per_client: 24, groups: positive}"],
        ["--config", "fedbiot", "--data.init_args.synthetic_args={examples_per_client: 24, families: null}"],
    ],
    ids=["one_group_by_name", "every_family"],
)
def test_one_name_or_every_family_goes_on(tmp_path, args):
    work = tmp_path / "work"
    work.mkdir()
    proc = lightning_fed_without_torch("fit", *args, cwd=work, hook=tmp_path / "hook")
    assert proc.returncode != 0 and REACHED_TORCH in proc.stderr, proc.stderr  # past every check made before torch
