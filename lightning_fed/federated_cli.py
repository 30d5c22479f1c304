"""The LightningCLI of ``lightning-fed``: the ``fit``, ``validate`` and ``test`` subcommands.

``lightning-fed fit --config demo`` builds the model (a
:class:`~lightning_fed.modules.FederatedModule` subclass), the data (a
:class:`~lightning_fed.datamodules.FederatedDataModule` subclass) and the run
(:class:`~lightning_fed.run.FederatedRun`, the ``federation:`` section), which a
:class:`~lightning_fed.callbacks.FederatedLoop` callback runs; then fits.
Every option is listed by ``lightning-fed fit --help``. The process around it (exit status,
one-line errors, signals, the other subcommands) is :mod:`lightning_fed.cli`.
"""

from __future__ import annotations

import os
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NoReturn

import fsspec
import yaml
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException

# The package's round hooks by short name (`federation.hooks: [ClientGrouping]`): jsonargparse
# resolves a short name among the imported subclasses of RoundHook only (~40 ms).
import lightning_fed.evaluation.heldout  # noqa: F401
import lightning_fed.round_hooks  # noqa: F401
import lightning_fed.selection  # noqa: F401
from lightning_fed import console
from lightning_fed.callbacks import FederatedLoop, FederatedProgressBar
from lightning_fed.callbacks.signals import ProcessSignals, stop_if_requested
from lightning_fed.class_help import asked_in, option_name
from lightning_fed.config_precheck import LIGHTNING_SUBCOMMANDS, REMOVED
from lightning_fed.console import PROG
from lightning_fed.datamodules import FederatedDataModule
from lightning_fed.errors import (
    EXIT_USER_ERROR,
    CheckpointError,
    UserError,
    config_shape_error,
    help_tip,
    simplify_parse_error,
    unwritable,
)
from lightning_fed.federation.checkpoint_check import check_checkpoint
from lightning_fed.federation.checkpoint_io import AtomicCheckpointIO, read_checkpoint
from lightning_fed.federation.csv_metrics import ContinuedCSVWriter
from lightning_fed.federation.early_check import hpc_file, path_problem
from lightning_fed.federation.report import RoundReport
from lightning_fed.federation.resume_check import check_evaluation, check_resume, saved_config
from lightning_fed.federation.run_folder import RunConfigFile
from lightning_fed.federation.run_key_file import check_checkpoint_key
from lightning_fed.federation.version_folder import (
    VERSION,
    HeldFolder,
    adopt,
    checkpoint_run,
    claim_version,
    next_version,
)
from lightning_fed.modules import FederatedModule
from lightning_fed.modules.reference_cache import cache_state_problem
from lightning_fed.modules.registry import available_modules, load_module_plugins
from lightning_fed.option_rules import seed_problem
from lightning_fed.pipelines import prepare_stages
from lightning_fed.privacy.checkpoint_plan import check_privacy_plan
from lightning_fed.privacy.run import privacy_enabled
from lightning_fed.report.closing import closing_line  # what fit says last
from lightning_fed.run_parser import (
    SEED_DEFAULT,
    TRAINER_DEFAULTS,
    add_federation_arguments,
    config_problem,
)
from lightning_fed.shipped_configs import resolve_config_args
from lightning_fed.strategies import load_strategy_plugins  # the package's strategies: short names

LOG_EVERY_N_STEPS = 50
"""Lightning's default ``trainer.log_every_n_steps``; a run logs at least once per client turn."""


class SortedSubclassesFormatter(DefaultHelpFormatter):
    """jsonargparse's help layout with each option's known subclasses sorted by class path.

    jsonargparse lists them in the order the classes were imported, so ``ruff`` reordering an
    ``import`` changed the ``--help`` pages (and the stored ones, :mod:`lightning_fed.help_pages`).
    """

    def _get_help_string(self, action: Any) -> str:
        text = super()._get_help_string(action)
        extra = action.extra_help() if hasattr(action, "extra_help") else ""
        prefix, found, paths = extra.partition(KNOWN_SUBCLASSES)
        if not found:
            return text
        return text.replace(extra, prefix + KNOWN_SUBCLASSES + ", ".join(sorted(paths.split(", "))), 1)


KNOWN_SUBCLASSES = ", known subclasses: "
"""How jsonargparse's ``extra_help`` introduces an option's subclasses (``ActionTypeHint.extra_help``)."""


_PARSING: ContextVar[tuple[str, tuple[str, ...]] | None] = ContextVar("_PARSING", default=None)
"""The program and subcommand whose arguments are being parsed (``lightning-fed fit``), and those arguments."""
CLASS_HELP = "Help for --"
"""How jsonargparse's ``--<option>.help CLASS`` describes the parser it builds to print the class's page."""


class FederatedArgumentParser(LightningArgumentParser):
    """Parse errors in one line, saying which key is missing or which class_path is unknown;
    ``--help`` lists an option's known subclasses by name (:class:`SortedSubclassesFormatter`).

    The page ``fit --federation.hooks.help RoundLRSchedule`` prints comes from a parser jsonargparse
    builds with no ``prog`` (so argparse's, the script's name alone: ``usage: lightning-fed
    [--federation.hooks.schedule ...``): it is given the subcommand's that asked for it. One asked
    about inside a class (``--data.partition.help ByKey``) is built by the data module's own parser,
    handed ``--partition.help``: its options are named in full, as the command line gives them
    (``usage: lightning-fed fit --data.partition.key KEY``; red team 16 B6).
    """

    def __init__(self, *args: Any, formatter_class: type = SortedSubclassesFormatter, **kwargs: Any) -> None:
        self._help_prefix = ""  # `data.` of a page asked for as `--partition.help` by `--data.partition.help`
        description = str(kwargs.get("description") or "")
        if kwargs.get("prog") is None and description.startswith(CLASS_HELP) and (parsing := _PARSING.get()):
            kwargs["prog"], given = parsing
            asked = "--" + description.removeprefix(CLASS_HELP).partition("=")[0]  # `--partition.help`
            if written := asked_in(asked, given):
                kwargs["description"] = description.replace(asked, written, 1)
                self._help_prefix = option_name(written).removesuffix(option_name(asked))
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def add_class_arguments(self, class_type: Any, nested_key: str | None = None, *args: Any, **kwargs: Any) -> Any:
        if nested_key and self._help_prefix:
            nested_key = self._help_prefix + nested_key
        return super().add_class_arguments(class_type, nested_key, *args, **kwargs)

    def parse_args(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        if getattr(self, "_inner_parser", False):  # a class's own parser (the data module's): the command's stays
            return super().parse_args(args, *rest, **kwargs)
        given = tuple(sys.argv[1:] if args is None else args)
        token = _PARSING.set((self.prog.replace(" [options]", ""), given))  # `lightning-fed [options] fit`
        try:
            return super().parse_args(args, *rest, **kwargs)
        finally:
            _PARSING.reset(token)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        message = simplify_parse_error(str(message), available_modules)
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG", "").lower() in ("true", "1", "yes", "on"):
            super().error(message, ex)  # nested parsers raise; the outer parser reports
        prog = self.prog.replace(" [options]", "")
        if prog == PROG and (subcommand := message.split(".", 1)[0]) in LIGHTNING_SUBCOMMANDS:
            prog = f"{PROG} {subcommand}"  # `fit.data, fit.model: required ...`: the top parser reports it
        sys.stderr.write(f"error: {message}\n{help_tip(prog)}\n")
        sys.exit(EXIT_USER_ERROR)

    def _parse_common(self, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        # `fit --print_config`: jsonargparse prints the config in here, before any check of it; what
        # fit refuses before it builds anything (run_parser.config_problem) is refused first (issue 41).
        request = getattr(self, "print_config", None)
        if isinstance(request, dict) and request.get("key") in SUBCOMMANDS and "subparser" in request:
            request["subparser"] = _CheckedDump(request["subparser"], request["key"])
        return super()._parse_common(cfg, *args, **kwargs)


class _CheckedDump:
    """The subcommand's parser as ``--print_config`` dumps with it: :func:`config_problem` of the config
    first (``fit``'s own checks, not only the precheck's), raised as ``fit`` raises it, nothing printed."""

    def __init__(self, parser: LightningArgumentParser, subcommand: str) -> None:
        self.parser, self.subcommand = parser, subcommand

    def dump(self, cfg: Any, **kwargs: Any) -> str:
        if problem := config_problem(cfg, fit=self.subcommand == "fit"):
            raise UserError(problem)
        return self.parser.dump(cfg, **kwargs)


def _check_config_files(args: list[str]) -> None:
    """An empty or list-shaped YAML given with ``--config``: say so (jsonargparse says "Unexpected config:")."""
    for i, arg in enumerate(args):
        path = (
            arg.split("=", 1)[1]
            if arg.startswith("--config=")
            else (args[i + 1] if arg == "--config" and i + 1 < len(args) else None)
        )
        if path is None or not Path(path).is_file():
            continue
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise UserError(f"config {path!r} is not UTF-8 text (byte {err.start}: {err.reason})") from None
        except yaml.YAMLError:
            continue  # the parser reports where the YAML is broken
        if problem := config_shape_error(path, loaded):
            raise UserError(problem)


def _as_given(folder: Path | None) -> Path | None:
    """``folder`` relative to the working directory when it lies under it: the run folder a resume
    continues in, as the closing line's ``run folder:`` showed it before (``runs/tiny/lightning_logs/version_0``)."""
    if folder is None:
        return None
    try:
        return folder.relative_to(Path.cwd())
    except ValueError:
        return folder


def _place(logger: Any, folder: Path) -> None:
    """Point a TensorBoard or CSV logger at the existing run folder ``folder``
    (``<save_dir>/<name>/<version>``): its ``save_dir``, ``name`` and version are ``folder``'s, not the
    config's (a run folder copied, moved or renamed continues where its checkpoint lies, not in a new
    ``version_N`` under ``trainer.default_root_dir``). A folder not named ``version_N`` is the logger's
    version as a string, which Lightning's loggers take as the folder's name."""
    if isinstance(logger, CSVLogger):
        logger._save_dir = str(folder.parent.parent)
    else:
        logger._root_dir = str(folder.parent.parent)
    logger._name = folder.parent.name
    number = VERSION.fullmatch(folder.name)
    logger._version = int(number.group(1)) if number else folder.name


def _keep_csv_metrics(logger: Any) -> None:
    """A CSV logger placed in a run folder writes with :class:`ContinuedCSVWriter`: Lightning's own
    deletes the ``metrics.csv`` of a folder that is not empty (a resumed run's)."""
    if isinstance(logger, CSVLogger) and logger._experiment is None:
        logger._experiment = ContinuedCSVWriter(logger.log_dir)


class FederatedCLI(LightningCLI):
    """LightningCLI with a ``federation:`` section (a ``FederatedRun``, run by a :class:`FederatedLoop`).

    Args:
        signals: Records what the process exit status needs (see :class:`ProcessSignals`).
    """

    def __init__(self, *args: Any, signals: ProcessSignals | None = None, **kwargs: Any) -> None:
        self.signals = signals or ProcessSignals()
        self._held: list[HeldFolder] = []  # the run folders this run holds (version_folder.py)
        self._unclaimed: list[Any] = []  # loggers whose version folder is still to be claimed
        self._resumed_folder = self._claim_root = None
        super().__init__(*args, **kwargs)

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        finally:  # the locks go; a folder claimed but never written into goes too
            held, self._held = self._held, []
            for folder in held:
                folder.release()

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """LightningCLI's, without ``predict`` (see :data:`REMOVED`)."""
        return {k: v for k, v in LightningCLI.subcommands().items() if k not in REMOVED}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_federation_arguments(parser)

    def _set_seed(self) -> None:
        # numpy's bounds, named: Lightning's message ("-1 is not in bounds, numpy accepts from 0
        # to 4294967295") does not say which option (found by tests/boundary/test_configs.py).
        if problem := seed_problem(self._get(self.config, "seed_everything")):
            raise UserError(problem)
        super()._set_seed()

    def before_instantiate_classes(self) -> None:
        # The checks every reader of a config makes (run_parser.config_problem), before anything is built.
        config = self.config[self.subcommand] if self.subcommand else self.config
        if problem := config_problem(config, fit=self.subcommand == "fit"):
            raise UserError(problem)
        # the libraries' bars while the model is built (a GGUF file dequantized) follow the run's progress bar
        console.show_progress_bars(config.get("trainer.enable_progress_bar") is not False)

    def instantiate_classes(self) -> None:
        # jsonargparse wraps a constructor's ValueError ("model.lr must be > 0, got -0.1") in a
        # multi-line "does not validate against any of the Union subtypes"; raise our own.
        try:
            super().instantiate_classes()
        except ValueError as err:
            cause = err
            while cause.__cause__ is not None:
                cause = cause.__cause__
            if cause is err:
                raise
            raise cause from None
        stop_if_requested()  # a SIGTERM the model's or data's building dropped (callbacks/signals.py)

    def _parse_ckpt_path(self) -> None:
        # Lightning's version loads the checkpoint's model hyper-parameters over the config given,
        # so a changed value (LoRA r, lr, beta) is silently replaced by the old one. Here the
        # config given stands, and before_fit compares it with the run's own (an error if the
        # change would alter the result). A file that cannot be read is named here, first.
        self._saved_config = self._saved_weights = None
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path == "hpc":  # the file Lightning would pick, resumed by its path: every check of a file
            root = (self.config[subcommand].get("trainer") or {}).get("default_root_dir") or "."
            if found := hpc_file(root if isinstance(root, str) and "://" not in root else None):
                self.config[subcommand]["ckpt_path"] = ckpt_path = found
        if ckpt_path and "://" not in str(ckpt_path) and Path(ckpt_path).is_file():
            ckpt = read_checkpoint(ckpt_path, stage=subcommand)
            if "reference_cache" in ckpt and (problem := cache_state_problem(ckpt["reference_cache"])):
                raise CheckpointError(f"ckpt_path {str(ckpt_path)!r}: {problem}")  # the DPO module would restore it
            self._saved_config, self._saved_weights = saved_config(ckpt), ckpt  # checked by check_weights

    def _ckpt_path(self) -> Any:
        return (self.config_init.get(self.subcommand) or {}).get("ckpt_path") if self.subcommand else None

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        # Defaults a federated run needs, unless the config opts out or brings its own: a
        # per-round progress bar, and a `last.ckpt` after every round for `--ckpt_path`. One file
        # per round, replaced atomically: the top-1 checkpoint without a monitor, named `last`
        # (`save_last=True` would write it twice; `save_top_k=0` only at the end of fit;
        # `save_last="link"` removes the old epoch file before the link points at the new one).
        loop = FederatedLoop(self._get(self.config_init, "federation"))  # the run, in Lightning's fit
        callbacks.insert(0, loop)
        own = config.get("callbacks") or []
        given = list(callbacks) + (own if isinstance(own, list) else [own])  # one callback, as the Trainer takes
        if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in given):
            callbacks.append(FederatedProgressBar())
        if config.get("enable_checkpointing") is not False and not any(isinstance(c, ModelCheckpoint) for c in given):
            callbacks.append(
                ModelCheckpoint(filename="last", save_on_train_epoch_end=True, enable_version_counter=False)
            )
        if not config.get("plugins"):  # a kill during a save never leaves half a checkpoint
            config["plugins"] = [AtomicCheckpointIO()]
        callbacks.append(self.signals)
        if config.get("max_epochs") is None:
            config["max_epochs"] = loop.run.rounds  # federation.rounds decides; no "Setting it to 1000" notice
        if config.get("log_every_n_steps") is None and loop.run.local_steps:
            # Lightning's 50 is more optimizer steps than a small run takes in all (tiny: 30), which
            # left TensorBoard without a `train/*` scalar; once per client turn at the least.
            config["log_every_n_steps"] = min(LOG_EVERY_N_STEPS, loop.run.local_steps)
        resumed = _as_given(checkpoint_run(self._ckpt_path()))
        if config.get("logger") is False:
            # Without a logger Lightning writes everything into default_root_dir itself, so two
            # runs would overwrite each other's summary, config and adapter: give each its own
            # version folder, laid out as with the default logger.
            # Where it would go; claimed when the run is about to write (_claim_run_folder).
            runs = Path(config.get("default_root_dir") or os.getcwd()) / "lightning_logs"
            config["default_root_dir"] = str(resumed if resumed is not None else next_version(runs))
            self._claim_root, self._resumed_folder = (None, resumed) if resumed is not None else (runs, None)
        try:
            trainer = super()._instantiate_trainer(config, callbacks)
        except MisconfigurationException as err:
            # The Trainer's own bounds (val_check_interval, profiler, max_time...), found while it
            # is built, before fit starts or a file is written: bad input, exit 2, on one line.
            raise UserError(f"trainer: {' '.join(str(err).split())}") from None
        self._unclaimed = []
        for logger in trainer.loggers:
            if isinstance(logger, (TensorBoardLogger, CSVLogger)) and logger._version is None:
                if "://" in str(logger.root_dir):
                    continue  # a remote logger is left as Lightning makes it
                if resumed is not None:  # it continues where the checkpoint lies
                    _place(logger, resumed)
                    self._resumed_folder = resumed
                    _keep_csv_metrics(logger)
                else:
                    self._unclaimed.append(logger)
        return trainer

    def _claim_run_folder(self) -> None:
        """Claim the new run's version folder (``os.mkdir``, the next free number) and point the
        logger, or ``default_root_dir`` without one, at it: called after every check, right before
        the first file is written (two runs started together listed the same ``version_0``)."""
        stop_if_requested()  # a SIGTERM dropped while the data and checkpoint were checked: nothing written yet
        if not self.trainer.is_global_zero:
            return  # the other ranks write where rank 0 says (trainer.log_dir is a broadcast)
        claimed: dict[Path, HeldFolder] = {}
        for logger in self._unclaimed:  # loggers sharing one root share the version
            root = Path(logger.root_dir).absolute()
            if root not in claimed:
                claimed[root] = claim_version(root)
                self._held.append(claimed[root])
            logger._version = claimed[root].version
            _keep_csv_metrics(logger)  # the folder already holds .lock
        if self._claim_root is not None:
            held = claim_version(self._claim_root)
            self._held.append(held)
            self.trainer._default_root_dir = str(self._claim_root / held.folder.name)

    def _hold_resumed_folder(self) -> None:
        """Lock the folder a resumed run continues in: a second resume of it is refused."""
        if self._resumed_folder is not None and self.trainer.is_global_zero:
            # the hold the early check took before torch (federation/early_check.py), else a new one
            self._held.append(adopt(self._resumed_folder, f"ckpt_path {str(self._ckpt_path())!r}"))

    def before_fit(self) -> None:
        # Load, validate and partition the data now, before the Trainer creates log folders:
        # a data error then leaves nothing behind.
        self._hold_resumed_folder()  # first: a run holding it may be rewriting the checkpoint
        self._check_writable()
        if getattr(self.datamodule, "tokenizer", None) is None and hasattr(self.model, "tokenizer"):
            self.datamodule.tokenizer = self.model.tokenizer
        loop = next(c for c in self.trainer.callbacks if isinstance(c, FederatedLoop))
        dumped = self._parser(self.subcommand).dump(self.config[self.subcommand], skip_none=False, skip_validation=True)
        loop.server.report.config = yaml.safe_load(dumped)
        for callback in self.trainer.callbacks:  # config.yaml holds the K `batch_clients: auto` chose
            if isinstance(callback, RunConfigFile):
                callback.resolve = loop.resolved_options
        ckpt = self._ckpt_path()
        if ckpt == "" or "://" in str(ckpt):  # refused before torch (federation/early_check.py)
            raise CheckpointError(path_problem(str(ckpt)))
        if ckpt and ckpt not in ("last", "best", "hpc", "registry"):
            fs, path = fsspec.core.url_to_fs(str(ckpt))
            if not fs.isfile(path):  # the precheck's line (a folder, a FIFO, nothing there)
                raise CheckpointError(path_problem(str(ckpt)) or f"ckpt_path {ckpt!r}: no such checkpoint file")
            if "://" not in str(ckpt):  # readable, and written by a run of this config
                self.signals.resume_from = Path(ckpt)  # stopped before a round ends: resume from it again
                # the config first: a changed option (model.lr) is named as the user wrote it, not
                # as the optimizer state it makes differ (optimizer_states[0].param_groups[0].lr)
                allowed = check_resume(ckpt, loop.server.report.config, getattr(self, "_saved_config", None))
                self._check_weights(ckpt, loop.server)  # every part of it, before anything is written
                if getattr(self, "_saved_weights", None) is not None:  # another run's key: exit 2, nothing written
                    check_checkpoint_key(self._saved_weights, str(ckpt))  # before any line: a refusal is one line
                for change in allowed:
                    rank_zero_info(f"resuming {ckpt}: {change} (allowed)")
        # Earlier stages of a multi-stage method (FedBis: train the selector, label D_gen with it)
        # run here, each through this CLI, before the data is served.
        prepare_stages(self.model, self.datamodule, fit=run_cli, device=self.trainer.strategy.root_device)
        self.datamodule.private = privacy_enabled(loop.server.strategy, self.model)  # private: no per-client log figure
        if self.datamodule.private:  # no record of which examples were trained on (e.g. DPO's reference cache)
            self.model.keep_no_example_record()
        self.datamodule.setup("fit")
        # validates clients_per_round and plans the privacy budget (an impossible one: exit 2, nothing written)
        loop.server.bind(self.datamodule.num_clients, self.datamodule, self.model)
        if ckpt and getattr(self, "_saved_weights", None) is not None:  # C and z against the plan just made
            check_privacy_plan(ckpt, self._saved_weights, loop.server)
        self._claim_run_folder()  # every check passed: the run is about to write

    def after_fit(self) -> None:
        # trainer.log_dir is a collective under DDP (a broadcast from rank 0): every rank asks
        folder = RoundReport.output_dir(self.trainer)
        if self.trainer.is_global_zero:
            loop = next(c for c in self.trainer.callbacks if isinstance(c, FederatedLoop))
            privacy = loop.server.privacy
            completed = len(loop.server.report.history)  # a resume that trained nothing: its checkpoint's
            stopped = loop.stopped_before_a_round  # a resume with trainer.max_time spent: its summary.json kept
            print(closing_line(folder, getattr(privacy, "key_path", None), completed, stopped), flush=True)
        self.signals.finished = True  # a SIGTERM from now on does not make a completed run exit 143

    def _check_writable(self) -> None:
        """A folder the run cannot write is named by its option before anything is loaded or run."""
        root = self.trainer.default_root_dir
        if "://" not in str(root) and (why := unwritable(root)):
            raise UserError(f"trainer.default_root_dir {str(root)!r}: {why}")

    def _check_weights(self, ckpt: Any, server: Any = None) -> None:
        if getattr(self, "_saved_weights", None) is not None:
            check_checkpoint(ckpt, self._saved_weights, self.model, server, stage=self.subcommand)

    def _before_evaluation(self, stage: str) -> None:
        # As before_fit: the checkpoint and the data are checked before the Trainer writes logs.
        ckpt = self._ckpt_path()
        # <stage>_results.json goes into the checkpoint's run folder, where the logger is placed too; a
        # checkpoint outside one is evaluated in a new version_N under default_root_dir (_claim_run_folder)
        folder = checkpoint_run(ckpt) if ckpt and Path(ckpt).is_file() else None
        if folder is not None and self.trainer.is_global_zero:
            # held while the results are written: the early check's hold (early_check.hold_evaluated), else a new one
            self._held.append(adopt(folder, f"ckpt_path {str(ckpt)!r}", then=stage))
        self._check_writable()
        if folder is not None and (why := unwritable(folder)):
            raise UserError(f"ckpt_path {str(ckpt)!r}: {stage} writes {stage}_results.json into its run folder: {why}")
        if ckpt and "://" not in str(ckpt) and getattr(self, "_saved_weights", None) is not None:
            config = yaml.safe_load(
                self._parser(self.subcommand).dump(self.config[self.subcommand], skip_none=False, skip_validation=True)
            )
            check_evaluation(ckpt, config, self._saved_config)
            self._check_weights(ckpt)
        if isinstance(self.datamodule, FederatedDataModule):
            if getattr(self.datamodule, "tokenizer", None) is None and hasattr(self.model, "tokenizer"):
                self.datamodule.tokenizer = self.model.tokenizer
            self.datamodule.setup(stage)
            self._require_planned_examples(stage)
        self._claim_run_folder()

    def _require_planned_examples(self, stage: str) -> None:
        """Refuse ``stage`` when ``federation.eval_clients`` picks only clients without an example of its set,
        before anything is written (issue 41: it scored nothing, exit 0): the clients the loop will evaluate,
        with the checkpoint's last round (:meth:`LoopEvaluation.evaluation_layout`). Not in a private run:
        its sample is secret, and nothing computed on the clients' data is written unless opted in."""
        loop = next(c for c in self.trainer.callbacks if isinstance(c, FederatedLoop))
        plan, server = loop.evaluator.evaluation, loop.server
        if plan.clients in (None, "all") or privacy_enabled(server.strategy, self.model):
            return  # every client: the data module's own check (setup) holds
        if server.datamodule is not self.datamodule:  # as FederatedLoop.setup binds it
            server.bind(self.datamodule.num_clients, self.datamodule, self.model)
        report = ((getattr(self, "_saved_weights", None) or {}).get("federation") or {}).get("report") or {}
        rounds = report.get("rounds", len(report.get("history", [])))
        planned = plan.clients_for(server, max(rounds - 1, 0), standalone=True)
        options = f"federation.eval_clients={plan.clients!r}"
        if plan.clients == "panel":
            options += f" (federation.eval_panel_size={plan.panel_size})"
        else:
            options += f" (round {max(rounds, 1)}'s clients)"
        self.datamodule.require_planned_examples(stage, planned, options)

    def before_validate(self) -> None:
        self._before_evaluation("validate")

    def before_test(self) -> None:
        self._before_evaluation("test")


SUBCOMMANDS = {
    "fit": "Train a federation: each round, sampled clients train locally and the server aggregates.",
    "validate": "Evaluate a model on the clients' validation data.",
    "test": "Evaluate a model on the clients' test data (data.test_dataset).",
}
"""The subcommands LightningCLI runs, with their ``--help`` line (others: ``lightning_fed.cli.ELSEWHERE``)."""


def _usage(subcommand: str) -> str:
    return f"{PROG} {subcommand} [-h] [-c CONFIG] [--print_config[=flags]] [--<section>.<option> VALUE ...]"


def run_cli(args: list[str] | None = None, run: bool = True, signals: ProcessSignals | None = None) -> FederatedCLI:
    """Run the CLI in-process and return it; errors are raised (:func:`lightning_fed.cli.console_main` reports them)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    console.filter_library_handlers()  # Lightning's handlers exist now (lightning_fed/console.py)
    given = list(sys.argv[1:] if args is None else args)
    if given and given[0] in REMOVED:
        raise UserError(REMOVED[given[0]])
    if args is None:  # `--config feddpo`: a shipped config by name (lightning_fed/shipped_configs.py)
        sys.argv[1:] = resolve_config_args(sys.argv[1:])
    else:
        args = resolve_config_args(list(args))
    _check_config_files(list(sys.argv[1:] if args is None else args))
    load_strategy_plugins()  # installed plugins' strategies join the short names (strategies/registry.py)
    load_module_plugins()  # and their objectives (modules/registry.py)
    return FederatedCLI(
        FederatedModule,
        FederatedDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        parser_class=FederatedArgumentParser,
        # `--help` names the program and keeps its usage to one line (jsonargparse lists every
        # option there too); the sections below it list each option with its help.
        # No abbreviations: argparse took `--federation.local_step=2` as `local_steps` (issue 41 item 8).
        parser_kwargs={
            "prog": PROG,
            "allow_abbrev": False,
            **{
                name: {"usage": _usage(name), "description": text, "allow_abbrev": False}
                for name, text in SUBCOMMANDS.items()
            },
        },
        trainer_defaults=TRAINER_DEFAULTS,  # the same as every reader's (run_parser)
        # No `--optimizer` / `--lr_scheduler`: each objective builds its own optimizer from
        # `model.optimizer` and `model.lr` (one per client turn); Lightning's would replace the
        # module's `configure_optimizers`. Their pages listed every Optimizer subclass imported
        # at the time (accelerate's, bitsandbytes'), which tied `fit --help` to those versions.
        auto_configure_optimizers=False,
        seed_everything_default=SEED_DEFAULT,
        save_config_callback=RunConfigFile,  # an earlier run's config.yaml is replaced after a round
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
        signals=signals,
    )
