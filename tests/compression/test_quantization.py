import pytest
import torch

from lightning_fed.compression import dequantize_blockwise, quantize_blockwise, quantized_nbytes
from lightning_fed.state import state_nbytes


def test_int8_codes_and_values_by_hand():
    x = torch.tensor([0.5, -1.0, 0.25, 0.0])
    parts = quantize_blockwise(x, bits=8, block_size=2)
    # block [0.5, -1.0]: absmax 1, 0.5 * 127 = 63.5 rounds (half to even) to 64; block [0.25, 0]: absmax 0.25
    assert parts["codes"].tolist() == [64, -127, 127, 0] and parts["codes"].dtype == torch.int8
    torch.testing.assert_close(parts["scales"], torch.tensor([1.0, 0.25]))
    out = dequantize_blockwise(parts, bits=8, block_size=2)
    torch.testing.assert_close(out, torch.tensor([64 / 127, -1.0, 0.25, 0.0]))
    # 0.5 sits exactly half a level from the grid: the bound 1/127/2 is reached, not exceeded
    assert abs(float(out[0]) - 0.5) == pytest.approx(1 / 127 / 2)


def test_4bit_packing_by_hand():
    x = torch.tensor([0.3, -0.6, 0.1])
    parts = quantize_blockwise(x, bits=4, block_size=4)
    # absmax 0.6: codes round(3.5) = 4, -7, round(1.17) = 1 -> nibbles (+8) 12, 1, 9
    # bytes: 12 | 1 << 4 = 28, then 9 with an empty high nibble
    assert parts["codes"].tolist() == [28, 9] and parts["codes"].dtype == torch.uint8
    out = dequantize_blockwise(parts, bits=4, block_size=4)
    torch.testing.assert_close(out, torch.tensor([4 * 0.6 / 7, -0.6, 0.6 / 7]))
    assert state_nbytes(parts) == 2 + 4 + 8 == quantized_nbytes(3, 1, 4, 4)


@pytest.mark.parametrize(("bits", "levels"), [(8, 127), (4, 7)])
def test_error_at_most_half_a_level_per_block(bits, levels):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 151, generator=g) * torch.logspace(-3, 1, 7)[:, None]  # blocks of very different scales
    out = dequantize_blockwise(quantize_blockwise(x, bits, 64), bits, 64)
    assert out.shape == x.shape
    flat_x = torch.nn.functional.pad(x.reshape(-1), (0, -x.numel() % 64)).reshape(-1, 64)
    flat_err = torch.nn.functional.pad((out - x).reshape(-1), (0, -x.numel() % 64)).reshape(-1, 64)
    bound = flat_x.abs().amax(1) / levels / 2
    assert bool((flat_err.abs().amax(1) <= bound * (1 + 1e-5)).all())
    # each block's absmax comes back exactly (code +-L)
    torch.testing.assert_close(out.abs().reshape(-1).max(), x.abs().max())


def test_byte_counts_exact():
    x = torch.randn(3, 50)  # 150 values, 3 blocks of 64, 2 dimensions
    assert state_nbytes(quantize_blockwise(x, 8, 64)) == 150 + 3 * 4 + 2 * 8 == 178
    assert state_nbytes(quantize_blockwise(x, 4, 64)) == 75 + 3 * 4 + 2 * 8 == 103
    assert quantized_nbytes(150, 2, 8, 64) == 178 and quantized_nbytes(150, 2, 4, 64) == 103


def test_zero_block_and_empty_tensor():
    out = dequantize_blockwise(quantize_blockwise(torch.zeros(5), 4, 2), 4, 2)
    assert out.tolist() == [0.0] * 5
    assert dequantize_blockwise(quantize_blockwise(torch.zeros(0, 3), 8, 4), 8, 4).shape == (0, 3)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="`bits` must be one of"):
        quantize_blockwise(torch.ones(2), bits=2)
    with pytest.raises(ValueError, match="non-finite"):
        quantize_blockwise(torch.tensor([1.0, float("nan")]))
