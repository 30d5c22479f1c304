"""Privacy in the in-process FederatedLoop: the global state moves by exactly the noise each mechanism adds."""

import math

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.privacy import ClientLevelDP
from lightning_fed.state import clone_state
from lightning_fed.strategies import FedAvg
from tests.helpers.runs import fit, preference_data, tiny_dpo


def test_global_state_moves_by_the_noise_of_two_rounds(tmp_path):
    """C = 1e-6 makes every clipped update negligible; z = 1000, m = 2 clients: each round adds
    noise of std z C / m = 5e-4 per coordinate, two rounds sqrt(2) * 5e-4. Over the tiny model's
    ~1000+ LoRA coordinates the sample std's relative spread is < 2.3%; tolerance 10%."""
    module = tiny_dpo(seed=0)
    initial = clone_state(module.shared_parameters())
    dp = ClientLevelDP(FedAvg(), noise_multiplier=1000.0, clip_norm=1e-6, expected_clients=2, seed=1)
    loop = FederatedLoop(rounds=2, clients_per_round=2, local_steps=2, strategy=dp, seed=0)
    fit(module, preference_data(), loop, str(tmp_path))
    assert dp.rounds_done == 2 and dp.last_round["noise_stddev"] == pytest.approx(1e-3)
    change = torch.cat([(loop.server.global_state[k] - initial[k]).flatten() for k in initial])
    assert change.numel() > 1000
    assert float(change.std()) == pytest.approx(math.sqrt(2) * 5e-4, rel=0.1)
    torch.testing.assert_close(
        module.shared_parameters()[next(iter(initial))].detach(), loop.server.global_state[next(iter(initial))]
    )


def test_dp_sgd_module_in_the_loop_sends_only_b_moved_by_its_noise(tmp_path):
    """FFA-LoRA DPO with DP-SGD, plain SGD lr 0.1, C = 1e-6 (signal negligible), z = 1000, batches
    of 4 pairs: each local step moves B by lr * z C / 4 = 2.5e-5 per coordinate; 2 steps per
    client, FedAvg of 2 equal-sized clients: std 2.5e-5 * sqrt(2) / sqrt(2) = 2.5e-5 after the
    round. ~800 B coordinates: the sample std's relative spread is ~2.5%; tolerance 12%."""
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, LoraSettings
    from lightning_fed.privacy import DPDPOModule, DPSGDSettings
    from tests.helpers.runs import TINY_GPT2

    pl.seed_everything(0, verbose=False)
    module = DPDPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=0.1,
        optimizer="sgd",
        dp_sgd=DPSGDSettings(clip_norm=1e-6, noise_multiplier=1000.0, ffa_lora=True, seed=0),
    )
    a_before = {n: p.detach().clone() for n, p in module.named_parameters() if "lora_A" in n}
    initial = clone_state(module.shared_parameters())
    assert initial and all("lora_B" in k for k in initial)
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=2, strategy=FedAvg(), seed=0)
    fit(module, preference_data(), loop, str(tmp_path))
    assert set(loop.server.global_state) == set(initial)
    assert all(torch.equal(p, a_before[n]) for n, p in module.named_parameters() if "lora_A" in n)
    change = torch.cat([(loop.server.global_state[k] - initial[k]).flatten() for k in initial])
    assert float(change.std()) == pytest.approx(2.5e-5, rel=0.12)
