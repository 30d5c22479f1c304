"""``lightning-fed plan``'s numeric options: NaN, infinity, huge, negative or not a number, each one
line naming the option, its bounds and the value as given, exit 2, before torch (issue 41).

On 3df2116 ``--batch-size nan`` (and ``inf``, ``x``; ``--max-length`` likewise) got argparse's line
(``argument --batch-size: invalid int value: 'nan'`` and the tip), not the one ``--batch-size 0`` gets;
``--batch-size 10**24`` reached torch (``TypeError: zeros(): argument 'size' failed to unpack ...``, a
frame dump in one line); ``--runtime-mb 1e300`` planned a total of 10**294 GiB.
"""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_fed.plan_cli import MAX_RUNTIME_MB, MAX_SIZE, build_parser, value_problems
from tests.helpers.cli import ROOT, heavy_blocked_env, lightning_fed

TINY = str(ROOT / "lightning_fed" / "configs" / "tiny.yaml")
SIZES = {"--batch-size": 1, "--max-length": 2}
BOUNDS = {"--batch-size": f"an integer in [1, {MAX_SIZE}]", "--max-length": "an integer >= 2"}
"""``--max-length``'s largest is the model's positions (``tests/planning/test_plan_cli.py``: 10**12)."""
CASES = [
    *[
        (flag, value, f"{flag} must be {BOUNDS[flag]}, got {shown}")
        for flag in SIZES
        for value, shown in (("nan", "'nan'"), ("inf", "'inf'"), ("x", "'x'"), ("-7", "-7"))
    ],
    ("--batch-size", str(10**24), f"--batch-size must be {BOUNDS['--batch-size']}, got {10**24}"),
    *[
        ("--runtime-mb", value, f"--runtime-mb must be a number of MiB in [0, {MAX_RUNTIME_MB}], got {shown}")
        for value, shown in (("nan", "nan"), ("inf", "inf"), ("1e300", "1e+300"), ("-1", "-1.0"), ("x", "'x'"))
    ],
]


@pytest.mark.parametrize(("flag", "value", "line"), CASES, ids=[f"{c[0]}={c[1][:6]}" for c in CASES])
def test_a_numeric_option_no_plan_can_have_is_one_line_before_torch(tmp_path, flag, value, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed("plan", "--config", TINY, f"{flag}={value}", cwd=cwd, env=heavy_blocked_env(tmp_path / "b"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {line}\n")
    assert list(cwd.iterdir()) == []


@settings(max_examples=300, deadline=None)
@given(flag=st.sampled_from([*SIZES, "--runtime-mb"]), text=st.text(max_size=12) | st.from_regex(r"-?[0-9e.+_]{1,30}"))
def test_every_text_is_planned_or_named_with_its_bounds(flag, text):
    """Any value parses (no argparse line) and is either within the option's bounds or refused by one line
    naming the option and the value as given."""
    args = build_parser().parse_args(["--config", "tiny", f"{flag}={text}"])
    given_value = getattr(args, flag[2:].replace("-", "_"))
    problems = value_problems(args)
    if flag == "--runtime-mb":
        ok = isinstance(given_value, float) and 0 <= given_value <= MAX_RUNTIME_MB
    else:
        most = MAX_SIZE if flag == "--batch-size" else float("inf")
        ok = isinstance(given_value, int) and SIZES[flag] <= given_value <= most
    assert problems == ([] if ok else [problems[0]])
    if not ok:
        assert problems[0].startswith(f"{flag} must be ") and problems[0].endswith(f", got {given_value!r}")
    assert isinstance(args, argparse.Namespace)
