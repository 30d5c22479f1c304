"""A privacy number written as a YAML string is read as the number by every privacy check, in ``fit``,
``plan`` and ``fit --print_config`` alike (docs/trust_boundary.md; red team 16 B04).

On f9999e0 ``lightning-fed plan --config feddpo_dp --config dp_tiny.yaml --config q_eps.yaml`` with
``federation: {privacy: {target_epsilon: "0.01"}}`` printed the plan, exit 0, and ``fit ... --print_config``
printed the config, exit 0; unquoted, both refused the budget no noise multiplier reaches, and ``fit``
refused the quoted one only once the run was bound, in the run's own line (``... cannot be reached over 2
rounds at sample rate 0.5 ...``, no value's source). ``model.dp_sgd.target_epsilon: "0.0001"`` was refused
as ``must be a number > 0, got '0.0001'`` (so was any quoted DP-SGD number, ``"8.0"`` too, which the parser
reads as 8.0). The precheck's budget checks (:mod:`lightning_fed.noise_calibration`), ClientLevelDP's rules
(:mod:`lightning_fed.wrapper_rules`) and ``model.dp_sgd``'s (:mod:`lightning_fed.dp_sgd_rules`) compared
only ``int``/``float`` values; each now reads the options through
:func:`lightning_fed.yaml_reading.numbers_read`.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_fed.config_precheck import precheck_arguments
from lightning_fed.errors import UserError
from lightning_fed.federation.early_check import precheck_noise
from lightning_fed.plan_cli import build_parser
from lightning_fed.plan_cli import precheck as plan_precheck
from tests.helpers.cli import lightning_fed
from tests.privacy.test_budget_sources_cli import DP_TINY, HINT

TINY_MODEL = {
    "name_or_path": None,
    "config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256},
    "tokenizer": "bytes",
}


def _budget_line(eps_file: str, tiny: str) -> str:
    return (
        f"error: federation.privacy.target_epsilon=0.01 (config {eps_file!r}) with federation.privacy.delta=1e-05"
        f" (default) cannot be reached over federation.rounds=2 (config {tiny!r}) at federation.sampling_rate=0.5"
        f" (config {tiny!r}) by any noise multiplier (it would need one above the cap of 100; the smallest epsilon"
        f" reachable under it is 0.1044); {HINT}\n"
    )


@pytest.mark.parametrize("command", ["plan", "print_config", "fit"])
def test_a_quoted_budget_no_noise_reaches_is_refused_as_the_number(tmp_path, command):
    """B04 as reported: the quoted budget's line is the unquoted one's in each subcommand, exit 2, nothing
    printed or written."""
    (tmp_path / "dp_tiny.yaml").write_text(DP_TINY)
    (tmp_path / "q_eps.yaml").write_text('federation: {privacy: {target_epsilon: "0.01"}}\n')
    tiny, eps = str(tmp_path / "dp_tiny.yaml"), str(tmp_path / "q_eps.yaml")
    args = ["--config", "feddpo_dp", "--config", tiny, "--config", eps]
    before = sorted(tmp_path.iterdir())
    if command == "plan":
        proc = lightning_fed("plan", *args, cwd=tmp_path)
    else:
        proc = lightning_fed("fit", *args, *(["--print_config"] if command == "print_config" else []), cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", _budget_line(eps, tiny))
    assert sorted(tmp_path.iterdir()) == before


def test_a_quoted_dp_sgd_budget_below_the_floor_is_refused_as_the_number(tmp_path):
    """``model.dp_sgd.target_epsilon: "0.0001"`` skipped the floor check as the client-level budget did."""
    (tmp_path / "eps.yaml").write_text('model:\n  init_args:\n    dp_sgd: {target_epsilon: "0.0001"}\n')
    eps = str(tmp_path / "eps.yaml")
    proc = lightning_fed("fit", "--config", "fedit_dpsgd", "--config", eps, "--print_config", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        f"error: model.dp_sgd.target_epsilon=0.0001 (config {eps!r}) with federation.privacy.delta=1e-05 (default)"
        " cannot be reached by any noise multiplier: Opacus' RDP accountant gives no mechanism an epsilon below 0.1029"
        " at this delta; raise model.dp_sgd.target_epsilon above 0.1029 or federation.privacy.delta\n",
    )


CLIENT_LEVEL = {  # over feddpo_dp with a tiny model: ClientLevelDP with adaptive clipping, Poisson sampling
    "federation.privacy.target_epsilon": [0.01, 0.2, 4.0, 8, 0, -1],
    "federation.privacy.delta": [1e-05, 1e-06, 0.5, 0, 1.5],
    "federation.privacy.noise_multiplier": [0.5, 3.0, 0, -1],
    "federation.sampling_rate": [0.5, 0.25, 1.0, 0, 1.5],
    "federation.rounds": [1, 2, 10],
    "federation.strategy.init_args.clip_norm": [0.05, 1.0, 0, -1],
    "federation.strategy.init_args.noise_multiplier": [1.0, 0, -1],
    "federation.strategy.init_args.adaptive.count_stddev": [2.0, 0.1, 10, 0, -1],
    "federation.strategy.init_args.adaptive.target_quantile": [0.5, 0, 1.5],
    "federation.strategy.init_args.adaptive.learning_rate": [0.2, 0, -1],
}
DP_SGD = {  # over fedit_dpsgd with a tiny model: example-level DP-SGD
    "model.init_args.dp_sgd.target_epsilon": [0.0001, 0.01, 8.0, 0, -1],
    "model.init_args.dp_sgd.noise_multiplier": [1.0, 0, -1],
    "model.init_args.dp_sgd.clip_norm": [1.0, 0, -1],
    "federation.privacy.delta": [1e-05, 1e-06, 0.5, 0],
}
BASES = {"feddpo_dp": CLIENT_LEVEL, "fedit_dpsgd": DP_SGD}


def _written(number: float) -> str:
    """``number`` as YAML writes it (``1.0e-05``): the text a user quotes."""
    return yaml.safe_dump(number).split("\n", 1)[0]


def _override(values: dict[str, object]) -> dict:
    config: dict = {"model": {"init_args": {"backbone": TINY_MODEL}}}
    for where, value in values.items():
        *path, last = where.split(".")
        node = config
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return config


def _verdict(folder, base: str, values: dict[str, object], command: str) -> str | None:
    """The refusal's line of ``fit --print_config`` (or ``plan``) over ``base`` with ``values`` set, quotes
    around a number dropped (``got '0'`` is ``got 0``); ``None``: passed every check before the live parser."""
    file = folder / "values.yaml"
    file.write_text(yaml.safe_dump(_override(values)), encoding="utf-8")
    args = ["--config", base, "--config", str(file)]
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            if command == "plan":
                plan_precheck(build_parser().parse_args(args))
            else:
                fit = ["fit", *args, f"--trainer.default_root_dir={folder}", "--print_config"]
                precheck_arguments(fit)
                precheck_noise(fit)
        except UserError as refusal:
            line = str(refusal)
        except SystemExit:
            line = err.getvalue()
        else:
            return None
    return re.sub(r"'([-+]?[0-9][-+0-9.eE_]*)'", r"\1", line)


@st.composite
def _settings(draw, options: dict[str, list]) -> tuple[dict[str, object], set[str]]:
    chosen = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=4, unique=True))
    values = {where: draw(st.sampled_from(options[where])) for where in chosen}
    quoted = set(draw(st.lists(st.sampled_from(chosen), min_size=1, unique=True)))
    return values, quoted


@pytest.mark.parametrize("command", ["print_config", "plan"])
@pytest.mark.parametrize("base", sorted(BASES))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_quoting_privacy_options_changes_no_verdict(tmp_path, base, command, data):
    values, quoted = data.draw(_settings(BASES[base]))
    unquoted = _verdict(tmp_path, base, values, command)
    strings = {k: _written(v) if k in quoted else v for k, v in values.items()}
    assert _verdict(tmp_path, base, strings, command) == unquoted, (values, quoted)
