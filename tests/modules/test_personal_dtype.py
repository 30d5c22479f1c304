"""Personal modules and their optimizer state in a chosen dtype (bfloat16 halves them)."""

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.modules import FedPerModule, FedRepModule, PDPOModule
from tests.helpers.personal import tiny
from tests.helpers.runs import fit, preference_data


def test_bad_personal_dtype_is_named():
    with pytest.raises(
        ValueError, match="model.personal_dtype must be one of \\('bfloat16', 'float16', 'float32'\\), got 'int8'"
    ):
        tiny(PDPOModule, personal_dtype="int8")


@pytest.mark.parametrize("cls", [FedPerModule, FedRepModule], ids=["fedper", "fedrep"])
def test_personal_head_is_built_in_the_chosen_dtype(cls):
    kwargs = {"shared_layers": 1} if cls is FedPerModule else {}
    module = tiny(cls, personal_dtype="bfloat16", **kwargs)
    assert module.lm_head.weight.dtype == torch.bfloat16
    out = module.model.get_base_model().get_output_embeddings().weight
    torch.testing.assert_close(module.lm_head.weight.float(), out.to(torch.bfloat16).float())


def test_pdpo_bf16_state_is_half_and_trains(tmp_path):
    f32, bf16 = tiny(PDPOModule), tiny(PDPOModule, personal_dtype="bfloat16")
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=2, seed=0)
    data = preference_data(num_clients=2, per_client=8, max_length=96)
    fit(bf16, data, loop, str(tmp_path))
    trainable = [n for n, p in bf16.personal_parameters().items() if p.requires_grad or "reward_head" in n]
    assert trainable and all(bf16.personal_parameters()[n].dtype == torch.bfloat16 for n in trainable)
    assert bf16.reward_scale.count.dtype == torch.float32  # statistics stay float32
    # Heads, bottleneck and reward head dominate; the float32 statistics are a few bytes.
    ratio = bf16.personal_state_nbytes() / f32.personal_state_nbytes()
    assert 0.5 <= ratio < 0.501, ratio
    stored = loop.store.get(0)["personal"]
    assert stored["lm_head.weight"].dtype == torch.bfloat16
    assert not torch.equal(
        stored["lm_head.weight"].float(), f32.lm_head.weight.to(torch.bfloat16).float()
    )  # it trained
    opt_h = bf16.trainer.optimizers[0]
    moments = [s["exp_avg"] for s in opt_h.state.values()]
    assert moments and all(m.dtype == torch.bfloat16 for m in moments)
