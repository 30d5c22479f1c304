"""The run, as data: :class:`FederationConfig` and :class:`FederatedRun` (litgpt's ``Config`` style).

A run is the ``federation:`` section of its YAML: :class:`FederationConfig` (rounds, sampling,
local work, faults, evaluation, compression: plain data, validated once in ``__post_init__``,
every problem named by its YAML key, all of them in one message) plus the three settings that
are objects (``strategy``, ``hooks``, ``privacy``) on :class:`FederatedRun`. It is what the
one parser of a config (:mod:`lightning_fed.run_parser`) builds for ``fit``, the Flower apps and
``plan``, so each option is declared once, as a field here, and the YAML keys, these fields and
``lightning-fed fit --help``'s ``--federation.*`` options are the same names.

The objects are inert: no method builds anything (:mod:`lightning_fed.run_factory` builds what
each transport needs from a run), and importing this module imports no torch: the types of the
three object fields are imported for type checking only (jsonargparse resolves them when it
parses), and :class:`FederationConfig` (:mod:`lightning_fed.run_config`) checks the plain fields.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from lightning_fed.run_config import FederationConfig

if TYPE_CHECKING:
    from lightning_fed.federation.hooks import RoundHook
    from lightning_fed.privacy.config import PrivacyConfig
    from lightning_fed.strategies.base import Strategy


@dataclass(frozen=True)
class FederatedRun(FederationConfig):
    """The ``federation:`` section of a run: its :class:`FederationConfig` plus its objects.

    Build it from the YAML (:func:`lightning_fed.run_parser.parse_config`) or directly, e.g.
    ``FederatedRun(rounds=2, strategy=Scaffold())``; then ``FederatedLoop(run)`` runs it in
    process and ``FederatedServer(run, ...)`` over Flower.
    """

    strategy: Strategy | None = None
    """Server aggregation rule (default: FedAvg weighted by ``|D_k|``)."""

    hooks: list[RoundHook] | None = None
    """Round-level method hooks (data selection, server-side training...), in order."""

    privacy: PrivacyConfig | None = None
    """Client-level privacy budget (needs ``strategy: ClientLevelDP``): see ``docs/privacy.md``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.strategy is None:  # the default rule, made when a run is (importing this module loads no torch)
            from lightning_fed.strategies.fedavg import FedAvg

            object.__setattr__(self, "strategy", FedAvg())
        object.__setattr__(self, "hooks", list(self.hooks or []))

    @property
    def config(self) -> FederationConfig:
        """The run's settings that are plain data (what ``summary.json`` and checks compare)."""
        return FederationConfig(**{f.name: getattr(self, f.name) for f in fields(FederationConfig)})

    def to_dict(self) -> dict[str, Any]:
        """The plain-data fields (not the strategy, hooks or privacy objects)."""
        return self.config.to_dict()
