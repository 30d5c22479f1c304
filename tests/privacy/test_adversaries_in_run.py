"""``summary.json``'s ``privacy.adversaries`` for the shipped private configs (tiny-model overrides of
``feddpo_dp``, ``fedit_dpsgd`` and ``secagg``, as in ``tests/deploy/test_transport_parity.py``): one
epsilon per party, recomputed here with Opacus' own accountant from the run's reported settings."""

from __future__ import annotations

import json

import pytest
import yaml
from opacus.accountants import RDPAccountant

from tests.deploy.test_transport_parity import tiny_variant
from tests.helpers.flower_sim import run_in_process

PARTIES = ["final_model", "run_folder", "server", "other_client"]


def _opacus(z, q, steps, delta):
    acc = RDPAccountant()
    acc.history = [(z, q, steps)]
    return acc.get_epsilon(delta=delta)


def _privacy(name, tmp_path):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(tiny_variant(name)))
    loop = run_in_process(str(path), tmp_path / "run", [])
    summary = json.loads(next((tmp_path / "run").rglob("summary.json")).read_text())
    return loop, summary["privacy"]


def test_feddpo_dp_central_dp_with_a_secret_poisson_sample(tmp_path):
    """Poisson at q = 0.25, z calibrated for epsilon 4 over the tiny run's 2 rounds: amplified for
    everyone but the central server, who sees each clipped update (no guarantee)."""
    loop, privacy = _privacy("feddpo_dp.yaml", tmp_path)
    parties = privacy["adversaries"]
    assert list(parties) == PARTIES
    level = privacy["client_level"]
    assert level["sample_rate"] == 0.25
    amplified = _opacus(level["noise_multiplier"], 0.25, 2, level["delta"])
    assert amplified <= 4.0
    for party in ("final_model", "run_folder", "other_client"):
        assert parties[party]["epsilon"] == {"client": pytest.approx(amplified)}, party
        assert parties[party]["delta"] == level["delta"]
    assert parties["server"]["epsilon"] == {"client": "inf"}
    assert parties["server"]["why"].startswith("trusted server (central DP)")


def test_fedit_dpsgd_example_level_against_everyone(tmp_path):
    """DP-SGD alone: the largest client's example-level epsilon against every party (the batches are
    the client's secret), no client-level guarantee."""
    loop, privacy = _privacy("fedit_dpsgd.yaml", tmp_path)
    example = privacy["epsilon"]["example"]
    assert 0 < example <= 8.0
    for party, entry in privacy["adversaries"].items():
        assert entry["epsilon"] == {"client": "inf", "example": example}, party
        assert entry["why"].startswith("no client-level DP"), party


def test_secagg_no_amplification_against_the_server(tmp_path):
    """SecAgg+ around ClientLevelDP (z calibrated for the shipped budget of 8 over the tiny run's 2
    rounds, fixed-size sample: rate 1): the server sees only the noised sum, so a guarantee holds
    against it too, Opacus' at rate 1 over the 2 rounds, within the budget."""
    loop, privacy = _privacy("secagg.yaml", tmp_path)
    parties = privacy["adversaries"]
    level = privacy["client_level"]
    assert level["sample_rate"] == 1.0 and level["target_epsilon"] == 8.0
    expected = _opacus(level["noise_multiplier"], 1.0, 2, level["delta"])
    assert 7.9 <= expected <= 8.0  # calibrated within Opacus' 0.01 tolerance
    for party in PARTIES:
        assert parties[party]["epsilon"] == {"client": pytest.approx(expected)}, party
    assert "picks the sample: accounted at rate 1" in parties["server"]["why"]
