import torch

from lightning_fed.strategies import ClientUpdate, FLoRA
from lightning_fed.strategies.flora import STACK_PREFIX, stack_factors

A, B = "m.lora_A.default.weight", "m.lora_B.default.weight"
GLOBAL = {A: torch.zeros(2, 2), B: torch.zeros(2, 2)}
UPS = [
    ClientUpdate(0, 1, {A: torch.tensor([[1.0, 2.0]]), B: torch.tensor([[1.0], [1.0]])}),
    ClientUpdate(1, 3, {A: torch.eye(2), B: 2 * torch.eye(2)}),
]


def test_stacking_by_hand_is_the_exact_weighted_mean_of_products():
    (a, b) = stack_factors([u.state for u in UPS], [1.0, 3.0])["m"]
    # p = 1/4, 3/4: A_stack = [p0 A0; p1 A1], B_stack = [B0 B1]
    torch.testing.assert_close(a, torch.tensor([[0.25, 0.5], [0.75, 0.0], [0.0, 0.75]]))
    torch.testing.assert_close(b, torch.tensor([[1.0, 2.0, 0.0], [1.0, 0.0, 2.0]]))
    # 1/4 [[1, 2], [1, 2]] + 3/4 * 2 I
    torch.testing.assert_close(b @ a, torch.tensor([[1.75, 0.5], [0.25, 2.0]]))


def test_aggregate_merges_into_the_base_and_restarts_the_adapter():
    s = FLoRA(client_ranks=[1, 2], seed=3)
    s.setup(GLOBAL, 2)
    out = s.aggregate(GLOBAL, UPS)
    torch.testing.assert_close(s.base_delta["m"], torch.tensor([[1.75, 0.5], [0.25, 2.0]]))
    assert out[B].abs().sum() == 0 and out[A].abs().max() <= 1 / 2**0.5 and out[A].abs().sum() > 0
    down = s.downlink(0)
    torch.testing.assert_close(down[STACK_PREFIX + B] @ down[STACK_PREFIX + A], s.base_delta["m"])
    assert s.client_model(0, out)[A].shape == (1, 2)
    s.aggregate(GLOBAL, UPS)  # a second round adds its product to the base change
    torch.testing.assert_close(s.base_delta["m"], 2 * torch.tensor([[1.75, 0.5], [0.25, 2.0]]))


def test_resume_draws_the_same_fresh_adapter():
    s = FLoRA(seed=3)
    s.setup(GLOBAL, 2)
    s.aggregate(GLOBAL, UPS)
    t = FLoRA(seed=0)
    t.setup(GLOBAL, 2)
    t.load_state_dict(s.state_dict())
    torch.testing.assert_close(t.aggregate(GLOBAL, UPS)[A], s.aggregate(GLOBAL, UPS)[A])
    torch.testing.assert_close(t.base_delta["m"], s.base_delta["m"])
