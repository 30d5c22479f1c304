import pytest
import torch

from lightning_fed.compression import densify, sparse_nbytes, topk_count, topk_sparsify
from lightning_fed.state import state_nbytes


def test_topk_by_hand_ties_go_to_the_lower_position():
    x = torch.tensor([[0.5, -0.5], [0.5, 0.1]])
    parts = topk_sparsify(x, 0.5)  # k = 2 of 4; three values tie at 0.5: positions 0 and 1 win
    assert parts["indices"].tolist() == [0, 1] and parts["indices"].dtype == torch.int32
    torch.testing.assert_close(parts["values"], torch.tensor([0.5, -0.5]))
    torch.testing.assert_close(densify(parts), torch.tensor([[0.5, -0.5], [0.0, 0.0]]))
    assert state_nbytes(parts) == 2 * 4 + 2 * 4 + 2 * 8 == sparse_nbytes(4, 2, 0.5)


def test_k_is_at_least_one_and_at_most_n():
    assert topk_count(1000, 0.01) == 10
    assert topk_count(1001, 0.01) == 11  # ceil
    assert topk_count(5, 0.01) == 1
    assert topk_count(0, 0.5) == 0
    with pytest.raises(ValueError, match="`fraction` must be in"):
        topk_count(10, 0.0)


def test_top1_percent_bytes_against_float32():
    x = torch.randn(64, 64)  # 4096 values -> k = 41
    parts = topk_sparsify(x, 0.01)
    assert state_nbytes(parts) == 41 * 8 + 16  # vs 16384 bytes in float32
    kept = densify(parts)
    assert int((kept != 0).sum()) == 41
    assert float(kept.abs()[kept != 0].min()) >= float(x.abs().flatten().sort(descending=True).values[40])
