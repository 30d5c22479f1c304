import torch

from lightning_fed.strategies import ClientUpdate, FlexLoRA
from lightning_fed.strategies.flexlora import average_products

A, B = "m.lora_A.default.weight", "m.lora_B.default.weight"


def _setup(global_state, ranks):
    s = FlexLoRA(client_ranks=ranks, weighting="uniform")
    s.setup(global_state, len(ranks))
    return s


def test_products_averaged_and_redistributed_by_hand():
    g = {A: torch.zeros(2, 2), B: torch.zeros(2, 2)}
    s = _setup(g, [1, 1, 2])
    ups = [  # B0 A0 = [[2, 0], [0, 0]], B1 A1 = [[0, 0], [0, 4]]: mean [[1, 0], [0, 2]]
        ClientUpdate(0, 1, {A: torch.tensor([[1.0, 0.0]]), B: torch.tensor([[2.0], [0.0]])}),
        ClientUpdate(1, 1, {A: torch.tensor([[0.0, 1.0]]), B: torch.tensor([[0.0], [4.0]])}),
    ]
    out = s.aggregate(g, ups)
    torch.testing.assert_close(out[B] @ out[A], torch.tensor([[1.0, 0.0], [0.0, 2.0]]))  # rank 2: exact
    # (mean of A) and (mean of B) would give [[0.5, 0], [0, 1]] @ ... = [[1, 1], [2, 2]] / 2: not the mean
    mean_a, mean_b = (ups[0].state[A] + ups[1].state[A]) / 2, (ups[0].state[B] + ups[1].state[B]) / 2
    assert not torch.allclose(mean_b @ mean_a, torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    c0 = s.client_model(0, out)  # rank 1: the best rank-1 approximation keeps singular value 2
    assert c0[A].shape == (1, 2) and c0[B].shape == (2, 1)
    torch.testing.assert_close(c0[B] @ c0[A], torch.tensor([[0.0, 0.0], [0.0, 2.0]]))
    c2 = s.client_model(2, out)
    torch.testing.assert_close(c2[B] @ c2[A], torch.tensor([[1.0, 0.0], [0.0, 2.0]]))


def test_3x3_product_recovered_exactly_when_the_rank_allows():
    g = {A: torch.zeros(3, 3), B: torch.zeros(3, 3)}
    s = _setup(g, [1, 2, 3])
    ups = [
        ClientUpdate(0, 1, {A: torch.tensor([[1.0, 1.0, 0.0]]), B: torch.tensor([[1.0], [0.0], [1.0]])}),
        ClientUpdate(
            1,
            3,
            {
                A: torch.tensor([[0.0, 0.0, 2.0], [1.0, 0.0, 0.0]]),
                B: torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]),
            },
        ),
    ]
    # B0 A0 = [[1, 1, 0], [0, 0, 0], [1, 1, 0]]; B1 A1 = [[1, 0, 0], [0, 0, 2], [0, 0, 0]]; uniform mean
    expected = torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]])
    out = s.aggregate(g, ups)
    torch.testing.assert_close(average_products([u.state for u in ups], [1.0, 1.0])["m"], expected)
    torch.testing.assert_close(out[B] @ out[A], expected)  # rank(W) = 3 = r_max
    c = s.client_model(1, out)  # rank 2 < 3: the truncated SVD, error = the smallest singular value
    sv = torch.linalg.svdvals(expected)
    torch.testing.assert_close(torch.linalg.matrix_norm(expected - c[B] @ c[A]), sv[2])


def test_resume_redistributes_the_same_factors():
    g = {A: torch.zeros(2, 2), B: torch.zeros(2, 2)}
    s = _setup(g, [1, 2])
    out = s.aggregate(g, [ClientUpdate(0, 1, {A: torch.tensor([[1.0, 2.0]]), B: torch.tensor([[3.0], [4.0]])})])
    t = _setup(g, [1, 2])
    t.load_state_dict(s.state_dict())
    torch.testing.assert_close(t.client_model(0, out)[A], s.client_model(0, out)[A])
    assert t.client_ranks == [1, 2]
