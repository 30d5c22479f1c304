"""``lightning-fed``'s own arguments and the shapes of a subcommand's, refused before torch (issue 41).

Found from outside on 894fdde, each refused only after torch, Lightning and transformers were
imported (7-16 s of CPU, ``/usr/bin/time`` from the console script), in jsonargparse's or
argparse's words: ``fitt`` (``invalid choice ... (choose from 'fit', 'validate', 'test')``, no
close match, not every subcommand), ``--verbose=maybe`` / ``--debug=maybe`` (``unrecognized
arguments``; after the subcommand ``--debug=maybe`` was an "unknown option" of ``fit`` though
``--debug`` may come after it, docs/guides/resume-signals.md), ``--model=null``
(``fit.model: required but missing``), ``--data.init_args.field_map=5`` (``Expected a <class
'dict'>``), ``-federation.rounds=2`` and ``--=3`` (``unrecognized arguments``). ``lightning-fed``
alone printed the 22 lines of ``--help``; ``report ""`` scanned the working folder and exited 0.

The children cannot import torch (:func:`tests.helpers.cli.lightning_fed_without_torch`) and run in
an empty folder, which stays empty.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

TOP_TIP = "tip: lightning-fed --help lists every option"


def _run(folder: Path, *args: str):
    cwd = folder / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    return lightning_fed_without_torch(*args, cwd=cwd, hook=folder / "hook"), cwd


TOP_LEVEL = {
    "typo_of_fit": (["fitt", "--config", "tiny"], "unknown subcommand 'fitt'; did you mean fit?"),
    "typo_of_report": (["reprot", "runs"], "unknown subcommand 'reprot'; did you mean report?"),
    "typo_of_configs": (["config"], "unknown subcommand 'config'; did you mean configs?"),
    "no_subcommand_close": (
        ["xyz"],
        "unknown subcommand 'xyz'; the subcommands: fit, validate, test, evaluate, plan, flower, report, configs",
    ),
    "verbose_maybe": (
        ["--verbose=maybe", "fit", "--config", "tiny"],
        "--verbose takes true or false (or nothing), got 'maybe'",
    ),
    "debug_maybe": (
        ["--debug=maybe", "fit", "--config", "tiny"],
        "--debug takes true or false (or nothing), got 'maybe'",
    ),
    "debug_maybe_after": (
        ["fit", "--config", "tiny", "--debug=maybe"],
        "--debug takes true or false (or nothing), got 'maybe'",
    ),
    "option_typo": (["--verbos", "fit"], "unknown option --verbos before the subcommand; did you mean --verbose?"),
    "subcommand_option_first": (
        ["--config", "tiny"],
        "unknown option --config before the subcommand; a subcommand comes first: lightning-fed fit --config tiny",
    ),
    "subcommand_after_options": (  # the outside run: the tip doubled `fit` and dropped the config
        ["--federation.rounds=2", "fit", "--config", "c.yaml"],
        "unknown option --federation.rounds before the subcommand; a subcommand comes first:"
        " lightning-fed fit --federation.rounds=2 --config c.yaml",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(TOP_LEVEL.values()), ids=list(TOP_LEVEL))
def test_lightning_fed_s_own_arguments_are_refused_before_torch(tmp_path, args, line):
    proc, cwd = _run(tmp_path, *args)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n{TOP_TIP}\n")
    assert list(cwd.iterdir()) == []


def test_debug_and_verbose_take_a_boolean_after_the_subcommand_too(tmp_path):
    """As documented: ``--debug`` before or after the subcommand, with an optional boolean."""
    proc, _ = _run(tmp_path, "fit", "--config", "tiny", "--verbose=false", "--debug=true", "--federation.rounds=0")
    assert proc.returncode == 2
    assert proc.stderr.endswith("error: federation.rounds must be in [1, 1000000], got 0\n")
    assert "Traceback" in proc.stderr  # --debug=true: the traceback
    proc, _ = _run(tmp_path, "--verbose", "true", "fit", "--config", "tiny", "--federation.rounds=0")
    assert (proc.returncode, proc.stderr) == (2, "error: federation.rounds must be in [1, 1000000], got 0\n")


def test_lightning_fed_alone_says_what_to_run_first_in_a_few_lines(tmp_path):
    proc, cwd = _run(tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) <= 5, proc.stderr
    assert lines[0].startswith("usage: lightning-fed ")
    assert any("lightning-fed fit --config demo" in line for line in lines)
    assert any("lightning-fed --help" in line for line in lines)
    assert list(cwd.iterdir()) == []


SHAPES = {
    "model_null": (
        ["--model=null"],
        "--model=null: fit needs model (a class such as DPOModule, or a config file), got null",
    ),
    "data_null": (
        ["--data", "null"],
        "--data=null: fit needs data (a class such as PreferenceDataModule, or a config file), got null",
    ),
    "field_map_number": (["--data.init_args.field_map=5"], "data.field_map must be a mapping or null, got 5"),
    "single_dash": (["-federation.rounds=2"], "unknown option -federation.rounds; did you mean --federation.rounds=2?"),
    "no_name": (["--=3"], "'--=3' names no option; write --<section>.<option>=<value> (e.g. --federation.rounds=2)"),
}


@pytest.mark.parametrize(("args", "line"), list(SHAPES.values()), ids=list(SHAPES))
def test_an_argument_of_the_wrong_shape_is_named_before_torch(tmp_path, args, line):
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", *args)
    tip = "" if line.startswith("data.field_map") else "tip: lightning-fed fit --help lists every option\n"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n{tip}")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ([""], "RUN_OR_GLOB '' is empty: name a run folder, a folder of runs or a glob"),
        (["runs", "--out", ""], "--out '' is empty: name the report's folder"),
    ],
    ids=["run", "out"],
)
def test_report_refuses_an_empty_path(tmp_path, args, line):
    proc, cwd = _run(tmp_path, "report", *args)
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: {line}\ntip: lightning-fed report --help lists every option\n",
    )
    assert list(cwd.iterdir()) == []


# ------------------------------------------------------------------------------ property
SUBCOMMANDS = ("fit", "validate", "test", "evaluate", "plan", "flower", "report", "configs")
FEDERATION_FIELDS = (
    "rounds",
    "clients_per_round",
    "min_clients",
    "local_steps",
    "local_epochs",
    "sampling_rate",
    "seed",
    "max_state_memory_bytes",
    "eval_every",
    "eval_panel_size",
    "per_client_scalars",
    "max_update_norm",
    "privacy.target_epsilon",
    "privacy.noise_multiplier",
    "privacy.delta",
)
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-.=", min_size=1, max_size=12)
VALUES = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "null", "abc", "[1]", "{a: 1}", "true", "-0", "1e400", "0x10"]),
)


def _one_error(proc) -> None:
    """The boundary's promise: no exit 1, no traceback, one ``error:`` line and at most a ``tip:``/hint line."""
    assert proc.returncode != 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert len(lines) <= 2 and all(line.startswith(("tip: ", "(run with")) for line in lines[1:]), proc.stderr


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=WORDS.filter(lambda w: w not in SUBCOMMANDS and w not in ("predict", "-h", "--help")))
def test_any_first_word_that_is_no_subcommand_is_one_line_before_torch(tmp_path_factory, first):
    if first.startswith(("--debug", "--verbose")):
        return  # the flags themselves (tested above)
    proc, cwd = _run(tmp_path_factory.mktemp("top"), first, "--config", "tiny")
    assert REACHED_TORCH not in proc.stderr
    assert proc.returncode == 2
    _one_error(proc)
    assert list(cwd.iterdir()) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(FEDERATION_FIELDS), value=VALUES)
def test_a_federation_value_is_taken_or_refused_in_one_line_before_torch(tmp_path_factory, option, value):
    """Either every rule takes it (the child goes on to ``import torch``), or it is refused before."""
    proc, cwd = _run(tmp_path_factory.mktemp("fed"), "fit", "--config", "tiny", f"--federation.{option}={value}")
    if REACHED_TORCH in proc.stderr:
        assert _accepted(option, value), (option, value, proc.stderr)
        return
    _one_error(proc)
    assert proc.returncode == 2
    assert list(cwd.iterdir()) == []


def _accepted(option: str, raw: str) -> bool:
    """Whether the classes take ``--federation.<option>=<raw>`` over ``tiny`` (their own check, in process)."""
    from lightning_fed.run_config import FederationConfig
    from lightning_fed.shipped_configs import resolve_config
    from lightning_fed.yaml_reading import load

    try:
        value = load(raw)
    except Exception:  # noqa: BLE001 - not YAML: the text itself
        value = raw
    section = dict(load(Path(resolve_config("tiny")).read_text())["federation"])
    section.pop("strategy", None)
    section.pop("hooks", None)
    try:
        if option.startswith("privacy."):
            from lightning_fed.privacy.config import PrivacyConfig

            PrivacyConfig(**{option.split(".", 1)[1]: float(value) if isinstance(value, int) else value})
        else:
            FederationConfig(**{**section, option: value})
    except (ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize(("name", "value"), [("LIGHTNING_FED_DEBUG", "maybe"), ("LIGHTNING_FED_VERBOSE", "2")])
def test_a_debug_or_verbose_variable_that_is_no_boolean_is_refused_before_torch(tmp_path, name, value):
    """Red team 12 row 16 (env_debug_maybe): ``LIGHTNING_FED_DEBUG=maybe`` was silently read as false while
    ``--debug=maybe`` is refused naming the flag (resume-signals.md); now the variable is named too
    (top_level.environment_problem). Seen failing on 7cc16c0 (the run's own line, federation.rounds)."""
    from tests.helpers.cli import no_torch_env, run_process

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**no_torch_env(tmp_path / "hook"), name: value}
    proc = run_process(
        [sys.executable, "-m", "lightning_fed", "fit", "--config", "tiny", "--federation.rounds=-1"], cwd=cwd, env=env
    )
    line = f"{name} takes true or false (1/0, yes/no, on/off), got {value!r}"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n{TOP_TIP}\n")
    assert list(cwd.iterdir()) == []
