import pytest
import torch

from lightning_fed.strategies.lora_factors import lora_pairs, pad_rank, state_rank, svd_factors, truncate_rank

A, B = "m.lora_A.default.weight", "m.lora_B.default.weight"


def test_pairs_rank_truncate_and_pad_by_hand():
    state = {A: torch.tensor([[1.0, 2.0], [3.0, 4.0]]), B: torch.tensor([[5.0, 6.0], [7.0, 8.0]]), "h": torch.ones(1)}
    assert lora_pairs(state) == {"m": (A, B)} and state_rank(state) == 2
    cut = truncate_rank(state, 1)
    assert cut[A].tolist() == [[1.0, 2.0]] and cut[B].tolist() == [[5.0], [7.0]] and cut["h"] is state["h"]
    padded = pad_rank(cut, 3)
    assert padded[A].tolist() == [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    assert padded[B].tolist() == [[5.0, 0.0, 0.0], [7.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="has no partner"):
        lora_pairs({A: torch.ones(1, 2)})
    with pytest.raises(ValueError, match="cannot truncate"):
        truncate_rank(cut, 2)


def test_svd_factors_recover_a_low_rank_product_exactly():
    w = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    a, b = svd_factors(w, 2)
    torch.testing.assert_close(b @ a, w)
    a1, b1 = svd_factors(w, 1)  # best rank-1 approximation keeps the singular value 2
    torch.testing.assert_close(b1 @ a1, torch.tensor([[0.0, 0.0], [0.0, 2.0]]))
    a3, b3 = svd_factors(w, 3)  # more rank than the matrix has: zero components
    assert a3.shape == (3, 2) and b3.shape == (2, 3) and a3[2].tolist() == [0.0, 0.0]
    torch.testing.assert_close(b3 @ a3, w)
