"""The end-to-end one-run audit of ``benchmarks/run_audit.py`` (issue 40, item 5): canaries through the
run's own server round (its secret sample, clip, noise, FedAdam step) and DP-SGD module, scored on the
released states; each deliberately broken package (a monkeypatch of the package's own function) is
flagged, the package as shipped is not, and ``benchmarks/mechanism_audit.py`` misses the breakages
that live outside the functions it calls.

The tests run ``m = 2^12`` canaries (the benchmark: ``2^15``); largest showable bound 5.72 with the
guesses (1/4, 0), above feddpo_dp's reported 4.00. Measured (m = 2^12; ``benchmarks/RESULTS.md``):
the shipped feddpo_dp 0.54-0.67 (seeds 0-2) against 4.00, its every-round view 0.13, DP-SGD
0.36-0.45 against 1.99; the broken variants (seed 0): noise / 10 5.72 (every guess right), clipping
off 4.23-5.04 (four runs), an 8-bit key 5.72 (the search finds it in round 1's release and the
replay denoises; a constant and a 4-bit key are flagged too), DP-SGD's noise / 10 inside the module 5.31 against the
module's 1.99, the sample from the config's seed 3.64 against 1.50.
The seed fixes the coins; the run's noise is secret (fresh each run), so a figure varies between
runs of the same seed. Asserted margins: 0 for clipping off (slow), 0.5 for the public sample, 1.0
else. By Theorem 3 a correct mechanism is flagged with probability at most 5% per audit; the
measured margins of the correct runs are far larger (0.13-0.67 against 1.99-4.00).
"""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import mechanism_audit  # noqa: E402
import run_audit  # noqa: E402
from run_audit import CONTROLS, SHIPPED, audit, broken  # noqa: E402

M = 2**12


def _row(setting, variant, seed=0, **changes):
    return audit(replace(setting, canaries=M, **changes), variant, seed)


@pytest.mark.parametrize(
    ("control", "changes", "margin"),
    [
        ("noise/10", {}, 1.0),
        # flagged in each of 4 runs, 4.23-5.04 against 4.00: FedAdam's normalised steps blur the final
        # model's score; too close to the reported epsilon to run in CI without flaking (follow-up)
        pytest.param("clipping_off", {}, 0.0, marks=pytest.mark.slow),
        pytest.param("weak_key", {"key_bits": 0}, 1.0, marks=pytest.mark.slow),  # a constant key: as 4 bits
        ("weak_key", {"key_bits": 4}, 1.0),  # 16 keys per federation: the attacker tries them all
        ("dp_sgd noise/10", {}, 1.0),
        # 400 rounds: about a minute; in the fast suite tests/privacy/test_attacker.py recomputes the
        # sample of a public-sample run from its config (the attacker with only the config and run folder)
        pytest.param("public_sample", {}, 0.5, marks=pytest.mark.slow),
    ],
    ids=["noise/10", "clipping-off", "constant-key", "4-bit-key", "dp-sgd-noise/10", "public-sample"],
)
def test_each_broken_package_is_flagged_end_to_end(control, changes, margin):
    setting, variant = CONTROLS[control]
    row = _row(setting, variant, **changes)
    assert row["flagged"] and row["empirical_epsilon"] > row["reported_epsilon"] + margin, row


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_shipped_feddpo_dp_is_not_flagged(seed):
    """The final model of feddpo_dp (Poisson 0.25, 10 rounds, adaptive clip, FedAdam), three seeds."""
    row = _row(SHIPPED["feddpo_dp"], "correct", seed)
    assert row["largest_showable"] > row["reported_epsilon"] + 1.5, row  # the audit could fail
    assert not row["flagged"], row


@pytest.mark.parametrize(
    "setting",
    [
        pytest.param(SHIPPED["feddpo_dp every round"], marks=pytest.mark.slow),
        pytest.param(CONTROLS["public_sample"][0], marks=pytest.mark.slow),
        CONTROLS["dp_sgd noise/10"][0],
    ],
    ids=["feddpo_dp-every-round", "public-sample-setting", "dp-sgd-setting"],
)
def test_the_package_is_not_flagged_where_its_broken_variants_are(setting):
    """(secagg reports 8.00, above what 2^12 canaries can show (7.07): the benchmark audits it with 2^15.)"""
    row = _row(setting, "correct")
    assert row["largest_showable"] > row["reported_epsilon"], row
    assert not row["flagged"], row


def test_the_real_key_is_not_in_a_shrunk_key_space():
    """The attacker's brute force of the 4-bit control, run against the package's real key: nothing
    found (the key is 32 bytes from the OS; p40a's generator draws from all of them)."""
    setting = replace(SHIPPED["feddpo_dp"], canaries=64)
    included = run_audit.coins(64, 0)
    with run_audit.memoized_accounting():
        fed = run_audit.Federation(setting)
        stage = run_audit.Stage()
        stage.states.append(fed.w0["w"].clone())
        fed.round(0, included, stage)
        assert run_audit.recover_key(fed, stage.states[1], bits=4) is None
        with broken("weak_key", key_bits=4):
            weak = run_audit.Federation(setting)
            stage = run_audit.Stage()
            weak.round(0, included, stage)
            assert run_audit.recover_key(weak, stage.states[0], bits=4) == weak.server.privacy.secret


@pytest.mark.parametrize("variant", ["clipping_off", "public_sample", "weak_key", "dp_sgd noise/10"])
def test_the_white_box_audit_misses_what_the_end_to_end_audit_flags(variant):
    """``mechanism_audit.py`` under the same broken package: not flagged (it calls the mechanism with
    its own sampler seed, noise multiplier and clip-free canaries of norm ``C``)."""
    name = "dp_sgd noise/10" if variant == "dp_sgd noise/10" else "noise/10"
    setting = replace(mechanism_audit.CONTROLS[name], canaries=M)
    with broken(variant, key_bits=0):
        row = mechanism_audit.audit(setting, "correct", seed=0)
    assert not row["flagged"], row
