"""Personal parameters stay on their client: swapped in for training and evaluation only."""

import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.modules import DPOModule, is_adapter_param
from tests.helpers.runs import fit, preference_data, tiny_dpo


class FedPerDPO(DPOModule):
    """FedPer-style: the LoRA of the last GPT-2 block stays on each client."""

    def is_personal(self, name: str) -> bool:
        return is_adapter_param(name) and ".h.1." in name


def test_personal_state_never_travels_and_is_used_for_evaluation(tmp_path):
    base = tiny_dpo()
    module = FedPerDPO(base.hparams.backbone, lora=base.hparams.lora, lr=base.hparams.lr, beta=0.5)
    # Two opposite groups: personal layers are what lets each client fit its own taste.
    data = preference_data(groups=("positive", "negative"))
    loop = FederatedLoop(rounds=3, clients_per_round=4, local_steps=4, seed=0)
    fit(module, data, loop, str(tmp_path))

    personal_keys = set(module.personal_parameters())
    assert personal_keys and personal_keys.isdisjoint(loop.server.global_state)
    states = {cid: loop.store.get(cid)["personal"] for cid in range(4)}
    assert all(set(s) == personal_keys for s in states.values())
    key = next(iter(personal_keys))
    assert not torch.equal(states[0][key], states[1][key])  # each client has its own
    # Uploads are the shared keys only.
    shared_bytes = sum(v.numel() * v.element_size() for v in loop.server.global_state.values())
    assert loop.server.report.history[-1]["up_bytes"] == 4 * shared_bytes
    # Evaluation swaps each client's personal state in: opposite groups are both served.
    per_client = loop.server.report.history[-1]["val_clients"]
    assert min(m["reward_acc"] for m in per_client.values()) > 0.5
