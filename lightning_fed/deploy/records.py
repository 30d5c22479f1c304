"""What travels between a Flower ServerApp and ClientApp: named tensors and scalars only.

A :class:`~lightning_fed.strategies.ClientUpdate` becomes a ``RecordDict`` of two
``ArrayRecord`` (``state``: the shared parameters, ``extras``: e.g. SCAFFOLD's control delta)
and one ``MetricRecord`` (``num-examples``, ``client-id`` and the training metrics). Nothing is
pickled: a client can only send arrays and numbers, which the server checks like any update.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from lightning_fed.strategies.base import ClientUpdate, StateDict

STATE, EXTRAS, DOWNLINK, METRICS, CONFIG = "state", "extras", "downlink", "metrics", "config"


def to_arrays(state: Mapping[str, torch.Tensor]) -> ArrayRecord:
    """An ``ArrayRecord`` of the named tensors (copied to CPU, contiguous)."""
    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def from_arrays(record: ArrayRecord | None) -> StateDict:
    """The named tensors of an ``ArrayRecord`` (an empty dict for ``None``)."""
    if record is None or len(record) == 0:
        return {}
    return dict(record.to_torch_state_dict())


def train_instruction(round_idx: int, client_id: int, state: StateDict, downlink: StateDict) -> RecordDict:
    """The server's message to a client: train ``client_id`` in ``round_idx`` from ``state``."""
    return RecordDict(
        {
            STATE: to_arrays(state),
            DOWNLINK: to_arrays(downlink),
            CONFIG: ConfigRecord({"round": round_idx, "client-id": client_id}),
        }
    )


def update_to_record(update: ClientUpdate) -> RecordDict:
    """A client's reply: its :class:`ClientUpdate` as arrays and scalars."""
    metrics = {"num-examples": update.num_examples, "client-id": update.client_id}
    metrics.update({k: float(v) for k, v in update.metrics.items()})
    return RecordDict({STATE: to_arrays(update.state), EXTRAS: to_arrays(update.extras), METRICS: MetricRecord(metrics)})


def record_to_update(record: RecordDict) -> ClientUpdate:
    """Rebuild a :class:`ClientUpdate` from a reply; a malformed reply raises ``ValueError``."""
    if STATE not in record.array_records or METRICS not in record.metric_records:
        raise ValueError(f"a client reply needs the ArrayRecord {STATE!r} and the MetricRecord {METRICS!r}, got {list(record.keys())}")
    metrics = dict(record.metric_records[METRICS])
    num_examples, client_id = metrics.pop("num-examples", None), metrics.pop("client-id", None)
    if not isinstance(num_examples, int) or num_examples < 1 or not isinstance(client_id, int):
        raise ValueError(f"a client reply needs integer 'num-examples' >= 1 and 'client-id', got {num_examples!r} and {client_id!r}")
    return ClientUpdate(
        client_id=client_id,
        num_examples=num_examples,
        state=from_arrays(record.array_records[STATE]),
        extras=from_arrays(record.array_records.get(EXTRAS)),
        metrics={k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
    )
