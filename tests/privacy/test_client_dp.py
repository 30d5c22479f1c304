import math

import pytest
import torch

from lightning_fed.privacy import AdaptiveClipping, ClientLevelDP
from lightning_fed.strategies import (
    AggregationError,
    ClientUpdate,
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedBiscuit,
    FedNova,
    FedProx,
    FedYogi,
    Scaffold,
    TrimmedMean,
)

X = {"w": torch.tensor([1.0, 2.0])}


def _dp(strategy=None, num_clients=4, **kwargs):
    dp = ClientLevelDP(strategy or FedAvg(), **kwargs)
    dp.setup(X, num_clients)
    return dp


def test_clip_then_fixed_denominator_by_hand():
    dp = _dp(noise_multiplier=0.0, clip_norm=1.0, expected_clients=2)
    ups = [
        ClientUpdate(0, 5, {"w": torch.tensor([4.0, 6.0])}),  # delta [3, 4], norm 5 -> [0.6, 0.8]
        ClientUpdate(1, 1, {"w": torch.tensor([1.3, 2.0])}),  # delta [0.3, 0], norm 0.3 -> kept
    ]
    out = dp.aggregate(X, ups)
    # (sum of clipped deltas) / m = [0.9, 0.8] / 2; num_examples (5 vs 1) no longer weighs
    torch.testing.assert_close(out["w"], torch.tensor([1.45, 2.4]))
    assert dp.last_round["unclipped"] == 1.0
    # m = 4 expected while 2 came: the absent ones count as zero updates
    dp = _dp(noise_multiplier=0.0, clip_norm=1.0, expected_clients=4)
    torch.testing.assert_close(dp.aggregate(X, ups)["w"], torch.tensor([1.225, 2.2]))


def test_noise_scale_on_one_large_draw():
    """z = 2, C = 0.5, m = 4: the mean's noise std is z C / m = 0.25.

    200,000 coordinates: the sample std's relative spread is 1 / sqrt(2 * 2e5) = 0.16%; 1% is > 6.
    """
    x = {"w": torch.zeros(200_000)}
    dp = ClientLevelDP(FedAvg(), noise_multiplier=2.0, clip_norm=0.5, expected_clients=4)
    dp.setup(x, 4)
    out = dp.aggregate(x, [ClientUpdate(0, 1, {"w": torch.zeros(200_000)})])
    assert float(out["w"].std()) == pytest.approx(0.25, rel=0.01)
    assert dp.last_round["noise_stddev"] == 1.0


def test_noised_aggregate_variance_is_sigma2_c2_over_n2():
    """Var(Delta~) = z^2 C^2 / m^2 over many rounds, with real (clipped) client updates.

    z = 1.5, C = 0.2, m = 3 clients: sigma^2 C^2 / n^2 = 2.25 * 0.04 / 9 = 0.01. 1500 rounds x 16
    coordinates = 24,000 draws, each round a fresh noise seed. (n - 1) s^2 / sigma^2 is chi-square
    with n - 1 degrees of freedom, so s^2 / sigma^2 has std sqrt(2 / (n - 1)) = 0.0091; the
    tolerance 4% is more than 4 of them. The mean of the draws is the clipped mean (|bias| < 4 std).
    """
    torch.manual_seed(0)
    x = {"w": torch.zeros(16)}
    dp = ClientLevelDP(FedAvg(), noise_multiplier=1.5, clip_norm=0.2, expected_clients=3, seed=7)
    dp.setup(x, 3)
    ups = [ClientUpdate(i, 1, {"w": torch.randn(16)}) for i in range(3)]  # norms ~4 >> C: all clipped
    clipped_mean = sum(u.state["w"] * (0.2 / float(u.state["w"].norm())) for u in ups) / 3
    draws = torch.stack([dp.aggregate(x, ups)["w"] - clipped_mean for _ in range(1500)]).double()
    assert float(draws.var()) == pytest.approx(1.5**2 * 0.2**2 / 3**2, rel=0.04)
    assert abs(float(draws.mean())) < 4 * 0.1 / math.sqrt(draws.numel())


def test_adaptive_clip_update_inside_the_wrapper():
    # z = 0 and sigma_b = 0: norms 0.5, 0.9, 1.0 (<= C), 2.0 -> b~ = 3/4, C <- exp(-0.2 * 0.25)
    dp = _dp(noise_multiplier=0.0, clip_norm=1.0, expected_clients=4, adaptive=AdaptiveClipping(0.5, 0.2, 0.0))
    ups = [ClientUpdate(i, 1, {"w": X["w"] + torch.tensor([n, 0.0])}) for i, n in enumerate((0.5, 0.9, 1.0, 2.0))]
    out = dp.aggregate(X, ups)
    # clipped deltas 0.5 + 0.9 + 1.0 + 1.0 = 3.4 on w[0], over m = 4
    torch.testing.assert_close(out["w"], torch.tensor([1.85, 2.0]))
    assert dp.clip_norm == pytest.approx(math.exp(-0.05))
    assert dp.last_round["unclipped_fraction"] == pytest.approx(0.75)


def test_adaptive_noise_share_goes_to_the_update():
    # m = 20 -> sigma_b = 1; z = 1 -> the update's multiplier is 2 / sqrt(3) (Theorem 1)
    dp = _dp(noise_multiplier=1.0, expected_clients=20, adaptive=AdaptiveClipping())
    assert dp.update_noise_multiplier == pytest.approx(2.0 / math.sqrt(3.0))


def test_fedadam_steps_on_the_noised_mean():
    # z = 0: FedAdam sees the clipped mean [0.3, 0.4] (one client, m = 2) as its pseudo-gradient
    dp = _dp(FedAdam(server_lr=0.1, beta_1=0.9, beta_2=0.99, tau=1e-3), noise_multiplier=0.0, clip_norm=1.0,
             expected_clients=2)  # fmt: skip
    plain = FedAdam(server_lr=0.1, beta_1=0.9, beta_2=0.99, tau=1e-3)
    plain.setup(X, 4)
    out = dp.aggregate(X, [ClientUpdate(0, 1, {"w": torch.tensor([4.0, 6.0])})])
    expected = plain.aggregate(X, [ClientUpdate(0, 1, {"w": torch.tensor([1.3, 2.4])})])
    torch.testing.assert_close(out["w"], expected["w"])


@pytest.mark.parametrize(
    "make",
    [
        lambda: FedAvg(weighting="uniform", server_lr=0.5),
        lambda: FedProx(mu=0.1, weighting="uniform"),
        lambda: FedAvgM(momentum=0.9, weighting="uniform"),
        lambda: FedAdagrad(server_lr=0.1, weighting="uniform"),
        lambda: FedYogi(server_lr=0.1, weighting="uniform"),
        lambda: FedAdam(server_lr=0.1, weighting="uniform"),
    ],
    ids=["FedAvg", "FedProx", "FedAvgM", "FedAdagrad", "FedYogi", "FedAdam"],
)
def test_without_noise_or_clipping_every_averaging_strategy_is_unchanged(make):
    # z = 0, C far above the update norms, m = |S| = 3: the noised mean is the plain uniform
    # mean, so two rounds through the wrapper equal two rounds of the strategy itself (moments too)
    ups = [ClientUpdate(i, 10 * i + 1, {"w": X["w"] + torch.tensor([0.1 * i, -0.2])}) for i in range(3)]
    plain, dp = make(), ClientLevelDP(make(), noise_multiplier=0.0, clip_norm=100.0, expected_clients=3)
    plain.setup(X, 5)
    dp.setup(X, 5)
    x_plain, x_dp = X, X
    for _ in range(2):
        x_plain, x_dp = plain.aggregate(x_plain, ups), dp.aggregate(x_dp, ups)
        torch.testing.assert_close(x_dp["w"], x_plain["w"])


def test_scaffold_model_and_control_changes_are_clipped_together():
    # delta [3, 0] and control change [0, 8] * control_scale 0.5 = [0, 4]: joint norm 5, C = 1
    # -> delta [0.6, 0], scaled control [0, 0.8] -> control [0, 1.6]; one client, m = 1, N = 2:
    # x = [0, 0] + [0.6, 0];  c = 0 + |S|/N * ([0, 1.6] / |S|) = [0, 0.8]
    x = {"w": torch.zeros(2)}
    dp = ClientLevelDP(Scaffold(), noise_multiplier=0.0, clip_norm=1.0, expected_clients=1, control_scale=0.5)
    dp.setup(x, 2)
    up = ClientUpdate(0, 1, {"w": torch.tensor([3.0, 0.0])}, extras={"control/w": torch.tensor([0.0, 8.0])})
    out = dp.aggregate(x, [up])
    torch.testing.assert_close(out["w"], torch.tensor([0.6, 0.0]))
    torch.testing.assert_close(dp.downlink(0)["control/w"], torch.tensor([0.0, 0.8]))


def test_fedbiscuit_clips_the_clients_selector_and_divides_by_its_cluster():
    keys = {"l.default.w": torch.zeros(2), "l.selector_1.w": torch.zeros(2), "l.selector_2.w": torch.zeros(2)}
    inner = FedBiscuit(num_selectors=3, warmup_rounds=0)
    dp = ClientLevelDP(inner, noise_multiplier=0.0, clip_norm=1.0, expected_clients=3)
    dp.setup(keys, 6)
    inner.set_assignment([0, 0, 1, 1, 2, 2])
    # each selector is held by 2 of 6 clients: expected contributors m * 2/6 = 1
    assert dp.key_shares(keys) == {k: pytest.approx(1 / 3) for k in keys}
    assert list(dp.client_model(2, keys)) == ["l.selector_1.w"]
    ups = [
        ClientUpdate(0, 1, {"l.default.w": torch.tensor([3.0, 4.0])}),  # norm 5 -> [0.6, 0.8]
        ClientUpdate(2, 1, {"l.selector_1.w": torch.tensor([0.0, 0.5])}),  # kept
    ]
    out = dp.aggregate(keys, ups)
    # Eq. (6), cluster scope: p = 1/2 for the one sampled client of each 2-client cluster
    torch.testing.assert_close(out["l.default.w"], torch.tensor([0.3, 0.4]))
    torch.testing.assert_close(out["l.selector_1.w"], torch.tensor([0.0, 0.25]))
    torch.testing.assert_close(out["l.selector_2.w"], torch.zeros(2))
    # an upload of a selector no client trains (all assigned elsewhere) is refused, not divided by 0
    inner.set_assignment([0, 0, 0, 1, 1, 1])
    with pytest.raises(AggregationError, match=r"keys \['l.selector_2.w'\] were uploaded but no client's model"):
        dp.aggregate(keys, [ClientUpdate(0, 1, {"l.selector_2.w": torch.ones(2)})])


def test_resumed_wrapper_draws_the_same_noise_from_the_key_not_the_state():
    ups = [ClientUpdate(0, 1, {"w": torch.tensor([1.5, 2.0])})]
    straight = _dp(noise_multiplier=1.0, clip_norm=1.0, expected_clients=2, adaptive=AdaptiveClipping(count_stddev=1.0))
    straight.aggregate(X, ups)
    state = straight.state_dict()
    assert straight.seed not in _leaves(state)  # the checkpoint never holds the noise seed
    second = straight.aggregate(X, ups)
    resumed = _dp(noise_multiplier=1.0, clip_norm=1.0, expected_clients=2, adaptive=AdaptiveClipping(count_stddev=1.0))
    resumed.load_state_dict(state)
    assert resumed.seed != straight.seed  # without the run's key: fresh noise
    resumed.seed = straight.seed  # what RunPrivacy does with the key file
    torch.testing.assert_close(resumed.aggregate(X, ups)["w"], second["w"])
    assert resumed.clip_norm == straight.clip_norm


def _leaves(obj):
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _leaves(x)]
    if isinstance(obj, (list, tuple)):
        return [v for x in obj for v in _leaves(x)]
    return [obj]


def test_default_noise_seed_is_secret_and_fresh():
    # two runs with the same config must not draw the same (hence subtractable) noise
    ups = [ClientUpdate(0, 1, {"w": torch.tensor([1.5, 2.0])})]
    a = _dp(noise_multiplier=1.0, expected_clients=1).aggregate(X, ups)
    b = _dp(noise_multiplier=1.0, expected_clients=1).aggregate(X, ups)
    assert not torch.equal(a["w"], b["w"])
    fixed = [_dp(noise_multiplier=1.0, expected_clients=1, seed=3).aggregate(X, ups)["w"] for _ in range(2)]
    assert torch.equal(*fixed)


@pytest.mark.parametrize(("inner", "reason"), [(FedNova(), "own step count"), (TrimmedMean(), "not a sum")])
def test_strategies_needing_individual_updates_are_refused(inner, reason):
    with pytest.raises(ValueError, match=f"strategy {type(inner).__name__} cannot be wrapped: .*{reason}"):
        ClientLevelDP(inner)


def test_bad_arguments_and_missing_m():
    with pytest.raises(
        ValueError, match="noise_multiplier must be >= 0, got -1; federation.strategy.clip_norm must be > 0, got 0"
    ):
        ClientLevelDP(FedAvg(), noise_multiplier=-1, clip_norm=0)
    dp = _dp()
    with pytest.raises(RuntimeError, match="expected_clients is not set"):
        dp.aggregate(X, [ClientUpdate(0, 1, {"w": torch.ones(2)})])
    dp.set_expected_clients(2.5)
    dp.set_noise_multiplier(0.7)
    assert (dp.expected_clients, dp.noise_multiplier) == (2.5, 0.7)
