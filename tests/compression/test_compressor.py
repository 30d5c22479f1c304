import pytest
import torch

from lightning_fed.compression import (
    RESIDUAL_PREFIX,
    BlockwiseQuantization,
    TopKSparsification,
    decode_update,
    encode_update,
)
from lightning_fed.privacy import ClientLevelDP, global_norm
from lightning_fed.strategies import ClientUpdate, FedAvg


def test_error_feedback_by_hand():
    comp = TopKSparsification(fraction=0.5)  # k = 1 of 2
    state = {}
    sent = []
    for delta in ([1.0, 0.6], [0.5, 0.2], [0.0, 0.3]):
        payload, nbytes, state = comp.compress({"w": torch.tensor(delta)}, state)
        sent.append(comp.decompress(payload)["w"])
        assert nbytes == 4 + 4 + 8
    # x1 = [1, .6] -> send [1, 0], e1 = [0, .6]; x2 = [.5, .8] -> [0, .8], e2 = [.5, 0];
    # x3 = [.5, .3] -> [.5, 0], e3 = [0, .3]
    torch.testing.assert_close(torch.stack(sent), torch.tensor([[1.0, 0.0], [0.0, 0.8], [0.5, 0.0]]))
    torch.testing.assert_close(state[RESIDUAL_PREFIX + "w"], torch.tensor([0.0, 0.3]))


@pytest.mark.parametrize("comp", [TopKSparsification(0.05), BlockwiseQuantization(4, 16, error_feedback=True)])
def test_error_feedback_telescopes(comp):
    """sum_t D(C(Delta_t + e_{t-1})) = sum_t Delta_t - e_T: nothing is lost but the last residual."""
    g = torch.Generator().manual_seed(1)
    state = {"other": torch.ones(1)}  # keys that are not residuals are kept
    total_sent = torch.zeros(10, 10)
    total_delta = torch.zeros(10, 10)
    for _ in range(20):
        delta = torch.randn(10, 10, generator=g)
        payload, _, state = comp.compress({"w": delta}, state)
        total_sent += comp.decompress(payload)["w"]
        total_delta += delta
    torch.testing.assert_close(total_sent, total_delta - state[RESIDUAL_PREFIX + "w"], atol=1e-4, rtol=0)
    assert state["other"].tolist() == [1.0]


def test_without_error_feedback_no_residual_is_kept():
    payload, nbytes, state = BlockwiseQuantization(8, 64).compress({"a.b": torch.ones(3, 2)}, {})
    assert state == {} and nbytes == 6 + 4 + 16
    assert set(payload) == {"a.b#codes", "a.b#scales", "a.b#shape"}


def test_encode_decode_round_trip_keeps_dtype_and_start():
    start = {"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16), "v": torch.zeros(3)}
    trained = {"w": torch.tensor([1.5, 1.0], dtype=torch.bfloat16), "v": torch.tensor([0.0, 0.0, 0.25])}
    comp = BlockwiseQuantization(8, 64)
    payload, _, memory = encode_update(trained, start, comp, {})
    out = decode_update(payload, start, comp)
    assert out["w"].dtype == torch.bfloat16 and memory == {}
    torch.testing.assert_close(out["w"], trained["w"])  # [0.5, -1.0]: both on the int8 grid of absmax 1
    torch.testing.assert_close(out["v"], trained["v"])
    with pytest.raises(ValueError, match="payload keys differ"):
        decode_update(payload, {"w": start["w"]}, comp)


def test_compress_then_clip_bounds_the_sum_clip_then_compress_does_not():
    """Why DP clips after decompression: int8 rounding can push a clipped update past C."""
    x = {"w": torch.zeros(2)}
    y = {"w": torch.tensor([1.0, 0.006])}
    c = global_norm(y)  # the update is exactly at the clip norm
    comp = BlockwiseQuantization(8, 64)
    payload, _, _ = encode_update(y, x, comp, {})
    received = decode_update(payload, x, comp)
    torch.testing.assert_close(received["w"], torch.tensor([1.0, 1 / 127]))  # 0.762 of a level rounds up
    assert global_norm(received) > c  # clip -> compress would exceed the sensitivity C
    dp = ClientLevelDP(FedAvg(), noise_multiplier=0.0, clip_norm=c, expected_clients=1)
    dp.setup(x, 1)
    out = dp.aggregate(x, [ClientUpdate(0, 1, received)])  # compress -> decompress -> clip (-> noise)
    assert global_norm(out) == pytest.approx(c, rel=1e-6)


def test_bad_settings_are_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"BlockwiseQuantization: bits must be one of \[4, 8\], got 3; block_size"):
        BlockwiseQuantization(bits=3, block_size=0)
    with pytest.raises(ValueError, match="`fraction` must be in"):
        TopKSparsification(fraction=1.5)
