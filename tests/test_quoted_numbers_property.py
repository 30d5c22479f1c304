"""Any number YAML writes, given quoted (``alpha: "0.3"``), is read by the precheck as its unquoted
value is, in every section: a typed option of ``model:``, ``data:``, ``federation:``, ``trainer:``,
a field of ``data.partition``'s class, and a value of a mapping-typed option (``model.backbone.config``,
``data.synthetic_args``), as jsonargparse reads each (issue 41 M12: on 08c1cba ``data.partition.alpha``
and ``model.backbone.config.n_embd`` refused every quoted number). In process (the precheck imports no
torch); tests/test_value_rules_cli.py runs the CLI itself on a few of these."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_fed.config_precheck import precheck_arguments
from lightning_fed.errors import ConfigRefusal
from tests.helpers.refusals import shipped_config

DIRICHLET = {"class_path": "lightning_fed.datamodules.Dirichlet", "init_args": {"key": "group", "alpha": 1.0}}
OPTIONS = (
    "model.init_args.lr",
    "model.init_args.beta",
    "model.init_args.lora.r",
    "model.init_args.backbone.config.n_embd",
    "data.init_args.batch_size",
    "data.init_args.num_clients",
    "data.init_args.partition.init_args.alpha",
    "data.init_args.partition.init_args.min_size",
    "data.init_args.synthetic_args.examples_per_client",
    "federation.rounds",
    "federation.local_steps",
    "trainer.gradient_clip_val",
)
"""One typed number of each kind (float, int) per section, and the nested ones."""
NUMBERS = st.one_of(
    st.integers(-(10**7), 10**7),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0, 1, 2, 4, 32, 0.5, 1.0, 1e-4, 3.0, -1]),
)


def _written(number: float) -> str:
    """``number`` as YAML writes it (``1.0e-05``, ``.inf``, ``.nan``): the text a user quotes."""
    return yaml.safe_dump(number).split("\n", 1)[0]


def _outcome(folder: Path, where: str, value: object) -> str | None:
    """The precheck's line for the tiny config with ``where`` set to ``value`` (``None``: passed on)."""
    config = shipped_config("tiny")
    config["data"]["init_args"]["partition"] = dict(DIRICHLET, init_args=dict(DIRICHLET["init_args"]))
    *path, last = where.split(".")
    node = config
    for key in path:
        node = node[key]
    node[last] = value
    file = folder / "run.yaml"
    file.write_text(yaml.safe_dump(config), encoding="utf-8")
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            precheck_arguments(["fit", "--config", str(file)])
        except ConfigRefusal as refusal:
            return str(refusal)
        except SystemExit:
            return err.getvalue()
    return None


def _option(line: str | None) -> str | None:
    """The option a refusal names first (after its file): what it refuses, whatever the value's spelling."""
    if line is None:
        return None
    line = line.removeprefix("error: ")
    return (line.split("': ", 1)[1] if line.startswith("config '") else line).split(" ", 1)[0]


@pytest.mark.parametrize("where", OPTIONS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(number=NUMBERS)
def test_a_quoted_number_is_read_as_the_number(tmp_path, where, number):
    unquoted = _outcome(tmp_path, where, number)
    quoted = _outcome(tmp_path, where, _written(number))
    assert (quoted is None, _option(quoted)) == (unquoted is None, _option(unquoted)), (where, number, quoted, unquoted)


CROSS = {
    "model.init_args.lr": "federation.hooks.0.init_args.min_lr",  # RoundLRSchedule's cosine floor
}
"""Pairs of options a check holds one against the other (docs/trust_boundary.md: quoted numbers are read
as numbers by these too; red team 15 H2: a quoted ``min_lr`` or ``lr`` skipped the check on 4a8638c)."""
COSINE = {"class_path": "lightning_fed.callbacks.RoundLRSchedule", "init_args": {"schedule": "cosine", "min_lr": 0.0}}
POSITIVE = st.one_of(st.floats(1e-6, 1e3, width=64), st.sampled_from([1e-4, 0.005, 0.5, 1.0, 100.0]))


def _pair_outcome(folder: Path, values: dict[str, object]) -> str | None:
    """The precheck's line for the tiny config with a cosine RoundLRSchedule and ``values`` set."""
    config = shipped_config("tiny")
    config["federation"]["hooks"] = [dict(COSINE, init_args=dict(COSINE["init_args"]))]
    for where, value in values.items():
        *path, last = where.split(".")
        node = config
        for key in path:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    file = folder / "run.yaml"
    file.write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        precheck_arguments(["fit", "--config", str(file)])
    except ConfigRefusal as refusal:
        return str(refusal)
    return None


@pytest.mark.parametrize("first", CROSS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(numbers=st.tuples(POSITIVE, POSITIVE), quoted=st.sampled_from([(True, False), (False, True), (True, True)]))
def test_a_quoted_number_is_held_against_another_option_as_the_number(tmp_path, first, numbers, quoted):
    pair = (first, CROSS[first])
    unquoted = _pair_outcome(tmp_path, dict(zip(pair, numbers)))
    spelt = {where: _written(n) if q else n for where, n, q in zip(pair, numbers, quoted)}
    assert _pair_outcome(tmp_path, spelt) == unquoted, (spelt, unquoted)
