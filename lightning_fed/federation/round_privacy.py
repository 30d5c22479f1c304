"""What the server's half of a round asks of the run's privacy: the :class:`RoundPrivacy` protocol.

:class:`~lightning_fed.federation.server_round.ServerRound` holds one as ``server.privacy``
(``None`` for none); :class:`lightning_fed.privacy.RunPrivacy` is the package's. The engine sits
below ``privacy/`` in the layering, so it names only this protocol, never the class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lightning_fed.federation.secret_seed import SecretSeed
    from lightning_fed.strategies.base import ClientUpdate


class RoundPrivacy(Protocol):
    """What the server asks of the run's privacy (:class:`lightning_fed.privacy.RunPrivacy`).

    Attributes:
        enabled: Whether any DP mechanism runs (then the reports withhold per-client metrics and
            bucket example counts).
    """

    enabled: bool
    report_validation: bool
    exceeded: str | None
    #: The seed of client sampling in a private run (secret); ``None``: the server's ``seed``.
    sampling_seed: SecretSeed | None

    def plan(self, server: Any, module: Any) -> None:
        """Before training, given the bound ``ServerRound`` (not imported here: it imports this
        module): calibrate and check the budget (one-line ``ValueError``)."""

    def end_round(self, round_idx: int, updates: list[ClientUpdate]) -> dict[str, float]:
        """Account round ``round_idx`` (its admitted ``updates``); the scalars to log (``privacy/epsilon``)."""

    def would_exceed(self, next_round: int) -> bool:
        """Whether running ``next_round`` (0-based) would spend more than the budget."""

    def stopped(self, next_round: int) -> None:
        """Record that the run stops before ``next_round``."""

    def section(self, rounds: int) -> dict[str, Any]:
        """The ``privacy`` section of ``summary.json`` after ``rounds`` rounds."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
