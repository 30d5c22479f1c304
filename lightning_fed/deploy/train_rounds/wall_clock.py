"""Real time-outs over Flower: a train round that closes at its deadline or its target.

With :class:`~lightning_fed.heterogeneity.SystemHeterogeneity` at ``clock: wall`` the Flower
server pushes the round's train messages and pulls replies (``Grid.push_messages`` /
``Grid.pull_messages``) until ``target`` of them have arrived or ``deadline`` wall seconds have
passed (Bonawitz et al., 2019, arXiv:1902.01046, Sec. 2.2: select more devices than needed,
close the round when enough have reported or at the deadline, discard the rest). The first
``target`` successful replies, in arrival order, are aggregated; a client with no reply by then is
late (counted by the hook, not as a failed client). A reply that comes after its round has closed
answers an earlier round's message: it is never pulled again (the server pulls by the new round's
message ids), and one a transport hands over all the same is refused by the reply's binding to its
round (:meth:`~lightning_fed.deploy.FederatedServer.aggregate_train`).

Asked for by the hook's ``server_path()`` (``"wall_clock"``); refused with secure aggregation
(:func:`~lightning_fed.deploy.train_rounds.choose_train_round`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from flwr.app import ConfigRecord, Message

from lightning_fed.deploy.records import to_arrays
from lightning_fed.deploy.train_rounds.protocol import TrainRound
from lightning_fed.heterogeneity.system_round import CUT_SHORT

#: Seconds between two pulls while a round waits for replies.
POLL_SECONDS = 0.05


class WallClockRound(TrainRound):
    """A train round on real time-outs: the first ``target`` replies within ``deadline`` seconds
    (else the transport's ``timeout``) are aggregated, the rest are late (the hook counts them)."""

    asked_by, instead = "SystemHeterogeneity.clock='wall'", "use clock='virtual'"

    def run(self, round_idx: int) -> None:
        fed, hook, server_round = self.fed, self.hook, round_idx + 1
        started = time.monotonic()
        messages = list(
            fed.configure_train(server_round, to_arrays(self.server.global_state), ConfigRecord(), self.grid)
        )
        wait = self.timeout if hook.deadline is None else hook.deadline
        kept, _surplus = collect_until(self.grid, messages, wait, hook.round_target)
        fed.aggregate_train(server_round, kept, silent_are_late=True)
        record = self.server.report.history[-1]
        train = record.get("train", {})  # absent with private metrics: partial work is then not counted
        partial = [c for c in record["aggregated"] if train.get(str(c), {}).get(CUT_SHORT)]
        seconds = time.monotonic() - started
        hook.record_wall_round(fed.context, round_idx, len(record["aggregated"]), partial, fed.late, seconds)


def collect_until(
    grid: Any, messages: Sequence[Message], seconds: float, target: int, poll: float = POLL_SECONDS
) -> tuple[list[Message], list[Message]]:
    """Push ``messages``, pull replies until ``target`` successful ones arrived or ``seconds`` passed.

    Returns ``(kept, surplus)``: every reply pulled in time in arrival order, cut after the
    ``target``-th successful answer to these messages, and the successful answers that arrived in
    the same pull past the target (late). Error replies, and replies that answer no message of
    this round (a stale reply a transport hands over), stay in ``kept`` without counting as
    reports: the server counts the first as failures and refuses the second.
    """
    ends = time.monotonic() + seconds
    ours = {i for i in grid.push_messages(messages) if i}
    waiting = set(ours)
    kept: list[Message] = []
    surplus: list[Message] = []
    reports = 0
    while waiting:
        for reply in grid.pull_messages(waiting):
            answers = reply.metadata.reply_to_message_id
            waiting.discard(answers)
            report = answers in ours and not reply.has_error()
            if report and reports >= target:
                surplus.append(reply)
                continue
            kept.append(reply)
            reports += report
        if reports >= target or time.monotonic() >= ends:
            break
        time.sleep(poll)
    return kept, surplus
