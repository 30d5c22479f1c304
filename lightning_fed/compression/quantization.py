"""Blockwise absmax quantization of an update: int8 and 4-bit codes, one float32 scale per block.

The flattened tensor is cut into blocks of ``block_size`` values; each block is scaled by its
own absolute maximum ``a`` and rounded to ``L`` signed levels, ``q = round(x / a * L)`` with
``L = 127`` (int8) or ``L = 7`` (4-bit), and dequantized as ``q * a / L``. This is the
"blockwise" scheme of bitsandbytes' 8-bit quantizer (Dettmers et al., 2022, arXiv:2110.02861)
that NVFlare's message quantization filters call; here the 4-bit variant is the same linear
absmax rule with 15 levels (bitsandbytes' FP4/NF4 use non-uniform code books instead), so both
have the same error bound: every value is within ``a / L / 2`` of its original (half a level),
and a block's absmax is reproduced exactly (``q = +-L``).

What travels per tensor of ``n`` values in ``ceil(n / block_size)`` blocks: the codes (``n``
bytes for int8; two 4-bit codes per byte, ``ceil(n / 2)`` bytes), the float32 scales (4 bytes a
block) and the shape (8 bytes a dimension), all as plain named tensors (no pickling).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fed.state import StateDict

#: Signed levels on each side of zero, per bit width.
LEVELS = {8: 127, 4: 7}
CODES, SCALES, SHAPE = "codes", "scales", "shape"


def _blocks(x: Tensor, block_size: int) -> Tensor:
    """``x`` flattened in float32, zero-padded to whole blocks, as ``(num_blocks, block_size)``."""
    flat = x.detach().reshape(-1).to(torch.float32)
    pad = -flat.numel() % block_size
    return torch.nn.functional.pad(flat, (0, pad)).reshape(-1, block_size)


def quantize_blockwise(x: Tensor, bits: int = 8, block_size: int = 64) -> StateDict:
    """Quantize ``x`` to ``bits``-bit absmax codes per block of ``block_size`` values.

    Args:
        x: A finite floating-point tensor (any shape; an empty one gives empty codes).
        bits: 8 (codes in ``[-127, 127]``, one int8 each) or 4 (``[-7, 7]``, two per uint8).
        block_size: Values per block (each block has its own scale).

    Returns:
        ``{"codes": ..., "scales": float32 (num_blocks,), "shape": int64 (x.ndim,)}``.

    Raises:
        ValueError: On a bit width other than 4 or 8, a block size < 1 or a non-finite ``x``.
    """
    if bits not in LEVELS:
        raise ValueError(f"`bits` must be one of {sorted(LEVELS)}, got {bits!r}")
    if block_size < 1:
        raise ValueError(f"`block_size` must be >= 1, got {block_size!r}")
    if not torch.isfinite(x).all():
        raise ValueError("cannot quantize non-finite values")
    levels = LEVELS[bits]
    blocks = _blocks(x, block_size)
    scales = blocks.abs().amax(dim=1)
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))  # an all-zero block codes to zeros
    q = torch.round(blocks / safe[:, None] * levels).reshape(-1)[: x.numel()]
    if bits == 8:
        codes = q.to(torch.int8)
    else:
        nibbles = (q + 8).to(torch.uint8)  # [-7, 7] -> [1, 15]; 0 is never used
        if nibbles.numel() % 2:
            nibbles = torch.cat([nibbles, torch.zeros(1, dtype=torch.uint8)])
        codes = nibbles[0::2] | (nibbles[1::2] << 4)  # low nibble first
    return {CODES: codes, SCALES: scales, SHAPE: torch.tensor(list(x.shape), dtype=torch.int64)}


def dequantize_blockwise(parts: StateDict, bits: int = 8, block_size: int = 64) -> Tensor:
    """The float32 tensor ``q * a / L`` that :func:`quantize_blockwise` coded in ``parts``."""
    if bits not in LEVELS:
        raise ValueError(f"`bits` must be one of {sorted(LEVELS)}, got {bits!r}")
    shape = [int(s) for s in parts[SHAPE].tolist()]
    n = math.prod(shape)
    codes = parts[CODES]
    if bits == 8:
        q = codes.to(torch.float32)
    else:
        nibbles = torch.stack([codes & 0x0F, codes >> 4], dim=1).reshape(-1)[:n]
        q = nibbles.to(torch.float32) - 8
    q = torch.nn.functional.pad(q, (0, -n % block_size)).reshape(-1, block_size)
    values = q * (parts[SCALES].to(torch.float32)[:, None] / LEVELS[bits])
    return values.reshape(-1)[:n].reshape(shape)


def quantized_nbytes(numel: int, ndim: int, bits: int, block_size: int) -> int:
    """Bytes :func:`quantize_blockwise` sends for a tensor of ``numel`` values and ``ndim`` dimensions."""
    code_bytes = numel if bits == 8 else -(-numel // 2)
    return code_bytes + 4 * -(-numel // block_size) + 8 * ndim
