"""The round hooks' pre-round queries over a Flower ``Grid`` (the server's half of the exchange).

A hook that needs client work before a round (FedHDS's intra-client clustering, FedBiscuit's
selector losses) returns its queries from ``client_queries``;
:meth:`~lightning_fed.federation.ServerRound.prepare` hands them to :func:`ask_clients`, which
sends one ``query.hook`` message per client to the node holding it, waits up to the server's
timeout and returns the replies for the hook's ``on_replies``. A message carries the hook's
index in ``federation.hooks`` (both sides build the hooks from the same config), the round, the
client, the payload (:func:`~lightning_fed.deploy.records.payload_records`) and, when the query
asks for it (``with_global_state``), the global state.

Traffic is counted as in the in-process loop: the query's tensors plus the global state it
carries go to the round's ``comm/down_bytes``, the reply's tensors to ``comm/up_bytes``.
Replies are untrusted: one from a node that was not asked (or answers twice, or for another
client), one not bound to this query (another round's reply replayed: its echoed round and
nonce differ), an error reply, a timeout or a malformed payload leaves that client out of the
replies (the hook sees it as missing), with a warning, and is counted in
``missing_replies`` (``summary.json``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from lightning.pytorch.utilities import rank_zero_warn

from lightning_fed.deploy.records import (
    CONFIG,
    PAYLOAD,
    STATE,
    ReplyLimits,
    check_binding,
    new_nonce,
    payload_records,
    record_to_payload,
    to_arrays,
)
from lightning_fed.federation.hooks import WITH_GLOBAL_STATE, Payload, payload_nbytes
from lightning_fed.state import state_nbytes

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from lightning_fed.federation.server_round import ServerRound

HOOK_QUERY = f"{MessageType.QUERY}.hook"


def query_message(
    round_idx: int,
    client_id: int,
    hook_index: int,
    query: Payload,
    global_state: dict | None,
    node: int,
    nonce: str = "",
) -> Message:
    """The ``query.hook`` message asking ``client_id`` (on ``node``) for hook ``hook_index``; the
    reply must echo ``nonce`` (:func:`~lightning_fed.deploy.records.check_binding`)."""
    records = {
        CONFIG: ConfigRecord({"round": round_idx, "client-id": client_id, "hook": hook_index, "nonce": nonce}),
        **payload_records(query, PAYLOAD),
    }
    if global_state is not None:
        records[STATE] = to_arrays(global_state)
    return Message(content=RecordDict(records), message_type=HOOK_QUERY, dst_node_id=node)


def ask_clients(
    grid: Grid,
    nodes: dict[int, int],
    server: ServerRound,
    round_idx: int,
    hook_index: int,
    queries: dict[int, Payload],
    timeout: float,
    limits: ReplyLimits | None = None,
) -> tuple[dict[int, Payload], int]:
    """Send hook ``hook_index``'s ``queries`` and gather the replies.

    Args:
        nodes: Client (partition) -> the node holding it; a client without a node is missing.
        server: The run's server round: its global state goes along when a query asks for it,
            and the traffic lands in its round bytes (``add_round_bytes``).

    Returns:
        The well-formed replies by client, and the number of clients asked that are missing.
    """
    hook = type(server.hooks[hook_index]).__name__
    messages, asked, nonces = [], set(), {}
    for cid, query in sorted(queries.items()):
        if cid not in nodes:
            continue
        state = server.global_state if query.get(WITH_GLOBAL_STATE) else None
        nonces[cid] = new_nonce()
        messages.append(query_message(round_idx, cid, hook_index, query, state, nodes[cid], nonces[cid]))
        server.add_round_bytes(down=payload_nbytes(query) + (state_nbytes(state) if state else 0))
        asked.add(cid)
    client_of = {node: cid for cid, node in nodes.items()}
    replies: dict[int, Payload] = {}
    for msg in grid.send_and_receive(messages, timeout=timeout) if messages else []:
        cid = client_of.get(msg.metadata.src_node_id, -1)
        where = f"round {round_idx + 1}: {hook} query"
        if cid not in asked or cid in replies:
            rank_zero_warn(f"{where}: reply from node {msg.metadata.src_node_id} ignored (not asked, or twice)")
            continue
        if msg.has_error():
            rank_zero_warn(f"{where}: client {cid} failed: {msg.error.reason}")
            continue
        try:
            check_binding(msg.content, round_idx, cid, nonces[cid])
            reply = record_to_payload(msg.content, PAYLOAD, limits)
        except ValueError as err:
            rank_zero_warn(f"{where}: reply of client {cid} rejected: {err}")
            continue
        server.add_round_bytes(up=payload_nbytes(reply))
        replies[cid] = reply
    missing = [c for c in sorted(queries) if c not in replies]
    if missing:
        rank_zero_warn(f"round {round_idx + 1}: {hook} query: no valid reply from clients {missing}")
    return replies, len(missing)
