"""A privacy budget or noise line names, for each value it holds, where that value came from (red team 15 M8).

On f6ad729 ``fit --config feddpo_dp --config dp_tiny.yaml --config eps02.yaml`` said ``error: config
'.../feddpo_dp.yaml': federation.strategy.adaptive.count_stddev=2 is too small for the client-level noise
multiplier 13.75 ...``: eps02.yaml, whose ``target_epsilon: 0.2`` fixed the multiplier, was not named; with the
budget on the command line the budget line named no file, though its rounds and sample rate came from
dp_tiny.yaml. Now every ``option=value`` in the line is followed by ``(config '<file>')``, ``(the command line)``
or ``(default)`` (:func:`lightning_fed.config_precheck.with_sources`), the last setter winning as jsonargparse
merges.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import ROOT, lightning_fed
from tests.helpers.refusals import assert_refused_before_torch

FEDDPO_DP = str(ROOT / "lightning_fed" / "configs" / "feddpo_dp.yaml")
TINY = str(ROOT / "lightning_fed" / "configs" / "tiny.yaml")
DP_TINY = """model:
  init_args:
    backbone:
      name_or_path: null
      config: {model_type: gpt2, n_layer: 2, n_embd: 32, n_head: 2, n_positions: 256}
      tokenizer: bytes
    lora: {r: 4, alpha: 8, dropout: 0.0}
data:
  init_args:
    num_clients: 8
    synthetic_args: {examples_per_client: 8, groups: [negative, casual]}
    max_length: 128
federation:
  rounds: 2
  local_steps: 2
  sampling_rate: 0.5
"""
"""Red team 15's case file (M8), without its run folder."""
HINT = (
    "raise federation.privacy.target_epsilon or federation.privacy.delta, lower federation.rounds, or sample fewer"
    " clients (federation.sampling: poisson, with a smaller federation.sampling_rate)"
)


def _refused(tmp_path, *args):
    """``lightning-fed fit ARGS --print_config`` from ``tmp_path``: exit 2, nothing printed or written."""
    before = sorted(tmp_path.iterdir())
    proc = lightning_fed("fit", *args, "--print_config", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, sorted(tmp_path.iterdir())) == (2, "", before), proc.stderr[-2000:]
    return proc.stderr


def test_the_count_stddev_line_names_the_file_of_the_budget_that_fixed_the_noise(tmp_path):
    """M8 as reported: count_stddev from feddpo_dp.yaml, the budget from eps02.yaml, rounds and rate from
    dp_tiny.yaml, delta the default."""
    (tmp_path / "dp_tiny.yaml").write_text(DP_TINY)
    (tmp_path / "eps02.yaml").write_text("federation:\n  privacy: {target_epsilon: 0.2}\n")
    tiny, eps = str(tmp_path / "dp_tiny.yaml"), str(tmp_path / "eps02.yaml")
    stderr = _refused(tmp_path, "--config", "feddpo_dp", "--config", tiny, "--config", eps)
    assert stderr == (
        f"error: federation.strategy.adaptive.count_stddev=2 (config {FEDDPO_DP!r}) is too small for the client-level"
        f" noise multiplier 13.75 calibrated for federation.privacy.target_epsilon=0.2 (config {eps!r}) with"
        f" federation.privacy.delta=1e-05 (default) over federation.rounds=2 (config {tiny!r}) at"
        f" federation.sampling_rate=0.5 (config {tiny!r}) (adaptive clipping needs 2 * count_stddev >"
        " noise_multiplier): raise count_stddev above 6.875, or lower the noise multiplier (a larger"
        " federation.privacy.target_epsilon)\n"
    )


@pytest.mark.parametrize("case", ["budget_on_the_command_line", "a_later_file_wins", "fixed_size_default"])
def test_an_unreachable_budget_names_where_each_of_its_values_came_from(tmp_path, case):
    """The budget on the command line (M8's P54); a budget in a.yaml overridden by b.yaml, with delta from
    a.yaml and the rounds on the command line; fixed-size sampling by default (rate 1 of the default)."""
    (tmp_path / "dp_tiny.yaml").write_text(DP_TINY)
    (tmp_path / "a.yaml").write_text("federation:\n  privacy: {target_epsilon: 0.5, delta: 1.0e-6}\n")
    (tmp_path / "b.yaml").write_text("federation:\n  privacy: {target_epsilon: 0.01}\n")
    tiny, a, b = (str(tmp_path / name) for name in ("dp_tiny.yaml", "a.yaml", "b.yaml"))
    if case == "budget_on_the_command_line":
        args = ["--config", "feddpo_dp", "--config", tiny, "--federation.privacy.target_epsilon=0.01"]
        given = (
            "federation.privacy.target_epsilon=0.01 (the command line) with federation.privacy.delta=1e-05 (default)"
        )
        over, smallest = (
            f"federation.rounds=2 (config {tiny!r}) at federation.sampling_rate=0.5 (config {tiny!r})",
            0.1044,
        )
    elif case == "a_later_file_wins":
        args = ["--config", "feddpo_dp", "--config", tiny, "--config", a, "--config", b, "--federation.rounds=3"]
        given = (
            f"federation.privacy.target_epsilon=0.01 (config {b!r}) with federation.privacy.delta=1e-06 (config {a!r})"
        )
        over = f"federation.rounds=3 (the command line) at federation.sampling_rate=0.5 (config {tiny!r})"
        smallest = 0.1424
    else:  # tiny: fixed-size sampling by FederationConfig's default, 3 rounds in tiny.yaml
        args = ["--config", "tiny", "--config", b, "--federation.strategy=lightning_fed.privacy.ClientLevelDP"]
        given = f"federation.privacy.target_epsilon=0.01 (config {b!r}) with federation.privacy.delta=1e-05 (default)"
        over, smallest = (
            f"federation.rounds=3 (config {TINY!r}) at sample rate 1 of federation.sampling=fixed_size (default)",
            0.1123,
        )
    assert _refused(tmp_path, *args) == (
        f"error: {given} cannot be reached over {over} by any noise multiplier (it would need one above the cap of"
        f" 100; the smallest epsilon reachable under it is {smallest}); {HINT}\n"
    )


def test_a_dp_sgd_budget_below_the_floor_names_the_file_of_its_delta(tmp_path):
    """``model.dp_sgd.target_epsilon`` in one file, ``federation.privacy.delta`` in another: both named."""
    (tmp_path / "eps.yaml").write_text("model:\n  init_args:\n    dp_sgd: {target_epsilon: 0.0001}\n")
    (tmp_path / "delta.yaml").write_text("federation:\n  privacy: {delta: 1.0e-6}\n")
    eps, delta = str(tmp_path / "eps.yaml"), str(tmp_path / "delta.yaml")
    assert _refused(tmp_path, "--config", "fedit_dpsgd", "--config", eps, "--config", delta) == (
        f"error: model.dp_sgd.target_epsilon=0.0001 (config {eps!r}) with federation.privacy.delta=1e-06 (config"
        f" {delta!r}) cannot be reached by any noise multiplier: Opacus' RDP accountant gives no mechanism an epsilon"
        " below 0.14 at this delta; raise model.dp_sgd.target_epsilon above 0.14 or federation.privacy.delta\n"
    )


@pytest.mark.parametrize("sampling_from", ["command_line", "default"])
def test_a_sampling_rate_for_fixed_size_sampling_names_both_values_sources(tmp_path, sampling_from):
    """feddpo_dp's ``sampling_rate: 0.25`` with ``--federation.sampling=fixed_size``; a file's
    ``sampling_rate`` over tiny, whose sampling is the default ``fixed_size``: refused before torch."""
    (tmp_path / "rate.yaml").write_text("federation:\n  sampling_rate: 0.5\n")
    rate = str(tmp_path / "rate.yaml")
    if sampling_from == "command_line":
        args, value = ["--config", "feddpo_dp", "--federation.sampling=fixed_size"], f"0.25 (config {FEDDPO_DP!r})"
        sampling = "the command line"
    else:
        args, value, sampling = ["--config", "tiny", "--config", rate], f"0.5 (config {rate!r})", "default"
    line = (
        f"federation.sampling_rate={value} is for Poisson sampling, but federation.sampling=fixed_size ({sampling});"
        " leave sampling_rate out, or set federation.sampling: poisson"
    )
    assert_refused_before_torch(tmp_path, ["fit", *args], line)
