"""``lightning-fed``: the LightningCLI entry point.

``lightning-fed fit --config configs/demo.yaml`` builds the model (a
:class:`~lightning_fed.modules.FederatedModule` subclass), the data (a
:class:`~lightning_fed.datamodules.FederatedDataModule` subclass) and the
:class:`~lightning_fed.callbacks.FederatedLoop` (the ``federation:`` section), then fits.
Every option is listed by ``lightning-fed fit --help``.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import fsspec
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

import lightning_fed.strategies  # noqa: F401  (registers strategy names for class_path shorthands)
from lightning_fed.callbacks import FederatedLoop, FederatedProgressBar
from lightning_fed.datamodules import FederatedDataModule
from lightning_fed.federation.checkpoint_io import AtomicCheckpointIO
from lightning_fed.modules import FederatedModule


class FederatedArgumentParser(LightningArgumentParser):
    """Parse errors on one line (jsonargparse folds nested reasons over several)."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        super().error(" ".join(line.strip() for line in str(message).splitlines() if line.strip()), ex)


class FederatedCLI(LightningCLI):
    """LightningCLI with a ``federation:`` section for the :class:`FederatedLoop`."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(FederatedLoop, "federation")

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

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        # Defaults a federated run needs, unless the config opts out or brings its own: a
        # per-round progress bar, and a `last.ckpt` after every round for `--ckpt_path`.
        given = list(callbacks) + list(config.get("callbacks") or [])
        if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in given):
            callbacks.append(FederatedProgressBar())
        if config.get("enable_checkpointing") is not False and not any(isinstance(c, ModelCheckpoint) for c in given):
            callbacks.append(ModelCheckpoint(save_last=True, save_on_train_epoch_end=True))
        if not config.get("plugins"):  # a kill during a save never leaves half a checkpoint
            config["plugins"] = [AtomicCheckpointIO()]
        return super()._instantiate_trainer(config, callbacks)

    def before_fit(self) -> None:
        # Load, validate and partition the data now, before the Trainer creates log folders:
        # a data error then leaves nothing behind.
        if getattr(self.datamodule, "tokenizer", None) is None and hasattr(self.model, "tokenizer"):
            self.datamodule.tokenizer = self.model.tokenizer
        ckpt = self.config_init[self.subcommand].get("ckpt_path")
        if ckpt and ckpt not in ("last", "best", "hpc", "registry"):
            fs, path = fsspec.core.url_to_fs(str(ckpt))
            if not fs.isfile(path):
                raise FileNotFoundError(f"ckpt_path {ckpt!r}: no such checkpoint file")
        self.datamodule.setup("fit")
        loop = next(c for c in self.trainer.callbacks if isinstance(c, FederatedLoop))
        if loop.clients_per_round > self.datamodule.num_clients:
            raise ValueError(f"federation.clients_per_round={loop.clients_per_round} exceeds data.num_clients={self.datamodule.num_clients}")
        dumped = self._parser(self.subcommand).dump(self.config[self.subcommand], skip_none=False, skip_validation=True)
        loop.report.config = yaml.safe_load(dumped)


def main(args: list[str] | None = None, run: bool = True) -> FederatedCLI:
    """Console entry point (``lightning-fed``)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return FederatedCLI(
        FederatedModule,
        FederatedDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        parser_class=FederatedArgumentParser,
        # A full evaluation before round 1 gives the `initial` metrics of summary.json.
        trainer_defaults={"num_sanity_val_steps": -1},
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )


if __name__ == "__main__":
    main()
