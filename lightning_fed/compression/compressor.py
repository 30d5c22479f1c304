"""Compressed uploads: what a client sends instead of its full-precision update, and back.

A compressor turns a client's *update* (the change of the shared state over its local
training, ``Delta = y_k - x``, named tensors) into a *payload* of plain named tensors (codes,
scales, positions, shapes; nothing pickled, so it travels as Flower ``ArrayRecord``s) and
counts its bytes exactly; the server turns the payload back into an update of the same keys
and shapes. Compressing the change rather than the weights keeps the quantization step small
(a change is much smaller than the weights it moves) and makes error feedback meaningful.

**Error feedback** (Stich et al., 2018, arXiv:1809.07599; Karimireddy et al., 2019,
arXiv:1901.09847): what a round's compression dropped, ``e_t = (Delta_t + e_{t-1}) - D(C(Delta_t +
e_{t-1}))``, is kept by the client (its client state, never sent) and added before the next
compression, so that nothing is lost for good: over T rounds the server receives
``sum_t Delta_t - e_T`` (a telescoping sum), off by only the last residual.

**Where the loop calls it.** Client side, after local training and before the upload:
:func:`encode_update` ``(trained, start, compressor, memory)`` where ``start`` is the state
the client began from (``Strategy.client_model``) and ``memory`` its persistent client state;
the returned ``nbytes`` is what ``comm/up_bytes`` reports. Server side, on receipt and
*before* :func:`~lightning_fed.strategies.check_update` and ``Strategy.aggregate``:
:func:`decode_update` ``(payload, start, compressor)`` gives back ``y_k`` for the strategy.
So compression composes with every strategy: the strategy sees an ordinary state.

**Order with client-level DP: compress -> (decompress) -> clip -> noise.** Clipping must bound
what actually enters the noised sum, and that is the *decompressed* update: quantization can
round a clipped vector's values up (``[1.0, 0.006]`` of norm ``C`` comes back as
``[1.0, 1/127]``, norm > ``C``), and with error feedback the sent vector carries earlier
rounds' residuals, whose norm the current round's clip does not bound. Clipping first on the
client (clip -> compress -> noise) would therefore break the sensitivity bound the accountant
assumes. :class:`~lightning_fed.privacy.ClientLevelDP` clips inside ``aggregate``, i.e. after
:func:`decode_update`, so the order here is the right one and the accounting is unchanged.
Noise added by the server to the sum never passes through a compressor. (If noise were ever
added on the client, compressing the noised vector would be post-processing and free; but the
error-feedback residual would then hold noised values: also post-processing.)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from torch import Tensor

from lightning_fed.compression.quantization import LEVELS, dequantize_blockwise, quantize_blockwise
from lightning_fed.compression.sparsification import densify, topk_count, topk_sparsify
from lightning_fed.state import StateDict, compute_dtype, state_nbytes

#: Client-state key prefix of the error-feedback residuals (one per parameter name).
RESIDUAL_PREFIX = "compression/residual/"
#: Separates a parameter's name from its payload part (``"w#codes"``); never in a parameter name.
PART_SEP = "#"


class UpdateCompressor(ABC):
    """Compress an update (named tensors) into a payload, with optional error feedback.

    Args:
        error_feedback: Keep what compression dropped in the client state and add it before
            the next compression.
    """

    def __init__(self, error_feedback: bool = False) -> None:
        self.error_feedback = bool(error_feedback)

    @abstractmethod
    def encode(self, x: Tensor) -> StateDict:
        """The payload parts of one tensor."""

    @abstractmethod
    def decode(self, parts: StateDict) -> Tensor:
        """The float32 tensor that :meth:`encode` coded in ``parts``."""

    def compress(self, update: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> tuple[StateDict, int, StateDict]:
        """Compress ``update`` (client side).

        Args:
            update: The update to send, keyed by parameter name.
            state: The client's compression state (error-feedback residuals under
                :data:`RESIDUAL_PREFIX`; other keys are kept untouched). Not modified.

        Returns:
            ``(payload, nbytes, state)``: the named tensors to send, their exact byte count,
            and the client's next compression state.
        """
        payload: StateDict = {}
        new_state: StateDict = dict(state)
        for name, delta in update.items():
            if PART_SEP in name:
                raise ValueError(f"parameter name {name!r} contains {PART_SEP!r}, which separates payload parts")
            x = delta.detach().to(compute_dtype(delta.dtype))
            residual = state.get(RESIDUAL_PREFIX + name)
            if self.error_feedback and residual is not None and residual.shape == x.shape:
                x = x + residual  # e_{t-1} added before compressing
            parts = self.encode(x)
            payload.update({f"{name}{PART_SEP}{part}": t for part, t in parts.items()})
            if self.error_feedback:
                new_state[RESIDUAL_PREFIX + name] = x - self.decode(parts).to(x.dtype)  # e_t
        return payload, state_nbytes(payload), new_state

    def decompress(self, payload: Mapping[str, Tensor]) -> StateDict:
        """The update coded in ``payload`` (server side), float32, keyed by parameter name."""
        grouped: dict[str, StateDict] = {}
        for key, t in payload.items():
            name, sep, part = key.rpartition(PART_SEP)
            if not sep:
                raise ValueError(f"payload key {key!r} has no {PART_SEP!r}<part> suffix")
            grouped.setdefault(name, {})[part] = t
        return {name: self.decode(parts) for name, parts in grouped.items()}


class BlockwiseQuantization(UpdateCompressor):
    """Absmax int8 or 4-bit codes per block (see :mod:`~lightning_fed.compression.quantization`).

    Args:
        bits: 8 or 4.
        block_size: Values per block, each with its own float32 scale.
        error_feedback: Carry the rounding error to the next round.
    """

    def __init__(self, bits: int = 8, block_size: int = 64, error_feedback: bool = False) -> None:
        problems = []
        if bits not in LEVELS:
            problems.append(f"bits must be one of {sorted(LEVELS)}, got {bits!r}")
        if not (isinstance(block_size, int) and block_size >= 1):
            problems.append(f"block_size must be an integer >= 1, got {block_size!r}")
        if problems:
            raise ValueError("BlockwiseQuantization: " + "; ".join(problems))
        super().__init__(error_feedback)
        self.bits, self.block_size = bits, block_size

    def encode(self, x: Tensor) -> StateDict:
        return quantize_blockwise(x, self.bits, self.block_size)

    def decode(self, parts: StateDict) -> Tensor:
        return dequantize_blockwise(parts, self.bits, self.block_size)


class TopKSparsification(UpdateCompressor):
    """The ``fraction`` largest-magnitude values of each tensor (see :mod:`~lightning_fed.compression.sparsification`).

    Args:
        fraction: Share of each tensor's values sent, in ``(0, 1]`` (``0.01`` = top-1%).
        error_feedback: Carry the values not sent to the next round (on by default: top-k
            without it drops most of every update for good).
    """

    def __init__(self, fraction: float = 0.01, error_feedback: bool = True) -> None:
        topk_count(1, fraction)  # validates the fraction
        super().__init__(error_feedback)
        self.fraction = float(fraction)

    def encode(self, x: Tensor) -> StateDict:
        return topk_sparsify(x, self.fraction)

    def decode(self, parts: StateDict) -> Tensor:
        return densify(parts)


def update_delta(trained: Mapping[str, Tensor], start: Mapping[str, Tensor]) -> StateDict:
    """``Delta = y - x`` per key, in float32 or wider."""
    missing = sorted(set(trained) ^ set(start))
    if missing:
        raise ValueError(f"trained and start states differ in keys {missing[:5]}")
    return {
        k: y.detach().to(compute_dtype(y.dtype)) - start[k].to(compute_dtype(start[k].dtype))
        for k, y in trained.items()
    }


def encode_update(
    trained: Mapping[str, Tensor],
    start: Mapping[str, Tensor],
    compressor: UpdateCompressor,
    memory: Mapping[str, Tensor],
) -> tuple[StateDict, int, StateDict]:
    """Client side: compress ``trained - start``; returns ``(payload, nbytes, memory)``."""
    return compressor.compress(update_delta(trained, start), memory)


def decode_update(
    payload: Mapping[str, Tensor], start: Mapping[str, Tensor], compressor: UpdateCompressor
) -> StateDict:
    """Server side: ``start + D(payload)``, each key in ``start``'s dtype (what the strategy aggregates).

    Raises:
        ValueError: If the payload's keys or shapes are not ``start``'s (a corrupt or foreign
            payload is refused before it reaches the strategy).
    """
    delta = compressor.decompress(payload)
    if set(delta) != set(start):
        raise ValueError(f"payload keys differ from the client's model: {sorted(set(delta) ^ set(start))[:5]}")
    out: StateDict = {}
    for k, x in start.items():
        if delta[k].shape != x.shape:
            raise ValueError(f"payload {k}: shape {tuple(delta[k].shape)} != {tuple(x.shape)}")
        out[k] = (x.to(compute_dtype(x.dtype)) + delta[k]).to(x.dtype)
    return out
