"""A message the Flower server sends one client, and the checks its reply must pass.

Every train-round path (:mod:`lightning_fed.deploy.train_rounds`) and the evaluation exchange
send :class:`Task` objects and check what comes back with the same two functions:
:func:`unbound` (the reply answers this message: its id, round, client and nonce) and
:func:`checked_update` (a well-formed update of the client the node holds, with the extras the
strategy's client side uploads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flwr.app import Message

from lightning_fed.deploy.records import ReplyLimits, check_binding, new_nonce, record_to_update, train_instruction
from lightning_fed.federation.hooks import Payload
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import ClientUpdate, Strategy

Layout = dict[str, tuple[int, ...]]


@dataclass
class Task:
    """A message out to ``client``, with what its reply must echo and carry.

    Attributes:
        client: The client (partition) asked.
        message: The message, to the node holding ``client``.
        nonce: The random nonce it carries (the reply echoes it).
        round_idx: The round it names (the reply echoes it).
        extras: Names and shapes of the extras a train reply must upload (empty for evaluation).
    """

    client: int
    message: Message
    nonce: str
    round_idx: int
    extras: Layout = field(default_factory=dict)

    @property
    def node(self) -> int:
        return self.message.metadata.dst_node_id


def new_task(
    message_type: str,
    client: int,
    node: int,
    round_idx: int,
    start: StateDict,
    downlink: StateDict,
    instructions: dict[int, Payload],
    extras: Layout | None = None,
) -> Task:
    """A ``message_type`` (train, evaluate) message to ``client`` on ``node`` with a fresh nonce."""
    nonce = new_nonce()
    content = train_instruction(round_idx, client, start, downlink, instructions, nonce)
    message = Message(content=content, message_type=message_type, dst_node_id=node)
    return Task(client, message, nonce, round_idx, dict(extras or {}))


def uploaded_extras(strategy: Strategy, start: StateDict, downlink: StateDict) -> Layout:
    """Names and shapes of the extras a client of ``strategy`` uploads (e.g. SCAFFOLD's
    ``control/<name>``), from a dry run of its client-side correction on a scratch memory."""
    try:
        extras = strategy.local_correction(start, downlink, {}).finish(start, 1, 1.0)
    except ValueError:
        return {}
    return {k: tuple(v.shape) for k, v in extras.items()}


def unbound(task: Task | None, msg: Message) -> str | None:
    """Why ``msg`` does not answer ``task`` (``None``: it does).

    The reply must name the message it answers (``reply_to_message_id``, where the grid gave the
    message an id) and echo its round and nonce (:func:`~lightning_fed.deploy.records.check_binding`).
    An error reply is bound by its id alone (it carries no content).
    """
    if task is None:
        return "no message was sent to that client in this round"
    sent_id = task.message.metadata.message_id
    if sent_id and msg.metadata.reply_to_message_id != sent_id:
        return f"it answers message {msg.metadata.reply_to_message_id!r}, not {sent_id!r}"
    if msg.has_error():
        return None
    try:
        check_binding(msg.content, task.round_idx, task.client, task.nonce)
    except ValueError as err:
        return str(err)
    return None


def checked_update(task: Task, msg: Message, limits: ReplyLimits, compressed: bool) -> ClientUpdate:
    """The update in ``msg``, the reply to ``task``; ``ValueError`` unless well-formed.

    Beyond :func:`~lightning_fed.deploy.records.record_to_update` (floating-point arrays, bounded
    metrics) and :func:`~lightning_fed.strategies.check_update` (keys, shapes, finite values;
    ``ServerRound.admit`` runs it): the reply claims the client its node holds, and its extras are
    exactly the names and shapes of ``task.extras``.
    """
    cid, expected = task.client, task.extras
    update = record_to_update(msg.content, limits, compressed=compressed)
    if update.client_id != cid:
        raise ValueError(
            f"node {msg.metadata.src_node_id} holds client {cid} but its reply claims client-id={update.client_id}"
        )
    if update.extras.keys() != expected.keys():
        missing, unexpected = sorted(expected.keys() - update.extras.keys()), sorted(update.extras.keys() - expected)
        raise ValueError(
            f"client {cid}: extras do not match the strategy's (missing={missing[:5]}, unexpected={unexpected[:5]})"
        )
    bad = [f"{k}: {tuple(v.shape)} != {expected[k]}" for k, v in update.extras.items() if tuple(v.shape) != expected[k]]
    if bad:
        raise ValueError(f"client {cid}: extras shape mismatch for {bad[:5]}")
    return update
