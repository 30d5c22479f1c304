"""Issue 32, item 8: a Poisson round that sampled no client releases the Gaussian mechanism on a
zero sum, ``N(0, z^2 C^2) / m``, not the unchanged state (which would tell everyone the round was
empty: for N = 2, q = 0.25, z = 1 the accountant's 3.08 would be 3.50)."""

import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.federation.hooks import RoundHook
from lightning_fed.federation.secret_seed import as_secret_seed, standard_normal
from lightning_fed.privacy import ClientLevelDP, PrivacyConfig
from lightning_fed.privacy.client_dp import _NOISE_TAG
from lightning_fed.state import clone_state
from lightning_fed.strategies import FedAvg, FedBiscuit, Scaffold
from tests.helpers.runs import fit, preference_data, tiny_dpo

X = {"w": torch.tensor([1.0, -2.0, 0.5])}


def test_empty_round_releases_the_noise_alone_by_hand():
    """z = 2, C = 0.5, m = q N = 0.25 * 2 = 0.5: the state moves by z C / m * n = 2 n, n the
    round's standard normal draws (the Philox generator of (seed, tag, round) as documented)."""
    dp = ClientLevelDP(FedAvg(), noise_multiplier=2.0, clip_norm=0.5, expected_clients=0.5, seed=7)
    dp.setup(X, 2)
    out = dp.aggregate(X, [])
    n = standard_normal((3,), as_secret_seed(7).generator("client-level noise", _NOISE_TAG, 0))
    torch.testing.assert_close(out["w"], X["w"] + 2.0 * n)
    assert dp.rounds_done == 1 and dp.last_round["noise_stddev"] == 1.0


def test_empty_round_noise_has_the_planned_spread():
    """1000 coordinates: the sample sd of N(0, 2^2) is within 0.2 of 2 (its standard error is
    2 / sqrt(2000) = 0.045: the margin is 4.4 of them)."""
    zero = {"w": torch.zeros(1000)}
    dp = ClientLevelDP(FedAvg(), noise_multiplier=2.0, clip_norm=0.5, expected_clients=0.5)
    dp.setup(zero, 2)
    assert abs(float(dp.aggregate(zero, [])["w"].std()) - 2.0) < 0.2


def test_empty_round_noises_scaffolds_control_and_every_fedbiscuit_selector():
    scaffold = ClientLevelDP(Scaffold(), noise_multiplier=1.0, clip_norm=1.0, expected_clients=1.0, seed=1)
    scaffold.setup(X, 4)
    scaffold.aggregate(X, [])
    assert not torch.equal(scaffold.strategy.control["w"], torch.zeros(3))  # c <- c + noise / N
    keys = {"l.default.w": torch.zeros(2), "l.selector_1.w": torch.zeros(2), "l.selector_2.w": torch.zeros(2)}
    inner = FedBiscuit(num_selectors=3, warmup_rounds=0)
    biscuit = ClientLevelDP(inner, noise_multiplier=1.0, clip_norm=1.0, expected_clients=3.0, seed=1)
    biscuit.setup(keys, 6)
    inner.set_assignment([0, 0, 1, 1, 2, 2])
    out = biscuit.aggregate(keys, [])
    assert all(not torch.equal(out[k], keys[k]) for k in keys)


class Snapshots(RoundHook):
    def __init__(self):
        self.states = []

    def after_aggregate(self, server, trainer, module, round_idx):
        self.states.append(clone_state(server.global_state))


def test_an_empty_poisson_round_of_a_dp_run_changes_the_state(tmp_path):
    """ClientLevelDP seed 0 (a test seed: the sample is derived from it), N = 4, q = 0.25: rounds
    sample [2, 3], [], [] (checked below: Philox draws keyed by the seed, issue 40); rounds 2 and 3 are
    empty and round 3 still moves the state."""
    snaps = Snapshots()
    dp = ClientLevelDP(FedAvg(), clip_norm=0.5, seed=0)
    privacy = PrivacyConfig(noise_multiplier=1.0, delta=1e-5)
    loop = FederatedLoop(
        rounds=3, local_steps=1, sampling="poisson", sampling_rate=0.25, strategy=dp, privacy=privacy, hooks=[snaps]
    )
    fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    assert [loop.server.sample(r) for r in range(3)] == [[2, 3], [], []]
    assert len(snaps.states) == 3 and dp.rounds_done == 3
    assert any(not torch.equal(v, snaps.states[1][k]) for k, v in snaps.states[2].items())
