"""ClientTurn on its own: begin loads and seeds, steps are counted, end uploads or not."""

from types import SimpleNamespace

import torch

from lightning_fed.federation import ClientStateStore, ClientTurn, derive_seed, turn_batches
from lightning_fed.strategies import FedAvg


class TwoParams(torch.nn.Module):
    """A shared weight ``w`` (2 floats) and a personal ``p`` (1 float), with the module API a turn uses."""

    def __init__(self):
        super().__init__()
        self.w, self.p = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))

    def shared_parameters(self):
        return {"w": self.w}

    def personal_parameters(self):
        return {"p": self.p}

    def load_state(self, state):
        with torch.no_grad():
            for k, v in state.items():
                getattr(self, k).copy_(v)


def test_a_turn_begins_from_the_sent_state_and_uploads_its_change():
    module, store = TwoParams(), ClientStateStore()
    store.put(3, {"p": torch.tensor([5.0])}, {})
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    opt.state[module.w]["momentum_buffer"] = torch.ones(2)  # a previous client's state
    trainer = SimpleNamespace(optimizers=[opt])
    turn = ClientTurn(3, round_idx=2, rounds=4, seed=7, strategy=FedAvg(), store=store, num_examples=10)
    turn.begin(trainer, module, {"w": torch.tensor([1.0, 2.0])}, {})
    assert module.w.tolist() == [1.0, 2.0] and module.p.tolist() == [5.0]  # start + own personal state
    assert not opt.state  # optimizer state never leaks between clients
    expected = torch.randn(1, generator=torch.Generator().manual_seed(derive_seed(7, 2, 3)))
    assert torch.randn(1).item() == expected.item()  # seeded by (seed, round, client)
    assert turn.down_bytes == 2 * 4
    for loss in (1.0, 3.0):  # two local steps: w -= 0.5 * 1
        module.w.grad = torch.ones(2)
        turn.before_optimizer_step(0.5)
        opt.step()
        turn.after_optimizer_step()
        turn.record_loss(torch.tensor(loss))
    update = turn.end(trainer, module)
    assert turn.steps == 2 and update.client_id == 3 and update.num_examples == 10
    assert update.state["w"].tolist() == [0.0, 1.0]  # 1 - 2 * 0.5, 2 - 2 * 0.5
    assert update.metrics == {"train_loss": 2.0} and turn.up_bytes == 8
    assert store.get(3)["personal"]["p"].tolist() == [5.0]


def test_a_failed_turn_uploads_nothing_and_counts_no_steps():
    module = TwoParams()
    trainer = SimpleNamespace(optimizers=[])
    turn = ClientTurn(0, 0, 1, 0, FedAvg(), ClientStateStore(), 4)
    turn.begin(trainer, module, {"w": torch.zeros(2)}, {})
    turn.fail()
    turn.before_optimizer_step(0.1)
    assert turn.end(trainer, module) is None and turn.steps == 0 and turn.failed


def test_turn_batches_by_steps_and_by_whole_accumulation_windows():
    assert turn_batches(5, None, 100, 4, 2) == 10  # K steps x 2 accumulated batches
    assert turn_batches(None, 1, 10, 4, 1) == 3  # ceil(10 / 4)
    assert turn_batches(None, 1, 10, 4, 2) == 4  # 3 batches, rounded up to whole windows of 2
    assert turn_batches(None, 2, 10, 4, 4) == 8  # 6 batches -> 8
