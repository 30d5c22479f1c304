"""DP-SGD's budget per client (ExampleBudget, RunPrivacy's ledger), the default delta, and the
boundary of the privacy settings (Hypothesis: invalid values are one-line errors, never a traceback)."""

import math
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opacus.accountants.utils import get_noise_multiplier

from lightning_fed.federation.server_round import ServerRound
from lightning_fed.privacy import DPSGDSettings, PrivacyAccountant, PrivacyConfig, calibrate_noise_multiplier
from lightning_fed.privacy.config import default_delta
from lightning_fed.privacy.example_budget import ExampleBudget
from lightning_fed.privacy.run import RunPrivacy
from lightning_fed.run_config import FederationConfig
from lightning_fed.strategies import FedAvg
from lightning_fed.strategies.base import ClientUpdate

NO_LOGGER = SimpleNamespace(is_global_zero=True, loggers=[], log_dir=None, default_root_dir=None)


def test_rate_and_steps_are_bounds_from_the_bucketed_count():
    """B = 4: 18 examples -> bucket 16 -> rate 4/16; 3 examples -> bucket 2 -> rate 1 (capped).
    One local epoch: at most ceil((2 * 16 - 1) / 4) = 8 steps (a client of 16..31 examples)."""
    budget = ExampleBudget(
        None, 1.0, 1e-5, batch_size=4, rounds=3, federation=FederationConfig(local_steps=None, local_epochs=1)
    )
    assert budget.sample_rate(18) == 0.25 and budget.sample_rate(16) == 0.25 and budget.sample_rate(3) == 1.0
    assert budget.steps_per_round(18) == 8 == budget.steps_per_round(31)
    assert ExampleBudget(None, 1.0, 1e-5, 4, 3, federation=FederationConfig(local_steps=5)).steps_per_round(1000) == 5


def test_calibrated_z_is_opacus_own_and_the_budget_holds_after_the_planned_rounds():
    budget = ExampleBudget(8.0, None, 1e-5, batch_size=8, rounds=10, federation=FederationConfig(local_steps=10))
    z = get_noise_multiplier(target_epsilon=8.0, target_delta=1e-5, sample_rate=0.25, steps=100, accountant="rdp")
    assert budget.noise_multiplier_for(57) == pytest.approx(z) == pytest.approx(1.8225, abs=1e-4)
    assert budget.noise_multiplier_for(40) == budget.noise_multiplier_for(57)  # one bucket, one z
    for k in (1, 4, 10):  # epsilon after k rounds: k * 10 steps of the sampled Gaussian
        assert budget.epsilon(57, k) == pytest.approx(PrivacyAccountant(z, 0.25, 1e-5).epsilon(10 * k))
    assert 7.9 < budget.epsilon(57, 10) <= 8.0
    assert not budget.would_exceed(57, 9) and budget.would_exceed(57, 10)  # an 11th round would exceed
    budget.replan(10)  # a resume keeps the plan's rounds: the same z, no new calibration
    assert budget.rounds == 10 and budget.noise_multiplier_for(57) == pytest.approx(z)


def test_an_unreachable_dp_sgd_budget_names_the_options_its_steps_and_rate_come_from():
    """Red team 15 M8: with ``local_epochs`` the steps are ``E ceil((2 b - 1) / B)`` (16 for 16+ examples at
    batch 4, two epochs): the line names ``federation.rounds``, ``federation.local_epochs`` and
    ``data.batch_size`` with their values, for ``fit`` and ``plan`` to follow each with its config file."""
    budget = ExampleBudget(
        0.104, None, 1e-5, batch_size=4, rounds=3, federation=FederationConfig(local_steps=None, local_epochs=2)
    )
    with pytest.raises(ValueError) as info:
        budget.noise_multiplier_for(18)
    assert str(info.value).startswith(
        "model.dp_sgd.target_epsilon=0.104 with federation.privacy.delta=1e-05 cannot be reached over 48 local steps"
        " (federation.rounds=3 x 16 steps of federation.local_epochs=2) at sample rate 0.25 (data.batch_size=4 of a"
        " client of 16+ examples) by any noise multiplier"
    )


def test_a_dp_sgd_budget_at_or_below_the_rdp_floor_is_the_precheck_s_one_line():
    """0.01 at delta 1e-5 is below the RDP floor (0.1029): refused at once, in the precheck's line
    (noise_calibration.below_floor_line), a UserError; on 628d0d2 after Opacus' bisection reached its cap."""
    from lightning_fed.errors import UserError

    with pytest.raises(UserError) as info:
        ExampleBudget(
            0.01, None, 1e-5, batch_size=4, rounds=3, federation=FederationConfig(local_steps=5)
        ).noise_multiplier_for(18)
    assert str(info.value) == (
        "model.dp_sgd.target_epsilon=0.01 with federation.privacy.delta=1e-05 cannot be reached by any noise"
        " multiplier: Opacus' RDP accountant gives no mechanism an epsilon below 0.1029 at this delta; raise"
        " model.dp_sgd.target_epsilon above 0.1029 or federation.privacy.delta"
    )


def test_the_default_delta_makes_an_impossible_budget_an_error():
    """At delta = 4^-1.1 = 0.22 (the old default for 4 clients) Opacus' RDP epsilon is <= 0 for any
    z >= 5, so epsilon 1e-9 is 'met' with z = 4.84; at the default min(4^-1.1, 1e-5) it is not."""
    assert default_delta(4) == 1e-5 and default_delta(10**6) == pytest.approx(10**-6.6)
    assert get_noise_multiplier(target_epsilon=1e-9, target_delta=4**-1.1, sample_rate=1.0, steps=3) < 5
    with pytest.raises(ValueError, match="cannot be reached over 3 rounds at sample rate 1 by any noise"):
        calibrate_noise_multiplier(1e-9, default_delta(4), 1.0, 3)
    assert PrivacyConfig(target_epsilon=1.0).delta_for(4) == 1e-5


def _dp_server(dp_sgd, rounds=4, clients_per_round=2, sizes=(18, 18, 18, 18), local_epochs=None):
    from lightning_fed.modules import BackboneConfig, LoraSettings
    from lightning_fed.privacy import DPDPOModule
    from tests.helpers.runs import TINY_GPT2

    module = DPDPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"), lora=LoraSettings(r=2, alpha=4), dp_sgd=dp_sgd
    )
    steps = {"local_steps": None, "local_epochs": local_epochs} if local_epochs else {"local_steps": 2}
    fed = FederationConfig(rounds=rounds, clients_per_round=clients_per_round, **steps)
    server = ServerRound.from_config(fed, FedAvg(), [])
    server.privacy = RunPrivacy(None, fed)
    server.bind(len(sizes), SimpleNamespace(batch_size=4, client_sizes=list(sizes)), module)
    server.global_state = {}
    return server, module


def _round(server, r, clients, counts):
    class Module:
        def load_state(self, state):
            pass

    server.open(r, clients)
    server.privacy.end_round(r, [ClientUpdate(c, counts[c], {}, {}, {}) for c in clients])


def test_each_client_is_accounted_over_the_rounds_it_trained_in_the_binding_one_is_the_largest():
    """z = 1, B = 4, K = 2, delta 1e-5. Clients 0-2 hold 16 (rate 1/4), client 3 holds 4 (rate 1).
    Client 0 trains 3 times, client 3 once: 6 steps at rate 1/4 against 2 steps at rate 1."""
    server, module = _dp_server(DPSGDSettings(clip_norm=1.0, noise_multiplier=1.0), sizes=(16, 16, 16, 4))
    assert module.example_budget is server.privacy.example_budget
    counts = {0: 16, 1: 16, 2: 16, 3: 4}
    for r, clients in enumerate([[0, 1], [0, 2], [0, 3]]):
        _round(server, r, clients, counts)
    eps0 = PrivacyAccountant(1.0, 0.25, 1e-5).epsilon(6)
    eps3 = PrivacyAccountant(1.0, 1.0, 1e-5).epsilon(2)
    assert eps3 > eps0  # the smaller client binds although client 0 trained three times as often
    assert server.privacy.binding_client() == (3, pytest.approx(eps3))
    _round(server, 3, [0, 1], counts)  # client 0 again: 8 steps at rate 1/4
    eps0 = PrivacyAccountant(1.0, 0.25, 1e-5).epsilon(8)
    assert server.privacy.binding_client()[1] == pytest.approx(max(eps0, eps3))
    section = server.privacy.section(4)
    assert section["epsilon"] == {"example": pytest.approx(max(eps0, eps3))}
    assert section["example_level"]["accounting"].startswith("per client, over the rounds it trained in")
    state = server.privacy.state_dict()
    assert state["example_clients"] == {0: [16, 4], 1: [16, 2], 2: [16, 1], 3: [4, 1]}
    fresh, _ = _dp_server(DPSGDSettings(clip_norm=1.0, noise_multiplier=1.0), sizes=(16, 16, 16, 4))
    fresh.privacy.load_state_dict(state)
    assert fresh.privacy.binding_client() == server.privacy.binding_client()


def test_with_local_epochs_a_larger_client_can_bind():
    """One local epoch, B = 4, z = 1: a client of 4 examples takes ceil(7/4) = 2 steps at rate 1; one of
    64 takes ceil(127/4) = 32 steps at rate 1/16. Neither the smallest nor the most sampled decides alone."""
    server, _ = _dp_server(DPSGDSettings(clip_norm=1.0, noise_multiplier=1.0), sizes=(4, 64), local_epochs=1)
    _round(server, 0, [0, 1], {0: 4, 1: 64})
    small = PrivacyAccountant(1.0, 1.0, 1e-5).epsilon(2)
    large = PrivacyAccountant(1.0, 1 / 16, 1e-5).epsilon(32)
    binding = server.privacy.binding_client()
    assert binding == ((0, pytest.approx(small)) if small >= large else (1, pytest.approx(large)))


def test_an_impossible_dp_sgd_budget_is_refused_when_the_server_is_bound():
    with pytest.raises(ValueError, match=r"^model.dp_sgd.target_epsilon=0.01 with federation.privacy.delta=1e-05"):
        _dp_server(DPSGDSettings(clip_norm=1.0, target_epsilon=0.01))


# ------------------------------------------------------------------ the settings' boundary
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=1),
)


def _one_line_or_valid(make):
    try:
        make()
    except ValueError as err:
        assert "\n" not in str(err) and str(err)
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(target=ANYTHING, noise=ANYTHING, delta=ANYTHING, accountant=ANYTHING, report=ANYTHING)
def test_privacy_config_takes_valid_values_and_refuses_the_rest_in_one_line(target, noise, delta, accountant, report):
    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    ok = _one_line_or_valid(lambda: PrivacyConfig(target, noise, delta, accountant, report))
    expected = (
        (target is None or (number(target) and target > 0))
        and (noise is None or (number(noise) and noise > 0))
        and (delta is None or (number(delta) and 0 < delta < 1))
        and accountant in ("rdp", "prv")
        and isinstance(report, bool)
    )
    assert ok == expected


@settings(max_examples=300, deadline=None)
@given(clip=ANYTHING, noise=ANYTHING, target=ANYTHING, batch=ANYTHING, ffa=ANYTHING, seed=ANYTHING)
@example(clip=1, noise=False, target=None, batch=None, ffa=False, seed=None)  # found by a run: False == 0
def test_dp_sgd_settings_take_valid_values_and_refuse_the_rest_in_one_line(clip, noise, target, batch, ffa, seed):
    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    def integer(x):
        return isinstance(x, int) and not isinstance(x, bool)

    ok = _one_line_or_valid(lambda: DPSGDSettings(clip, noise, target, batch, ffa, seed))
    expected = (
        number(clip)
        and clip > 0
        and ((noise is None) != (target is None))
        and (noise is None or (number(noise) and noise >= 0))
        and (target is None or (number(target) and target > 0))
        and (batch is None or (integer(batch) and batch >= 1))
        and isinstance(ffa, bool)
        and (seed is None or integer(seed))
    )
    assert ok == expected
