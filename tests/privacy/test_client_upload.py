"""What a private client uploads: no training loss, a bucketed count (the non-private turn sends both exact)."""

from types import SimpleNamespace

import pytest
import torch

from lightning_fed.federation import ClientStateStore, ClientTurn
from lightning_fed.strategies import FedAvg
from tests.federation.test_turn import TwoParams


@pytest.mark.parametrize("private", [False, True])
def test_a_private_turn_keeps_its_loss_and_buckets_its_count(private):
    module = TwoParams()
    trainer = SimpleNamespace(optimizers=[torch.optim.SGD(module.parameters(), lr=0.5)])
    turn = ClientTurn(3, 0, 1, 7, FedAvg(), ClientStateStore(), num_examples=18, private=private)
    turn.begin(trainer, module, {"w": torch.zeros(2)}, {})
    for loss in (1.0, 3.0):
        module.w.grad = torch.ones(2)
        turn.before_optimizer_step(0.5)
        trainer.optimizers[0].step()
        turn.record_loss(torch.tensor(loss))
    update = turn.end(trainer, module)
    assert turn.losses == [1.0, 3.0]  # computed on the client either way
    if private:
        assert update.metrics == {} and update.num_examples == 16
    else:
        assert update.metrics == {"train_loss": 2.0} and update.num_examples == 18
    assert update.state["w"].tolist() == [-1.0, -1.0]  # the update itself is the same
