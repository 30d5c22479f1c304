"""Every numeric option of ``federation:`` and ``federation.privacy:`` is refused before torch (issue 41).

On 894fdde ``--federation.privacy.target_epsilon=-1`` and ``--federation.min_clients=-1`` were refused
by the live classes after torch, Lightning and transformers were imported (11-13 s of CPU each,
``/usr/bin/time`` from the console script), and ``--federation.seed=-1`` was accepted and failed
after sanity checking with ``error: expected non-negative integer`` (numpy's words, no option). Here
the fields are read from the dataclasses' source (:func:`lightning_fed.class_parameters.fields`, as
the precheck reads classes), so a numeric field added later without a rule fails
:func:`test_every_numeric_field_of_the_federation_config_classes_has_a_rule`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lightning_fed.class_parameters import fields
from lightning_fed.federation_rules import FEDERATION_MORE, PRIVACY, PRIVACY_ACCOUNTANTS
from lightning_fed.option_rules import FEDERATION_ALL
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

CONFIG_CLASSES = {
    "federation": ("lightning_fed.run_config", "FederationConfig", FEDERATION_ALL + FEDERATION_MORE),
    "federation.privacy": ("lightning_fed.privacy.config", "PrivacyConfig", PRIVACY),
}
"""The ``federation:`` section's dataclasses (by the option prefix) and the rules the precheck applies."""
NUMBERS = {"int", "float"}


def _kinds(annotation: ast.expr | None) -> set[str]:
    text = ast.unparse(annotation).replace(" ", "") if annotation is not None else ""
    return set(text.split("|")) - {"None"}


@pytest.mark.parametrize("prefix", list(CONFIG_CLASSES))
def test_every_numeric_field_of_the_federation_config_classes_has_a_rule(prefix):
    module, name, rules = CONFIG_CLASSES[prefix]
    found = fields(module, name)
    assert found, f"{name}'s fields could not be read from {module}"
    numeric = {f"{prefix}.{field}" for field, (annotation, _) in found.items() if _kinds(annotation) <= NUMBERS}
    numeric = {option for option in numeric if _kinds(found[option.rsplit(".", 1)[1]][0])}
    ruled = {rule.option for rule in rules}
    assert numeric, name
    assert numeric <= ruled, f"{name}: numeric fields without a rule: {sorted(numeric - ruled)}"
    assert {r.option.rsplit(".", 1)[1] for r in rules} <= set(found), "a rule for a field the class lacks"


def test_the_torch_free_accountants_are_opacus_mechanisms():
    from lightning_fed.privacy.accountant import MECHANISMS

    assert PRIVACY_ACCOUNTANTS == MECHANISMS


def _run(tmp_path: Path, *args: str):
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    return lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook"), cwd


REFUSED = {
    "privacy_target_epsilon": (
        ["--federation.privacy.target_epsilon=-1"],
        "federation.privacy.target_epsilon must be > 0 or null, got -1.0",
    ),
    "min_clients_negative": (["--federation.min_clients=-1"], "federation.min_clients must be >= 1, got -1"),
    "min_clients_above_the_round": (
        ["--federation.min_clients=3"],
        "federation.min_clients must be in [1, clients_per_round=2], got 3",
    ),
    "privacy_noise": (
        ["--federation.privacy.noise_multiplier=0"],
        "federation.privacy.noise_multiplier must be > 0 or null, got 0.0",
    ),
    "privacy_delta": (["--federation.privacy.delta=1"], "federation.privacy.delta must be in (0, 1) or null, got 1.0"),
    "privacy_accountant": (
        ["--federation.privacy.accountant=gdp"],
        "federation.privacy.accountant must be one of ('rdp', 'prv'), got 'gdp'",
    ),
    "privacy_report_validation": (
        ["--federation.privacy.report_validation=[1]"],
        "federation.privacy.report_validation must be true or false, got [1]",
    ),
    "seed": (["--federation.seed=-1"], "federation.seed must be in [0, 9223372036854775807] or null, got -1"),
    "state_memory": (
        ["--federation.max_state_memory_bytes=-5"],
        "federation.max_state_memory_bytes must be >= 0 or null, got -5",
    ),
    "sampling_rate_range": (
        ["--federation.sampling=poisson", "--federation.sampling_rate=2"],
        "federation.sampling_rate must be in (0, 1] or null, got 2.0",
    ),
    "sampling_rate_without_poisson": (
        ["--federation.sampling_rate=0.5"],
        "federation.sampling_rate=0.5 (the command line) is for Poisson sampling, but federation.sampling=fixed_size"
        " (default); leave sampling_rate out, or set federation.sampling: poisson",
    ),
    "poisson_without_rate": (
        ["--federation.sampling=poisson"],
        "federation.sampling_rate must be in (0, 1] with federation.sampling=poisson, got None",
    ),
    "steps_and_epochs": (
        ["--federation.local_epochs=1"],
        "set exactly one of federation.local_steps and federation.local_epochs, got 5 and 1",
    ),
}


@pytest.mark.parametrize(("overrides", "line"), list(REFUSED.values()), ids=list(REFUSED))
def test_a_federation_value_is_refused_before_torch_with_the_class_s_line(tmp_path, overrides, line):
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", *overrides)
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


def test_a_privacy_value_in_a_config_file_is_refused_before_torch(tmp_path):
    config = tmp_path / "dp.yaml"
    config.write_text("federation:\n  privacy: {target_epsilon: 4.0, delta: 0}\n")
    proc, cwd = _run(tmp_path, "fit", "--config", "feddpo_dp", "--config", str(config))
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: config {str(config)!r}: federation.privacy.delta must be in (0, 1) or null, got 0.0\n",
    )
    assert list(cwd.iterdir()) == []


SAMPLING_RATE = (
    "federation.sampling_rate=0.25 (config {shipped!r}) is for Poisson sampling, but federation.sampling=fixed_size"
    " ({where}); leave sampling_rate out, or set federation.sampling: poisson"
)


@pytest.mark.parametrize("printed", [[], ["--print_config"]], ids=["fit", "print_config"])
@pytest.mark.parametrize("sampling_from", ["another_file", "command_line"])
def test_a_sampling_rate_without_poisson_names_the_file_of_each_option(tmp_path, sampling_from, printed):
    """Issue 41 (last session's notes): x.yaml holding ``federation: {sampling: fixed_size, clients_per_round:
    10}`` after feddpo_dp: on 08c1cba ``config 'x.yaml': federation.sampling_rate=0.25 is for
    federation.sampling=poisson, not fixed_size``, though 0.25 is feddpo_dp.yaml's. Now the file that set
    ``sampling_rate``, and ``sampling``'s own beside it (red team 15 M8: or the command line)."""
    shipped = Path(__file__).resolve().parents[1] / "lightning_fed" / "configs" / "feddpo_dp.yaml"
    fixed = tmp_path / "x.yaml"
    fixed.write_text("federation: {sampling: fixed_size, clients_per_round: 10}\n")
    if sampling_from == "another_file":
        args, where = ["--config", str(fixed)], f"config {str(fixed)!r}"
    else:
        args, where = ["--federation.sampling=fixed_size", "--federation.clients_per_round=10"], "the command line"
    proc, cwd = _run(tmp_path, "fit", "--config", "feddpo_dp", *args, *printed)
    line = SAMPLING_RATE.format(shipped=str(shipped), where=where)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("config", "overrides"),
    [  # a client-level budget needs ClientLevelDP (feddpo_dp's): without it refused before torch since dd0f7df
        (
            "feddpo_dp",
            [
                "--federation.privacy.target_epsilon=4",
                "--federation.sampling=poisson",
                "--federation.sampling_rate=0.5",
            ],
        ),
        ("tiny", ["--federation.min_clients=2", "--federation.seed=7", "--federation.max_state_memory_bytes=0"]),
    ],
)
def test_accepted_federation_values_go_on_to_the_live_parser(tmp_path, config, overrides):
    """Values every rule takes are not refused here (the child stops at ``import torch``)."""
    proc, _ = _run(tmp_path, "fit", "--config", config, *overrides)
    assert REACHED_TORCH in proc.stderr, proc.stderr
