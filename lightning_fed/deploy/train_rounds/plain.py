"""The plain train round: every sampled client is sent its message at once, and the round closes
when all replies are in or the transport's ``timeout`` has passed (a client with no reply by then
failed)."""

from __future__ import annotations

from flwr.app import ConfigRecord

from lightning_fed.deploy.records import to_arrays
from lightning_fed.deploy.train_rounds.protocol import TrainRound


class PlainRound(TrainRound):
    """Flower's synchronous exchange (``Grid.send_and_receive``) of the server's train messages."""

    def run(self, round_idx: int) -> None:
        fed, server_round = self.fed, round_idx + 1
        messages = fed.configure_train(server_round, to_arrays(self.server.global_state), ConfigRecord(), self.grid)
        fed.aggregate_train(server_round, self.grid.send_and_receive(messages, timeout=self.timeout))
