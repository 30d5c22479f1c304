"""FedRep: in each turn, head steps with the body frozen, then body steps with the head frozen."""

import pytest

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.modules.fedrep import FedRepModule
from tests.helpers.personal import tiny
from tests.helpers.runs import fit, preference_data


class RecordingFedRep(FedRepModule):
    def manual_step(self, optimizer, loss):
        kinds = {"head" if self.is_personal(n) else "body" for n, p in self.named_parameters() if p.requires_grad}
        self.steps_seen = [*getattr(self, "steps_seen", []), (optimizer.param_groups[0]["lr"], kinds)]
        super().manual_step(optimizer, loss)


@pytest.mark.parametrize(("batch_clients", "turns"), [("off", 2), (2, 1)])
def test_head_steps_then_body_steps_with_their_own_learning_rates(tmp_path, batch_clients, turns):
    """Each client: head, head, body. Trained together (issue 43), both clients take each step at once."""
    m = tiny(RecordingFedRep, head_steps=2, lr_head=1e-2, lr_body=1e-3)
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=3, seed=0, batch_clients=batch_clients)
    fit(m, preference_data(), loop, str(tmp_path))
    turn = [(1e-2, {"head"}), (1e-2, {"head"}), (1e-3, {"body"})]
    assert m.steps_seen == turn * turns
    assert all(".lora_" in k for k in loop.server.global_state)


def test_head_steps_must_leave_body_steps(tmp_path):
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=3, seed=0)
    with pytest.raises(ValueError, match="model.head_steps=3 must be < federation.local_steps=3"):
        fit(tiny(FedRepModule, head_steps=3), preference_data(), loop, str(tmp_path))
