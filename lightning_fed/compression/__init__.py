"""Compressed client updates: blockwise int8/4-bit quantization and top-k sparsification,
each with optional error feedback. See :mod:`lightning_fed.compression.compressor` for where the
loop calls them and how they compose with differential privacy.
"""

from lightning_fed.compression.compressor import (
    RESIDUAL_PREFIX,
    BlockwiseQuantization,
    TopKSparsification,
    UpdateCompressor,
    decode_update,
    encode_update,
    update_delta,
)
from lightning_fed.compression.quantization import dequantize_blockwise, quantize_blockwise, quantized_nbytes
from lightning_fed.compression.sparsification import densify, sparse_nbytes, topk_count, topk_sparsify

__all__ = [
    "RESIDUAL_PREFIX",
    "BlockwiseQuantization",
    "TopKSparsification",
    "UpdateCompressor",
    "decode_update",
    "densify",
    "dequantize_blockwise",
    "encode_update",
    "quantize_blockwise",
    "quantized_nbytes",
    "sparse_nbytes",
    "topk_count",
    "topk_sparsify",
    "update_delta",
]
