"""RunPrivacy: the plan before training (one source of truth for m and z, impossible budgets),
the accounting per round, the stop, the checkpointed state; and the wrappers it composes with."""

from types import SimpleNamespace

import pytest
import torch

from lightning_fed.federation.hooks import RoundHook
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.privacy import ClientLevelDP, PrivacyAccountant, PrivacyConfig
from lightning_fed.privacy.channels import PROTECTIONS, ChannelReport
from lightning_fed.privacy.run import RunPrivacy
from lightning_fed.round_hooks.client_grouping import ClientGrouping
from lightning_fed.run_config import FederationConfig
from lightning_fed.strategies import FedAvg, FedBiscuit, FlexLoRA, FLoRA, HetLoRA

NO_LOGGER = SimpleNamespace(is_global_zero=True, loggers=[], log_dir=None, default_root_dir=None)


def _server(strategy, privacy=None, num_clients=10, **fed):
    fed.setdefault("rounds", 4)
    config = FederationConfig(**fed)
    server = ServerRound.from_config(config, strategy, [])
    server.privacy = RunPrivacy(privacy, config)
    server.bind(num_clients)
    return server


def test_m_comes_from_the_sampler_and_z_from_the_privacy_section():
    dp = ClientLevelDP(FedAvg(), clip_norm=0.1)
    server = _server(dp, PrivacyConfig(noise_multiplier=1.5), num_clients=40, sampling="poisson", sampling_rate=0.1)
    assert dp.expected_clients == pytest.approx(4.0) and dp.noise_multiplier == 1.5  # m = q N
    acc = server.privacy.client_dp
    assert (acc.noise_multiplier, acc.sample_rate, acc.delta) == (1.5, 0.1, 1e-5)  # min(40^-1.1 = 0.017, 1e-5)
    fixed = ClientLevelDP(FedAvg())
    _server(fixed, PrivacyConfig(noise_multiplier=1.0), clients_per_round=3)
    assert fixed.expected_clients == 3.0  # m = clients_per_round
    assert server.report.private


def test_a_budget_calibrates_z_for_the_planned_rounds():
    dp = ClientLevelDP(FedAvg())
    server = _server(
        dp,
        PrivacyConfig(target_epsilon=3.0, delta=1e-3),
        num_clients=100,
        sampling="poisson",
        sampling_rate=0.05,
        rounds=20,
    )
    expected = PrivacyConfig(target_epsilon=3.0, delta=1e-3).plan(100, 20, "poisson", sampling_rate=0.05)
    assert dp.noise_multiplier == pytest.approx(expected.noise_multiplier)
    assert server.privacy.client_dp.epsilon(20) <= 3.0


@pytest.mark.parametrize(
    ("strategy", "privacy", "message"),
    [
        (
            FedAvg(),
            PrivacyConfig(noise_multiplier=1.0),
            "federation.privacy sets a client-level budget: it needs"
            " federation.strategy = lightning_fed.privacy.ClientLevelDP (around the server strategy), got FedAvg",
        ),
        (
            ClientLevelDP(FedAvg(), expected_clients=5),
            PrivacyConfig(noise_multiplier=1.0),
            "federation.strategy.expected_clients=5 disagrees with the sampler's expected clients per round 2"
            " (federation.clients_per_round): leave expected_clients out",
        ),
        (
            ClientLevelDP(FedAvg(), noise_multiplier=2.0),
            PrivacyConfig(noise_multiplier=1.0),
            "the noise multiplier is given twice: federation.strategy.noise_multiplier=2 and federation.privacy;"
            " give it only in federation.privacy (noise_multiplier or target_epsilon)",
        ),
        (
            ClientLevelDP(FedAvg()),
            None,
            "ClientLevelDP has no noise multiplier: give"
            " federation.privacy.noise_multiplier (or federation.privacy.target_epsilon to calibrate it)",
        ),
        (
            ClientLevelDP(FedAvg()),
            PrivacyConfig(target_epsilon=0.5, noise_multiplier=1.0),
            "federation.privacy.target_epsilon=0.5 is spent by the first round at federation.privacy.noise_multiplier=1"
            " (epsilon 4.73 per round with federation.privacy.delta=1e-05 at sample rate 1 of"
            " federation.sampling=fixed_size): raise target_epsilon or noise_multiplier",
        ),
    ],
    ids=["no_wrapper", "m_twice", "z_twice", "no_z", "first_round_too_much"],
)
def test_conflicts_and_impossible_budgets_are_one_line(strategy, privacy, message):
    with pytest.raises(ValueError) as info:
        _server(strategy, privacy)
    assert str(info.value) == message


def test_an_unreachable_budget_names_the_options():
    with pytest.raises(
        ValueError, match=r"^federation.privacy.target_epsilon=0.01 with federation.privacy.delta="
    ) as info:
        _server(ClientLevelDP(FedAvg()), PrivacyConfig(target_epsilon=0.01, delta=1e-5), rounds=10)
    assert "lower federation.rounds" in str(info.value) and "\n" not in str(info.value)


def test_rounds_are_accounted_and_the_run_stops_before_the_budget():
    """z = 1, q = 1 (Poisson at rate 1: every client), N = 4, delta = 4^-1.1: epsilon after 1, 2, 3
    rounds is 1.11, 2.13, 3.06 (Opacus RDP); a budget of 2.5 allows 2 rounds of 4."""
    dp = ClientLevelDP(FedAvg(), clip_norm=1.0, seed=0)
    config = PrivacyConfig(target_epsilon=2.5, noise_multiplier=1.0, delta=4**-1.1)
    server = _server(dp, config, num_clients=4, sampling="poisson", sampling_rate=1.0)
    server.global_state = {"w": torch.zeros(2)}
    dp.setup(server.global_state, 4)

    class Module:
        def load_state(self, state):
            pass

    epsilons = []
    for r in range(2):
        server.open(r, [])
        server.close(NO_LOGGER, Module())  # no client sampled: no update, accounted all the same
        epsilons.append(server.report.history[-1]["scalars"]["privacy/epsilon"])
        assert server.stopping == (r == 1)
    assert epsilons == [pytest.approx(1.1076, abs=1e-3), pytest.approx(2.1340, abs=1e-3)]
    section = server.privacy_section()
    assert section["stopped"] == {
        "before_round": 3,
        "reason": "the next round would exceed federation.privacy.target_epsilon",
    }
    assert section["epsilon"]["client"] == pytest.approx(epsilons[-1])
    assert server.state_dict()["privacy"] == {"rounds_accounted": 2, "stop": 2, "noise_multiplier": 1.0}
    again = _server(ClientLevelDP(FedAvg()), config, num_clients=4, sampling="poisson", sampling_rate=1.0)
    again.privacy.load_state_dict({"rounds_accounted": 2, "noise_multiplier": 0.9})
    assert again.privacy.client_dp.steps_done == 2 and again.strategy.noise_multiplier == 0.9  # resume keeps z


def test_report_lists_every_channel_with_dp_on():
    server = _server(ClientLevelDP(FedAvg()), PrivacyConfig(noise_multiplier=1.0))
    section = server.privacy_section()
    assert section["enabled"] and set(section["channels"]) == {"update", "metrics", "validation", "example_counts"}
    assert section["channels"]["metrics"]["protection"] == "not_sent+withheld"  # the loss is not even sent
    assert section["channels"]["validation"]["protection"] == "withheld" and server.report.withhold_validation
    assert section["channels"]["example_counts"]["protection"] == "bucketed"
    plain = _server(FedAvg(), None)
    assert not plain.report.private and plain.privacy_section()["enabled"] is False
    assert not plain.report.withhold_validation
    opted = _server(ClientLevelDP(FedAvg()), PrivacyConfig(noise_multiplier=1.0, report_validation=True))
    assert not opted.report.withhold_validation
    channel = opted.privacy_section()["channels"]["validation"]
    assert channel["protection"] == "reported" and "not covered by any epsilon" in channel["note"]


@pytest.mark.parametrize("strategy", [HetLoRA, FlexLoRA, FLoRA])
def test_rank_heterogeneous_strategies_are_refused_in_one_line(strategy):
    with pytest.raises(
        ValueError, match=rf"^ClientLevelDP: strategy {strategy.__name__} cannot be wrapped: .*no common sum"
    ):
        ClientLevelDP(strategy())


def test_the_grouping_hook_finds_fedbiscuit_inside_the_wrapper():
    inner = FedBiscuit(num_selectors=3)
    server = ServerRound(ClientLevelDP(inner, noise_multiplier=1.0), [], 2, 2, 1)
    assert ClientGrouping._strategy(server) is inner
    with pytest.raises(TypeError, match="ClientGrouping needs federation.strategy=FedBiscuit, got ClientLevelDP"):
        ClientGrouping._strategy(ServerRound(ClientLevelDP(FedAvg()), [], 2, 2, 1))


def test_accountant_state_is_the_round_count():
    acc = PrivacyAccountant(1.0, 0.1, 1e-5)
    acc.step(3)
    fresh = PrivacyAccountant(1.0, 0.1, 1e-5)
    fresh.load_state_dict(acc.state_dict())
    assert fresh.epsilon() == acc.epsilon(3)


def test_dp_inside_secure_aggregation_is_planned_accounted_and_reported_as_a_secure_sum():
    """SecAgg+ around ClientLevelDP (configs/secagg.yaml): the run finds the DP through the
    wrapper's ``dp``, gives it m and z, accounts it, and the report names the secure sum."""
    from lightning_fed.deploy.secure_aggregation import SecureAggregation

    dp = ClientLevelDP(FedAvg(), clip_norm=0.05)
    secagg = SecureAggregation(dp, clipping_range=0.25, quantization_range=2**22, modulus_range=2**32, max_weight=1.0)
    server = _server(secagg, PrivacyConfig(noise_multiplier=1.0), num_clients=20, clients_per_round=4)
    assert (dp.expected_clients, dp.noise_multiplier) == (4.0, 1.0)
    assert server.privacy.enabled and server.privacy.client_dp is not None
    section = server.privacy.section(2)
    assert section["trust_model"].startswith("secure aggregation (Flower SecAgg+)")
    assert section["channels"]["update"]["protection"] == "client_dp+secure_sum"
    plain = _server(ClientLevelDP(FedAvg()), PrivacyConfig(noise_multiplier=1.0), num_clients=20, clients_per_round=4)
    assert plain.privacy.section(2)["trust_model"] == "trusted server (central DP); no secure aggregation"


def test_secure_sum_noise_shares_carry_the_planned_noise_down_to_min_clients():
    """SecAgg+ around ClientLevelDP, m = 4 sampled, federation.min_clients = 2: a round may release
    the sum of only 2 contributions, so each share is N(0, z^2 C^2 / 2) (std z C / sqrt(2) = 0.03536
    for z = 1, C = 0.05) and 2 of them carry the accounted N(0, z^2 C^2). Shares sized for m = 4 gave
    2 / 4 of that variance (epsilon against the server would be that of z / sqrt(2)).

    20,000 coordinates: the sample std's relative standard error is 1 / sqrt(2 * 20000) = 0.5%; margin 3%."""
    import numpy as np

    from lightning_fed.deploy.secure_aggregation import SecureAggregation
    from lightning_fed.strategies import ClientUpdate

    dp = ClientLevelDP(FedAvg(), clip_norm=0.05)
    secagg = SecureAggregation(dp, clipping_range=0.25, quantization_range=2**22, modulus_range=2**32, max_weight=1.0)
    _server(secagg, PrivacyConfig(noise_multiplier=1.0), num_clients=20, clients_per_round=4, min_clients=2)
    assert secagg.noise_share_stddev() == pytest.approx(0.05 / 2**0.5)
    x = {"w": torch.zeros(20000)}
    two = [secagg.contribution(x, ClientUpdate(k, 1, {"w": torch.zeros(20000)}), round_idx=0).arrays[0] for k in (0, 1)]
    assert np.std(np.sum(two, axis=0)) == pytest.approx(0.05, rel=0.03)


def test_a_new_hook_declares_what_it_releases_without_an_edit_in_privacy():
    """``RoundHook.privacy_channels`` is the whole contract: a hook class the privacy package has
    never seen adds a noised release (composed with the update channel) and a centroid channel."""

    class NoisedRelease(RoundHook):
        def privacy_channels(self, privacy):
            return {"selector_losses": True, "mechanism": {"noise_multiplier": 2.0, "clip": 0.5, "releases": 3}}

    class PlainCentroids(RoundHook):
        def privacy_channels(self, privacy):
            return {"centroids": {}}

    def served(hooks):
        server = ServerRound.from_config(FederationConfig(rounds=4), ClientLevelDP(FedAvg()), hooks)
        server.privacy = RunPrivacy(PrivacyConfig(noise_multiplier=1.0), FederationConfig(local_steps=10))
        server.bind(10)
        return server

    server = served([RoundHook(), NoisedRelease(), PlainCentroids()])
    acc, releases, clip = server.privacy.selector_channel()
    assert (acc.noise_multiplier, acc.sample_rate, releases, clip) == (2.0, 1.0, 3, 0.5)
    channels = server.privacy_section()["channels"]
    assert channels["selector_losses"]["protection"] == "gaussian"
    assert channels["fedhds_centroids"]["protection"] == "none"
    plain = served([RoundHook()])
    assert plain.privacy.selector_channel() is None
    assert {"selector_losses", "fedhds_centroids"}.isdisjoint(plain.privacy_section()["channels"])


def test_a_new_hook_reports_a_channel_of_its_own_without_an_edit_in_privacy():
    """A hook that sends something the report has no word for names it as a ``ChannelReport`` of its
    own (``privacy_channels(...)["channels"]``): listed as given, and, with no guarantee, among what no
    epsilon covers for the parties that see the clients' replies (the server, the run folder)."""

    class LabelHistogram(RoundHook):
        def privacy_channels(self, privacy):
            return {"channels": [ChannelReport("label_histogram", "bucketed", note="per-client label counts")]}

    server = ServerRound.from_config(FederationConfig(rounds=4), ClientLevelDP(FedAvg()), [LabelHistogram()])
    server.privacy = RunPrivacy(PrivacyConfig(noise_multiplier=1.0), FederationConfig(local_steps=10))
    server.bind(10)
    section = server.privacy_section()
    assert section["channels"]["label_histogram"] == {
        "protection": "bucketed",
        "means": PROTECTIONS["bucketed"],
        "guarantees": [],
        "note": "per-client label counts",
    }
    not_covered = {party: seen["not_covered"] for party, seen in section["adversaries"].items()}
    assert "label_histogram" in not_covered["server"] and "label_histogram" in not_covered["run_folder"]
    assert "label_histogram" not in not_covered["final_model"] + not_covered["other_client"]
