"""A run's YAML config, parsed into its objects without a Trainer: what the Flower apps build.

``lightning-fed fit`` parses a config with a LightningCLI, which also builds a ``Trainer``; a
Flower ServerApp needs none (it trains nothing) and a ClientApp builds its own per round. They
parse the same YAML here into a :class:`ParsedRun`: the module, the data module (not set up),
the :class:`~lightning_fed.federation.run.FederatedRun` and the ``trainer:`` section as data.
The sections are the CLI's (``seed_everything``, ``trainer``, ``model``, ``data``,
``federation``), declared by the same calls: the ``federation:`` section by
:func:`add_federation_arguments`, which the CLI uses too, so both read the same keys.

What the CLI does first is done here too, in the same order: the plugins' strategies and
objectives join the short names, ``seed_everything`` seeds the process (a module's initial
adapter weights and ``PL_GLOBAL_SEED``, the federation's seed when ``federation.seed`` is
unset), then the classes are instantiated.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import jsonargparse
from jsonargparse import ActionConfigFile, Namespace
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.cli import LightningArgumentParser

from lightning_fed.datamodules import FederatedDataModule
from lightning_fed.federation.run import FederatedRun
from lightning_fed.modules import FederatedModule
from lightning_fed.modules.registry import load_module_plugins
from lightning_fed.shipped_configs import resolve_config
from lightning_fed.strategies import load_strategy_plugins

SEED_DEFAULT = 0
"""``seed_everything`` when the config sets none (the CLI's ``seed_everything_default``)."""


def add_federation_arguments(parser: LightningArgumentParser) -> None:
    """The ``federation:`` section: the fields of :class:`~lightning_fed.federation.run.FederatedRun`
    (each option declared once, there; its help is the field's docstring)."""
    jsonargparse.set_parsing_settings(docstring_parse_attribute_docstrings=True)
    parser.add_class_arguments(FederatedRun, "federation", fail_untyped=False, sub_configs=True)


@dataclass
class ParsedRun:
    """A run's config as objects: no ``Trainer`` is built."""

    module: FederatedModule
    datamodule: FederatedDataModule
    run: FederatedRun
    trainer: dict[str, Any]
    """The ``trainer:`` section as data (e.g. ``default_root_dir``, ``precision``)."""


def run_parser() -> LightningArgumentParser:
    """The parser of a run's config: the sections of ``lightning-fed fit``'s, none instantiated as
    a Trainer (``trainer:`` is read as data)."""
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_argument("-c", "--config", action=ActionConfigFile, help="Path to the run's YAML config.")
    parser.add_argument("--seed_everything", type=bool | int, default=SEED_DEFAULT)
    parser.add_lightning_class_args(Trainer, "trainer")  # parsed, never instantiated
    parser.add_lightning_class_args(FederatedModule, "model", subclass_mode=True)
    parser.add_lightning_class_args(FederatedDataModule, "data", subclass_mode=True)
    add_federation_arguments(parser)
    return parser


def parse_run(config: str, overrides: str = "") -> ParsedRun:
    """The objects of ``config`` (a shipped config's name or a YAML path) with ``overrides``
    (``lightning-fed fit`` arguments such as ``--federation.rounds=2``, space separated).

    Raises:
        ValueError: A setting a class refuses (its own one-line message).
    """
    load_strategy_plugins()
    load_module_plugins()
    parser = run_parser()
    cfg = parser.parse_args(["--config", str(resolve_config(config)), *shlex.split(overrides)])
    seed = cfg.seed_everything
    if seed is not False:  # as LightningCLI: before the classes are instantiated
        seed_everything(None if seed is True else seed, workers=True)
    try:
        init = parser.instantiate_classes(cfg)
    except ValueError as err:  # jsonargparse wraps a constructor's one-line ValueError
        cause = err
        while cause.__cause__ is not None:
            cause = cause.__cause__
        raise cause from None
    trainer = init.trainer
    trainer = trainer.as_dict() if isinstance(trainer, Namespace) else dict(trainer or {})
    return ParsedRun(init.model, init.data, init.federation, trainer)
