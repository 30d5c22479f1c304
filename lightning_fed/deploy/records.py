"""What travels between a Flower ServerApp and ClientApp: named tensors and scalars only.

A :class:`~lightning_fed.strategies.ClientUpdate` becomes a ``RecordDict`` of two
``ArrayRecord`` (``state``: the shared parameters, ``extras``: e.g. SCAFFOLD's control delta)
and one ``MetricRecord`` (``num-examples``, ``client-id`` and the training metrics). Nothing is
pickled: a client can only send arrays and numbers, which the server checks like any update.

A reply is untrusted input. :func:`record_to_update` and :func:`record_to_evaluation` turn every
way a reply can be malformed into a ``ValueError`` (one line, naming the field and value), never
a crash of the ServerApp: arrays must be NumPy-serialised floating-point tensors, metrics finite
scalars, ``num-examples`` an integer within :attr:`ReplyLimits.max_examples` (FedAvg weights by
it) and the metric keys at most :attr:`ReplyLimits.max_metric_keys`.

A round hook's query, reply or instruction (a :data:`~lightning_fed.federation.hooks.Payload`)
travels as an ``ArrayRecord`` of its tensors (any numeric dtype) and a ``ConfigRecord`` of its
scalars, strings and lists, under ``<prefix>.arrays`` / ``<prefix>.config``
(:func:`payload_records`, :func:`record_to_payload`). Instructions ride in the train message,
one prefix per hook index (``instruction.<i>``).

Every message the server sends in a round carries the round and a fresh random ``nonce`` in its
``config`` record; a client's reply echoes them in a ``reply`` ConfigRecord
(:func:`reply_binding`). The server accepts a reply only when the echo names the round and the
nonce of the message it sent that client (:func:`check_binding`), so a reply recorded in one
round and replayed in another (or to another message) is refused.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from lightning_fed.federation.hooks import Payload
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import ClientUpdate

STATE, EXTRAS, DOWNLINK, METRICS, CONFIG = "state", "extras", "downlink", "metrics", "config"
PAYLOAD, INSTRUCTION, REPLY = "payload", "instruction", "reply"


@dataclass(frozen=True)
class ReplyLimits:
    """What the server accepts in a client's reply (run-config ``max-examples``, ``max-metric-keys``)."""

    max_examples: int = 1_000_000
    """Largest ``num-examples`` a client may claim. FedAvg weights an update by it, so an
    unbounded claim lets one client outweigh the federation."""

    max_metric_keys: int = 64
    """Most metric entries in one reply (``num-examples`` and ``client-id`` included); each
    one becomes a logged scalar and a ``summary.json`` entry every round."""

    max_key_length: int = 128
    """Longest metric name, in characters."""

    def __post_init__(self) -> None:
        for name in ("max_examples", "max_metric_keys", "max_key_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be an integer >= 1, got {value!r}")


def to_arrays(state: Mapping[str, torch.Tensor]) -> ArrayRecord:
    """An ``ArrayRecord`` of the named tensors (copied to CPU, contiguous)."""
    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def from_arrays(record: ArrayRecord | None) -> StateDict:
    """The named tensors of an ``ArrayRecord`` (an empty dict for ``None``)."""
    if record is None or len(record) == 0:
        return {}
    return dict(record.to_torch_state_dict())


def train_instruction(
    round_idx: int,
    client_id: int,
    state: StateDict,
    downlink: StateDict,
    instructions: Mapping[int, Payload] | None = None,
    nonce: str = "",
) -> RecordDict:
    """The server's message to a client: train ``client_id`` in ``round_idx`` from ``state``,
    with each round hook's instruction (by hook index) for its ``prepare_client``; the reply
    must echo ``nonce`` (:func:`check_binding`)."""
    records = {
        STATE: to_arrays(state),
        DOWNLINK: to_arrays(downlink),
        CONFIG: ConfigRecord({"round": round_idx, "client-id": client_id, "nonce": nonce}),
    }
    for index, payload in (instructions or {}).items():
        records.update(payload_records(payload, f"{INSTRUCTION}.{int(index)}"))
    return RecordDict(records)


INSTRUCTION_LIMITS = ReplyLimits(max_metric_keys=100_000, max_key_length=1024)
"""Bounds on a hook instruction a client reads: it comes from the server, like the state the
client loads (e.g. FedBiOT's emulator, one entry per tensor of the emulator's layers)."""


def new_nonce() -> str:
    """A fresh, unguessable message nonce (bound into the reply; never seeds anything)."""
    return secrets.token_hex(16)


def reply_binding(request: RecordDict) -> ConfigRecord:
    """Client side: what a reply to ``request`` echoes (its round, client and nonce)."""
    config = request.config_records.get(CONFIG)
    if config is None:
        return ConfigRecord({})
    return ConfigRecord({k: config[k] for k in ("round", "client-id", "nonce") if k in config})


def check_binding(record: RecordDict, round_idx: int, client_id: int, nonce: str) -> None:
    """``ValueError`` (one line) unless ``record`` echoes round ``round_idx``, ``client_id`` and
    ``nonce``: the reply answers the message the server sent that client in this round."""
    echo = record.config_records.get(REPLY)
    if echo is None:
        raise ValueError(f"the reply carries no {REPLY!r} record binding it to round {round_idx + 1}'s message")
    got = (echo.get("round"), echo.get("client-id"), echo.get("nonce"))
    if got[0] != round_idx or got[1] != client_id or got[2] != nonce:
        replayed = isinstance(got[0], int) and not isinstance(got[0], bool) and got[0] != round_idx
        what = f"it answers round {got[0] + 1}" if replayed else "its round, client-id or nonce do not match"
        raise ValueError(f"the reply is not bound to round {round_idx + 1}'s message to client {client_id}: {what}")


def record_to_instructions(record: RecordDict, limits: ReplyLimits = INSTRUCTION_LIMITS) -> dict[int, Payload]:
    """The hooks' instructions in a train message, by hook index (``{}`` if none)."""
    indices = {
        key.split(".")[1]
        for key in record.keys()
        if key.startswith(f"{INSTRUCTION}.") and key.endswith(".config") and key.count(".") == 2
    }
    return {int(i): record_to_payload(record, f"{INSTRUCTION}.{i}", limits) for i in sorted(indices) if i.isdigit()}


def payload_records(payload: Mapping[str, Any], prefix: str) -> dict[str, ArrayRecord | ConfigRecord]:
    """A hook payload as ``{<prefix>.arrays: tensors, <prefix>.config: everything else}``."""
    arrays = {k: v for k, v in payload.items() if torch.is_tensor(v)}
    config = {k: v for k, v in payload.items() if not torch.is_tensor(v)}
    out: dict[str, ArrayRecord | ConfigRecord] = {f"{prefix}.config": ConfigRecord(config)}
    if arrays:
        out[f"{prefix}.arrays"] = to_arrays(arrays)
    return out


def record_to_payload(record: RecordDict, prefix: str = PAYLOAD, limits: ReplyLimits | None = None) -> Payload:
    """The hook payload under ``prefix`` in ``record``; ``ValueError`` (one line) if malformed.

    At most ``limits.max_metric_keys`` entries, names of at most ``max_key_length`` characters;
    arrays are decoded by NumPy without pickle and must be numeric (bool, integer or floating
    point); the rest must be ``int``, ``float``, ``str``, ``bool`` or a list of numbers.
    """
    limits = limits or ReplyLimits()
    config = record.config_records.get(f"{prefix}.config")
    if config is None:
        raise ValueError(f"a hook payload needs the ConfigRecord {prefix + '.config'!r}, got {list(record.keys())}")
    arrays = record.array_records.get(f"{prefix}.arrays")
    names = [*config.keys(), *(arrays.keys() if arrays is not None else [])]
    if len(names) > limits.max_metric_keys:
        raise ValueError(f"{prefix}: {len(names)} entries, more than max-metric-keys={limits.max_metric_keys}")
    if len(set(names)) != len(names):
        raise ValueError(f"{prefix}: a name is both an array and a config value: {sorted(names)[:10]}")
    out: Payload = {}
    for key in names:
        if len(key) > limits.max_key_length:
            raise ValueError(f"{prefix}: a name of {len(key)} characters is longer than {limits.max_key_length}")
    for key, value in config.items():
        if isinstance(value, list):
            if not all(isinstance(v, (int, float)) for v in value):
                raise ValueError(f"{prefix} value {key!r} must be a list of numbers, got {str(value)[:60]}")
        elif not isinstance(value, (int, float, str, bool)):
            raise ValueError(f"{prefix} value {key!r} has an unsupported type {type(value).__name__}")
        out[key] = value
    for key in arrays.keys() if arrays is not None else []:
        try:
            tensor = torch.from_numpy(arrays[key].numpy())
        except (TypeError, ValueError, OSError, EOFError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"{prefix} array {key!r} cannot be decoded: {reason}") from None
        if tensor.is_complex():
            raise ValueError(f"{prefix} array {key!r} must be real-valued, got {tensor.dtype}")
        out[key] = tensor
    return out


def update_to_record(update: ClientUpdate, answers: RecordDict | None = None) -> RecordDict:
    """A client's reply: its :class:`ClientUpdate` as arrays and scalars, bound to the train
    message it ``answers`` (:func:`reply_binding`)."""
    metrics = {"num-examples": update.num_examples, "client-id": update.client_id}
    metrics.update({k: float(v) for k, v in update.metrics.items()})
    records = {STATE: to_arrays(update.state), EXTRAS: to_arrays(update.extras), METRICS: MetricRecord(metrics)}
    if answers is not None:
        records[REPLY] = reply_binding(answers)
    return RecordDict(records)


def record_to_update(record: RecordDict, limits: ReplyLimits | None = None, compressed: bool = False) -> ClientUpdate:
    """Rebuild a :class:`ClientUpdate` from a train reply; a malformed reply raises ``ValueError``.

    ``compressed``: the state is a compressed payload (``federation.compression``), whose codes,
    positions and shapes are integer arrays; the server decodes it (``ServerRound.receive``).
    """
    limits = limits or ReplyLimits()
    if STATE not in record.array_records or METRICS not in record.metric_records:
        raise ValueError(
            f"a client reply needs the ArrayRecord {STATE!r} and the MetricRecord {METRICS!r},"
            f" got {list(record.keys())}"
        )
    metrics = _scalar_metrics(record.metric_records[METRICS], limits)
    num_examples, client_id = metrics.pop("num-examples", None), metrics.pop("client-id", None)
    _check_count("num-examples", num_examples, 1, limits.max_examples)
    _check_count("client-id", client_id, 0, None)
    return ClientUpdate(
        client_id=client_id,
        num_examples=num_examples,
        state=_float_arrays(record.array_records[STATE], STATE, allow_int=compressed),
        extras=_float_arrays(record.array_records.get(EXTRAS), EXTRAS),
        metrics={k: float(v) for k, v in metrics.items()},
    )


def record_to_evaluation(record: RecordDict, limits: ReplyLimits | None = None) -> tuple[int, int, dict[str, float]]:
    """``(client_id, num_examples, metric means)`` of an evaluate reply; ``ValueError`` if malformed.

    ``num-examples`` may be 0 (a client without validation data sends no metrics).
    """
    limits = limits or ReplyLimits()
    if METRICS not in record.metric_records:
        raise ValueError(f"an evaluate reply needs the MetricRecord {METRICS!r}, got {list(record.keys())}")
    metrics = _scalar_metrics(record.metric_records[METRICS], limits)
    num_examples, client_id = metrics.pop("num-examples", None), metrics.pop("client-id", None)
    _check_count("num-examples", num_examples, 0, limits.max_examples)
    _check_count("client-id", client_id, 0, None)
    return client_id, num_examples, {k: float(v) for k, v in metrics.items()}


def _check_count(name: str, value: object, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"reply metric {name!r} must be an integer {bound}, got {value!r}")


def _scalar_metrics(record: MetricRecord, limits: ReplyLimits) -> dict[str, int | float]:
    """The reply's metrics, each a finite int or float under a short name, at most ``max_metric_keys``."""
    if len(record) > limits.max_metric_keys:
        raise ValueError(f"reply has {len(record)} metric keys, more than max-metric-keys={limits.max_metric_keys}")
    out: dict[str, int | float] = {}
    for key, value in record.items():
        if len(key) > limits.max_key_length:
            raise ValueError(
                f"reply metric name of {len(key)} characters is longer than {limits.max_key_length}: {key[:40]!r}..."
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"reply metric {key!r} must be a number, got {type(value).__name__} {str(value)[:60]}")
        if not math.isfinite(value):
            raise ValueError(f"reply metric {key!r} must be finite, got {value!r}")
        out[key] = value
    return out


def _float_arrays(record: ArrayRecord | None, name: str, allow_int: bool = False) -> StateDict:
    """The named floating-point tensors of a reply's ``ArrayRecord`` (``{}`` for ``None``).

    Arrays are decoded by NumPy without pickle (Flower's ``Array.numpy``); one that is not a
    NumPy array, cannot be decoded or is not floating-point raises ``ValueError``.
    """
    if record is None:
        return {}
    out: StateDict = {}
    for key in record.keys():
        try:
            tensor = torch.from_numpy(record[key].numpy())
        except (TypeError, ValueError, OSError, EOFError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"reply array {name}/{key!r} cannot be decoded: {reason}") from None
        if not (tensor.is_floating_point() or (allow_int and _is_int(tensor))):
            raise ValueError(f"reply array {name}/{key!r} must be floating-point, got {tensor.dtype}")
        out[key] = tensor
    return out


def _is_int(tensor: torch.Tensor) -> bool:
    """A signed or unsigned integer tensor (not bool): a compressed payload's codes or positions."""
    return tensor.dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
