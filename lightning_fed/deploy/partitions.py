"""Which SuperNode holds which client: the server's first exchange with the nodes."""

from __future__ import annotations

import time

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn


def discover_partitions(grid: Grid, min_nodes: int, timeout: float, num_clients: int | None = None) -> dict[int, int]:
    """Ask every connected node which partition (client) it holds: ``{client: node}``.

    A node whose answer is malformed or names a partition outside ``[0, num_clients)`` is left
    out with a warning; two nodes claiming one partition is an error (which one is real?).
    """
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < min_nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} SuperNodes connected within {timeout:.0f} s, need at least {min_nodes}"
            )
        time.sleep(0.5)
    queries = [
        Message(content=RecordDict(), message_type=f"{MessageType.QUERY}.partition", dst_node_id=n) for n in nodes
    ]
    out: dict[int, int] = {}
    for reply in grid.send_and_receive(queries, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            rank_zero_warn(f"node {node} did not say which partition it holds: {reply.error.reason}")
            continue
        record = reply.content.config_records.get("partition")
        cid = record.get("partition-id") if record is not None else None
        if (
            isinstance(cid, bool)
            or not isinstance(cid, int)
            or cid < 0
            or (num_clients is not None and cid >= num_clients)
        ):
            rank_zero_warn(
                f"node {node} is left out: its partition-id must be an integer in [0, {num_clients}), got {cid!r}"
            )
            continue
        if cid in out:
            raise RuntimeError(f"partition-id={cid} is held by two SuperNodes ({out[cid]} and {node})")
        out[cid] = node
    rank_zero_info(f"FederatedServer: {len(out)} SuperNodes hold partitions {sorted(out)}")
    return out
