"""Property test of configs (issue 22): any value for an option (types, ranges, NaN/inf, huge
numbers, strings) is parsed and built, or refused as exit 2 in one line naming the option;
never exit 1, and nothing is written by building (in-process, ``run=False``)."""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_fed.cli import main
from tests.boundary.properties import assert_user_error

OPTIONS = {
    "model.init_args.lr": "lr",
    "model.init_args.beta": "beta",
    "model.init_args.lora": "lora",
    "model.init_args.lora.r": "r",
    "model.init_args.lora.alpha": "alpha",
    "model.init_args.lora.dropout": "dropout",
    "data.init_args.max_length": "max_length",
    "data.init_args.batch_size": "batch_size",
    "data.init_args.num_clients": "num_clients",
    "data.init_args.val_fraction": "val_fraction",
    "data.init_args.min_prompt_length": "min_prompt_length",
    "data.init_args.max_completion_length": "max_completion_length",
    "data.init_args.truncation": "truncation",
    "federation.rounds": "rounds",
    "federation.clients_per_round": "clients_per_round",
    "federation.local_steps": "local_steps",
    "federation.local_epochs": "local_epochs",
    "seed_everything": "seed_everything",
}
values = st.one_of(
    st.integers(-3, 40),
    st.sampled_from([0, -1, 10**12, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, -1e300, 1e-300, 0.5, 1.0]),
    st.sampled_from(["big", "", "1e8", "null", "[1, 2]", "{a: 1}", "true", "prompt_left", "💥"]),
)


def _text(value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return str(value)


# About 0.25 s an example (a tiny model is built each time): half the ci profile's count.
@settings(max_examples=100) if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else (lambda f: f)
@given(overrides=st.dictionaries(st.sampled_from(sorted(OPTIONS)), values, min_size=1, max_size=3))
def test_any_option_value_is_built_or_refused_in_one_line_naming_it(overrides):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "run"
        args = ["--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}"]
        args += [f"--{key}={_text(value)}" for key, value in overrides.items()]
        names = [OPTIONS[k] for k in overrides]
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                main(args, run=False)
        except SystemExit as exit_:  # the parser printed its error
            assert exit_.code == 2, (args, stderr.getvalue())
            errors = [line for line in stderr.getvalue().splitlines() if line.startswith("error:")]
            assert len(errors) == 1, (args, stderr.getvalue())
            assert any(n in errors[0] for n in names), (args, errors[0])
        except Exception as err:  # noqa: BLE001 - the property: every failure is a user error naming the option
            assert_user_error(err, *names)
        assert not root.exists()  # building the objects writes nothing
