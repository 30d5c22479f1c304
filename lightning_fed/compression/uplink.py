"""Compressed uploads in the round: the ``federation.compression`` spec, and the two calls the
transports make (client: :func:`compress_client_update`; server: :func:`decompress_client_update`).

Both transports go through :class:`~lightning_fed.federation.turn.ClientTurn` (client side) and
:class:`~lightning_fed.federation.server_round.ServerRound` (server side), which call these two
functions, so a compressed run is the same in process and under Flower:

* the client encodes its change ``y_k - x`` (``x`` = the start state it received) into a payload
  of named tensors; :attr:`ClientUpdate.state` *is* that payload, so what the transports count
  (``comm/up_bytes``) and carry (Flower ``ArrayRecord``) is the compressed update;
* the error-feedback residuals are client memory (``compression/residual/<name>``): kept by the
  client's state store, checkpointed with it, never sent;
* the server decodes ``x + D(payload)`` against the start state it sent that client, *before*
  :func:`~lightning_fed.strategies.check_update`, the norm screen and the strategy (so client-level
  DP clips the decoded update: see :mod:`lightning_fed.compression.compressor`). A payload that does
  not decode to the start state's keys and shapes is rejected like a malformed update.

Spec grammar (``federation.compression``): ``int8`` / ``int4`` (blockwise absmax, 64 values a
block), with ``+ef`` for error feedback (``int8+ef``); ``topk:<fraction>`` (error feedback on),
``topk:<fraction>-noef`` (off). ``None`` (the default) sends full precision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from torch import Tensor

from lightning_fed.compression.compressor import (
    BlockwiseQuantization,
    TopKSparsification,
    UpdateCompressor,
    decode_update,
    encode_update,
)
from lightning_fed.run_options import (
    COMPRESSION_EXAMPLES,
    COMPRESSION_FIELD,
    compression_problems,
    parse_compression,
)
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import AggregationError, ClientUpdate

SPEC_FIELD = COMPRESSION_FIELD
EXAMPLES = COMPRESSION_EXAMPLES


def compressor_from_spec(spec: str | None) -> UpdateCompressor | None:
    """The compressor named by ``spec`` (``None``: no compression).

    Raises:
        ValueError: One line naming :data:`SPEC_FIELD` and the value.
    """
    parsed = parse_compression(spec)  # the spec's grammar, checked without torch (lightning_fed/run_options.py)
    if parsed is None:
        return None
    kind, amount, ef = parsed
    if kind == "quantize":
        return BlockwiseQuantization(bits=int(amount), error_feedback=ef)
    return TopKSparsification(fraction=amount, error_feedback=ef)


spec_problems = compression_problems
"""``[]`` if a spec names a compressor (or is ``None``), else its one-line error."""


def compress_client_update(
    update: ClientUpdate, start: Mapping[str, Tensor], compressor: UpdateCompressor, memory: Mapping[str, Tensor]
) -> tuple[ClientUpdate, StateDict]:
    """Client side: ``update`` with its state replaced by the payload of ``state - start``, and the
    client's next memory (residuals updated when error feedback is on). ``extras`` travel as they are."""
    payload, _, new_memory = encode_update(update.state, start, compressor, memory)
    return dataclasses.replace(update, state=payload), new_memory


def decompress_client_update(
    update: ClientUpdate, start: Mapping[str, Tensor], compressor: UpdateCompressor
) -> ClientUpdate:
    """Server side: ``update`` with its payload decoded to ``start + D(payload)``.

    Raises:
        AggregationError: If the payload does not decode to ``start``'s keys and shapes.
    """
    try:
        state = decode_update(update.state, start, compressor)
    except (ValueError, RuntimeError, KeyError) as err:
        raise AggregationError(f"compressed update does not decode: {err}") from None
    return dataclasses.replace(update, state=state)
