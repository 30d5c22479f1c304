"""The Flower server's train rounds: one protocol (:class:`TrainRound`), a class per path, and
the one function that picks a run's path and refuses what cannot run (:func:`choose_train_round`).

- :class:`PlainRound` (``plain.py``): every sampled client at once, ``Grid.send_and_receive``.
- :class:`SecureRound` (``secure.py``): Flower's SecAgg+ workflow runs the exchange.
- :class:`WallClockRound` (``wall_clock.py``): real time-outs, a round closed at its deadline or target.
- :class:`BufferedRound` (``buffered.py``): FedBuff with the replies' real arrival order.
"""

from lightning_fed.deploy.train_rounds.buffered import BufferedRound
from lightning_fed.deploy.train_rounds.choice import HOOK_PATHS, choose_train_round
from lightning_fed.deploy.train_rounds.plain import PlainRound
from lightning_fed.deploy.train_rounds.protocol import TrainRound
from lightning_fed.deploy.train_rounds.secure import SecureRound
from lightning_fed.deploy.train_rounds.wall_clock import WallClockRound

__all__ = [
    "HOOK_PATHS",
    "BufferedRound",
    "PlainRound",
    "SecureRound",
    "TrainRound",
    "WallClockRound",
    "choose_train_round",
]
