"""Which SuperNode holds which client: the server's first exchange with the nodes."""

from __future__ import annotations

import time

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.deploy.failure_cause import failure_cause, is_out_of_memory, out_of_memory_line


def discover_partitions(grid: Grid, min_nodes: int, timeout: float, num_clients: int | None = None) -> dict[int, int]:
    """Ask every connected node which partition (client) it holds: ``{client: node}``.

    A node whose answer is malformed or names a partition outside ``[0, num_clients)`` is left
    out with a warning; two nodes claiming one partition is an error (which one is real?). When
    every node that answered failed (its ClientApp raised, or Ray killed its worker), no client can
    train: a ``RuntimeError`` names the cause (Ray's memory monitor, with what to change, in
    :func:`~lightning_fed.deploy.failure_cause.out_of_memory_line`) before round 1.
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
    failed: dict[int, str] = {}  # node -> its error reply's reason
    for reply in grid.send_and_receive(queries, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            failed[node] = reply.error.reason
            rank_zero_warn(f"node {node} did not say which partition it holds: {failure_cause(reply.error.reason)}")
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
    if failed and not out:
        if killed := [n for n, why in failed.items() if is_out_of_memory(why)]:
            whom = f"{len(killed)} of the {len(nodes)} SuperNodes"  # their ids are random in a simulation
            raise RuntimeError(out_of_memory_line(whom, "no SuperNode could say which client it holds"))
        node, why = min(failed.items())
        raise RuntimeError(f"no SuperNode said which partition it holds; node {node} failed: {failure_cause(why)}")
    rank_zero_info(f"FederatedServer: {len(out)} SuperNodes hold partitions {sorted(out)}")
    return out
