"""A Flower ``Grid`` that delivers messages to ClientApps in this process (no Ray, no network).

It lets the tests drive :class:`~lightning_fed.deploy.FederatedServer` and the ClientApp
exactly as Flower would, in milliseconds, and play faults: a node can be made to die
(no reply: a timeout) or its replies can be tampered with (poisoned updates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict


class InProcessGrid:
    """Nodes ``1..n``; node ``k`` holds ``partition-id = k - 1``."""

    def __init__(
        self, client_app, num_nodes: int, run_config: dict, tamper: Callable[[Message], Message] | None = None
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

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.contexts if n not in self.dead]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node in self.dead:
                continue  # a dead node never answers: the server sees a timeout
            try:
                reply = self.client_app(msg, self.contexts[node])
            except Exception as err:  # noqa: BLE001 - what Flower turns into an error reply
                reply = Message(Error(code=0, reason=repr(err)), reply_to=msg)
            replies.append(self.tamper(reply) if self.tamper and not reply.has_error() else reply)
        return replies
