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
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import AggregationError, ClientUpdate

SPEC_FIELD = "federation.compression"
QUANTIZED = {"int8": 8, "int4": 4}
EXAMPLES = "int8, int8+ef, int4, int4+ef, topk:<fraction> or topk:<fraction>-noef"


def compressor_from_spec(spec: str | None) -> UpdateCompressor | None:
    """The compressor named by ``spec`` (``None``: no compression).

    Raises:
        ValueError: One line naming :data:`SPEC_FIELD` and the value.
    """
    if spec is None:
        return None
    text = str(spec).strip()
    base, ef = (text[: -len("+ef")], True) if text.endswith("+ef") else (text, False)
    if base in QUANTIZED:
        return BlockwiseQuantization(bits=QUANTIZED[base], error_feedback=ef)
    if text.startswith("topk:"):
        value, ef = (text[5 : -len("-noef")], False) if text.endswith("-noef") else (text[5:], True)
        try:
            fraction = float(value)
        except ValueError:
            fraction = float("nan")
        if 0.0 < fraction <= 1.0:
            return TopKSparsification(fraction=fraction, error_feedback=ef)
        raise ValueError(f"{SPEC_FIELD}: the top-k fraction must be in (0, 1], got {spec!r}")
    raise ValueError(f"{SPEC_FIELD} must be one of {EXAMPLES}, got {spec!r}")


def spec_problems(spec: str | None) -> list[str]:
    """``[]`` if ``spec`` names a compressor (or is ``None``), else its one-line error."""
    try:
        compressor_from_spec(spec)
    except ValueError as err:
        return [str(err)]
    return []


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
