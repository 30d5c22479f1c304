"""A Flower ``Grid`` that delivers messages to ClientApps in this process (no Ray, no network).

It lets the tests drive :class:`~lightning_fed.deploy.FederatedServer` and the ClientApp
exactly as Flower would, in milliseconds, and play faults: a node can be made to die
(no reply: a timeout) or its replies can be tampered with (poisoned updates).

``push_messages``/``pull_messages`` run on the grid's own clock (:attr:`InProcessGrid.now`,
advanced only by :meth:`InProcessGrid.sleep`): a pushed message is answered at once, and its
reply becomes pullable ``delay(message)`` seconds later, so a test scripts the arrival order.
Patch the server's ``monotonic``/``sleep`` with :meth:`clock`/:meth:`sleep` to run on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict


class InProcessGrid:
    """Nodes ``1..n``; node ``k`` holds ``partition-id = k - 1``."""

    def __init__(
        self,
        client_app,
        num_nodes: int,
        run_config: dict,
        tamper: Callable[[Message], Message] | None = None,
        delay: Callable[[Message], float] | None = None,
    ) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = (
            1,
            0,
            1,
        )  # what a ServerApp process is given by Flower
        self.client_app, self.tamper = client_app, tamper
        self.contexts = {
            k + 1: Context(
                run_id=1,
                node_id=k + 1,
                node_config={"partition-id": k, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for k in range(num_nodes)
        }
        self.dead: set[int] = set()
        self.sent: list[Message] = []
        self.delay = delay or (lambda msg: 0.0)
        self.now = 0.0
        self.waiting: dict[str, tuple[float, int, Message]] = {}  # message id -> (ready at, push order, reply)
        self.pulled: list[tuple[float, Message]] = []  # (time, reply) in the order pull_messages gave them
        self._ids = itertools.count()

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.contexts if n not in self.dead]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node in self.dead:
                continue  # a dead node never answers: the server sees a timeout
            replies.append(self._answer(msg))
        return replies

    def _answer(self, msg: Message) -> Message:
        try:
            reply = self.client_app(msg, self.contexts[msg.metadata.dst_node_id])
        except Exception as err:  # noqa: BLE001 - what Flower turns into an error reply
            reply = Message(Error(code=0, reason=repr(err)), reply_to=msg)
        return self.tamper(reply) if self.tamper and not reply.has_error() else reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Give each message an id (as Flower's grids do); its node answers now, ready after ``delay``."""
        ids = []
        for msg in messages:
            n = next(self._ids)
            msg.metadata.__dict__["_message_id"] = f"msg-{n}"
            self.sent.append(msg)
            ids.append(msg.metadata.message_id)
            if msg.metadata.dst_node_id not in self.dead:
                self.waiting[msg.metadata.message_id] = (self.now + float(self.delay(msg)), n, self._answer(msg))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to ``message_ids`` that are ready now, earliest first (each given once)."""
        ready = sorted(
            (self.waiting[i][:2], i) for i in message_ids if i in self.waiting and self.waiting[i][0] <= self.now
        )
        out = [self.waiting.pop(i)[2] for _, i in ready]
        self.pulled += [(self.now, reply) for reply in out]
        return out

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
