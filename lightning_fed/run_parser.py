"""A run's YAML config, parsed once: the one reader of a config, for ``fit``, the Flower apps and ``plan``.

A config is parsed here into a jsonargparse ``Namespace`` (:func:`parse_config`): every default
applied once, by the classes' own signatures (``data.batch_size`` is the data module's), and
every check ``lightning-fed fit`` makes before it builds anything (:func:`config_problem`: the
seed's range, non-finite numbers, the Trainer's own bounds, conflicts between the federation's
settings). Its ``federation:`` section becomes the run's
:class:`~lightning_fed.run.FederatedRun` through :func:`build_run`, with no model and no
data: that is what ``lightning-fed plan`` reads. The Flower apps add the module and the data
module (:func:`parse_run`, no Trainer); ``lightning-fed fit``'s LightningCLI declares the same
sections with the same calls (:func:`add_federation_arguments`) and runs the same checks from
its ``before_instantiate_classes``, so the four readers see one config.

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

from lightning_fed.config_values import non_finite_problem
from lightning_fed.datamodules import FederatedDataModule
from lightning_fed.errors import UserError, simplify_parse_error
from lightning_fed.modules import FederatedModule
from lightning_fed.modules.registry import available_modules, load_module_plugins
from lightning_fed.option_rules import seed_problem  # torch-free: the precheck applies it too
from lightning_fed.run import FederatedRun
from lightning_fed.run_checks import run_problem
from lightning_fed.shipped_configs import resolve_config
from lightning_fed.strategies import load_strategy_plugins
from lightning_fed.trainer_options import trainer_option_problem

SEED_DEFAULT = 0
"""``seed_everything`` when the config sets none (the CLI's ``seed_everything_default``)."""
TRAINER_DEFAULTS = {"num_sanity_val_steps": -1, "use_distributed_sampler": False}
"""The ``trainer:`` defaults of a federated run (the CLI's ``trainer_defaults``): a full evaluation
before round 1 gives the ``initial`` metrics of summary.json; the round's loader is rank-aware
(``RoundBatchSampler``), so no DistributedSampler from Lightning."""


def add_federation_arguments(parser: LightningArgumentParser) -> None:
    """The ``federation:`` section: the fields of :class:`~lightning_fed.run.FederatedRun`
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


def run_parser(fit_keys: bool = False) -> LightningArgumentParser:
    """The parser of a run's config: the sections of ``lightning-fed fit``'s, none instantiated as
    a Trainer (``trainer:`` is read as data). ``fit_keys``: also read (and leave out) fit's own
    top-level ``ckpt_path`` and ``weights_only``, which ``fit --print_config`` writes (``plan``)."""
    parser = LightningArgumentParser(exit_on_error=False, allow_abbrev=False)
    parser.add_argument("-c", "--config", action=ActionConfigFile, help="Path to the run's YAML config.")
    parser.add_argument("--seed_everything", type=bool | int, default=SEED_DEFAULT)
    parser.add_lightning_class_args(Trainer, "trainer")  # parsed, never instantiated
    parser.set_defaults({f"trainer.{k}": v for k, v in TRAINER_DEFAULTS.items()})
    parser.add_lightning_class_args(FederatedModule, "model", subclass_mode=True)
    parser.add_lightning_class_args(FederatedDataModule, "data", subclass_mode=True)
    add_federation_arguments(parser)
    if fit_keys:  # a config fit takes plans, the checkpoint left out (red team 11 row 13)
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="fit's; not read here")
        parser.add_argument("--weights_only", type=bool | None, default=None, help="fit's; not read here")
    return parser


def config_problem(config: Namespace, fit: bool = True) -> str | None:
    """The first problem of a parsed (not instantiated) config that ``fit`` refuses before it
    builds anything, or ``None``. ``fit=False`` (``validate``/``test``): the federation's own
    conflicts are not checked (those stages run no round)."""
    if problem := seed_problem(config.get("seed_everything")):
        return problem
    if problem := non_finite_problem(config):  # the precheck's own check (lightning_fed/config_values.py)
        return problem
    trainer = config.get("trainer")
    if problem := trainer_option_problem(vars(trainer) if isinstance(trainer, Namespace) else trainer or {}):
        return problem  # the Trainer's own bounds, before it (or the backbone) is built
    if fit and (problem := federation_problem(config.get("federation"))):
        return problem  # strategy, hooks, compression, privacy: before the backbone loads
    if config.get("trainer.use_distributed_sampler"):  # the default here is False (the CLI's trainer_defaults)
        return (
            "trainer.use_distributed_sampler must be false (the round loader splits each batch over the"
            " DDP processes itself), got True"
        )
    return None


def _constructor_error(err: ValueError) -> ValueError:
    """A constructor's own one-line ``ValueError`` out of jsonargparse's wrapping of it."""
    cause = err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return cause


def build_run(section: Namespace | None) -> FederatedRun:
    """The :class:`~lightning_fed.run.FederatedRun` of a parsed ``federation:`` section, alone:
    no model, no data, and the random number generators' states as they were (so the run's model
    is initialised exactly as without this call).

    Raises:
        ValueError: A setting a class refuses (its own one-line message).
    """
    from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states

    parser = LightningArgumentParser(exit_on_error=False, allow_abbrev=False)
    add_federation_arguments(parser)
    states = _collect_rng_states()
    try:
        return parser.instantiate_classes(Namespace(federation=section or Namespace())).federation
    except ValueError as err:
        raise _constructor_error(err) from None
    finally:
        _set_rng_states(states)


def federation_problem(section: Namespace | None) -> str | None:
    """:func:`~lightning_fed.run_checks.run_problem` of a parsed ``federation:`` section.

    A constructor's own refusal is left to the full instantiation, which reports it.
    """
    if section is None:
        return None
    try:
        run = build_run(section)
    except Exception:  # noqa: BLE001 - the full instantiation reports a constructor's own error
        return None
    return run_problem(run)


def parse_config(config: str, overrides: str = "", fit: bool = True, fit_keys: bool = False) -> Namespace:
    """``config`` (a shipped config's name or a YAML path) with ``overrides`` (``lightning-fed fit``
    arguments such as ``--federation.rounds=2``, space separated), parsed and checked as ``fit``
    checks it (:func:`config_problem`); nothing is instantiated. ``fit_keys``: :func:`run_parser`'s.

    Raises:
        UserError: The config cannot be parsed, or holds a value ``fit`` refuses (one line).
    """
    load_strategy_plugins()
    load_module_plugins()
    try:
        cfg = run_parser(fit_keys).parse_args(["--config", str(resolve_config(config)), *shlex.split(overrides)])
    except jsonargparse.ArgumentError as err:
        raise UserError(simplify_parse_error(str(err), available_modules)) from None
    if problem := config_problem(cfg, fit):
        raise UserError(problem)
    return cfg


def _instantiate_section(config: Namespace, key: str, base: type) -> Any:
    parser = LightningArgumentParser(exit_on_error=False, allow_abbrev=False)
    parser.add_lightning_class_args(base, key, subclass_mode=True)
    try:
        return getattr(parser.instantiate_classes(Namespace(**{key: config.get(key)})), key)
    except ValueError as err:  # jsonargparse wraps a constructor's one-line ValueError
        raise _constructor_error(err) from None


def build_data(config: Namespace) -> FederatedDataModule:
    """The data module of a parsed config (its arguments checked; nothing is loaded until ``setup``).

    Raises:
        ValueError: A setting the data module refuses (its own one-line message).
    """
    return _instantiate_section(config, "data", FederatedDataModule)


def build_objects(config: Namespace) -> tuple[FederatedModule, FederatedDataModule]:
    """The module (its backbone loaded) and the data module of a parsed config, in ``fit``'s order.

    Raises:
        ValueError: A setting a class refuses (its own one-line message).
    """
    return _instantiate_section(config, "model", FederatedModule), build_data(config)


def parse_run(config: str, overrides: str = "") -> ParsedRun:
    """The objects of ``config`` with ``overrides`` (see :func:`parse_config`): the run
    (:func:`build_run`), then the module and the data module (:func:`build_objects`), seeded as
    ``fit`` seeds them.

    Raises:
        ValueError: A setting a class refuses (its own one-line message).
    """
    cfg = parse_config(config, overrides)
    seed = cfg.seed_everything
    if seed is not False:  # as LightningCLI: before the classes are instantiated
        seed_everything(None if seed is True else seed, workers=True)
    run = build_run(cfg.get("federation"))  # leaves the generators as they were
    module, datamodule = build_objects(cfg)
    trainer = cfg.get("trainer")
    trainer = trainer.as_dict() if isinstance(trainer, Namespace) else dict(trainer or {})
    return ParsedRun(module, datamodule, run, trainer)
