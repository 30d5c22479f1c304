"""The base of every local objective: one frozen backbone, LoRA, and the state partition.

A :class:`FederatedModule` says which of its parameters are *shared* (exchanged with the
server), *personal* (kept by the client between rounds) and frozen (everything else, the
backbone). The :class:`~lightning_fed.callbacks.FederatedLoop` swaps only shared and
personal state in and out, so every simulated client trains on the same backbone storage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

from lightning_fed.modules.backbone import BackboneConfig, load_backbone
from lightning_fed.modules.lora import LoraSettings, apply_lora, is_adapter_param
from lightning_fed.option_rules import FEDERATED_MODULE, check

# The config dataclasses are part of the hyper-parameters saved in every checkpoint; allow
# them under torch.load(weights_only=True), which Lightning uses when resuming.
torch.serialization.add_safe_globals([BackboneConfig, LoraSettings])


class FederatedModule(pl.LightningModule):
    """A causal LM backbone with LoRA adapters, trained as one client's local objective.

    Subclasses implement ``training_step`` and ``validation_step``. ``validation_step``
    returns a dict ``{metric: Tensor of shape (B,)}`` of per-example values; the
    :class:`~lightning_fed.callbacks.FederatedLoop` averages them per client and overall.

    Args:
        backbone: Which language model to load or build.
        lora: LoRA settings; ``r``, ``alpha``, ``dropout``, ``target_modules``.
        lr: Local learning rate.
        weight_decay: Decoupled weight decay of AdamW (or L2 of SGD).
        optimizer: ``adamw`` or ``sgd``. Its state is reset for every client turn.
    """

    def __init__(
        self,
        backbone: BackboneConfig,
        lora: LoraSettings | None = None,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        optimizer: str = "adamw",
    ) -> None:
        super().__init__()
        # Hyper-parameters come back as plain dicts from some checkpoints and CLI paths.
        backbone = BackboneConfig(**backbone) if isinstance(backbone, dict) else backbone
        lora = LoraSettings(**lora) if isinstance(lora, dict) else lora
        check(FEDERATED_MODULE, optimizer=optimizer, lr=lr, weight_decay=weight_decay)  # lightning_fed/option_rules.py
        self.save_hyperparameters()
        model, self.tokenizer = load_backbone(backbone)
        model.requires_grad_(False)
        self.lora_settings = lora or LoraSettings()  # subclasses adding adapters reuse it
        self.model = apply_lora(model, self.lora_settings)
        # Lightning keeps each submodule's mode; a loaded HF model is in eval mode, which would
        # silently switch off every dropout (LoRA's included) during training.
        self.model.train()
        # Checkpoints hold trainable state only (see on_save_checkpoint).
        self.strict_loading = False

    # ------------------------------------------------------------------ state partition
    def is_personal(self, name: str) -> bool:
        """Whether parameter ``name`` is personal (kept by its client). None by default."""
        return False

    def is_shared(self, name: str) -> bool:
        """Whether parameter ``name`` is exchanged with the server: the non-personal adapters."""
        return is_adapter_param(name) and not self.is_personal(name)

    def _parameters_by_name(self, refresh: bool = False) -> dict[str, nn.Parameter]:
        # Walking a 135M model's modules costs milliseconds and the loop asks several times
        # per client turn. Parameters are only updated in place, so the index stays valid;
        # it is built on first use (after every subclass __init__ has added its parameters).
        index = self.__dict__.get("_param_index")
        if index is None or refresh:
            index = dict(self.named_parameters())
            self.__dict__["_param_index"] = index
        return index

    def shared_parameters(self) -> dict[str, nn.Parameter]:
        """The parameters exchanged with the server, by name."""
        return {n: p for n, p in self._parameters_by_name().items() if self.is_shared(n)}

    def personal_parameters(self) -> dict[str, nn.Parameter]:
        """The parameters that stay on their client, by name."""
        return {n: p for n, p in self._parameters_by_name().items() if self.is_personal(n)}

    @torch.no_grad()
    def load_state(self, state: Mapping[str, Tensor]) -> None:
        """Copy ``state`` into the named parameters in place (storage is never replaced)."""
        params = self._parameters_by_name()
        if not params.keys() >= state.keys():
            params = self._parameters_by_name(refresh=True)
        for name, value in state.items():
            params[name].copy_(value)

    # --------------------------------------------------------------------------- training
    #: Whether ``self.log`` while training reaches Lightning (loggers, progress bar, callback
    #: metrics). A private run sets it ``False`` (:meth:`lightning_fed.privacy.RunPrivacy.plan`):
    #: a client's training loss is a raw figure of its data.
    training_logs: bool = True

    #: Whether the LM head runs on the scored positions only (issue 43: the logits of the prompt and
    #: the padding are never read; :mod:`~lightning_fed.modules.scored_logits`). ``False`` runs it on
    #: every position, the path before; kept for ``benchmarks/step_flops.py`` and for the tests that
    #: show both paths train to the same values.
    scored_head: bool = True

    #: Whether clients of this module may train together (``federation.batch_clients``): declared by a
    #: module whose ``training_step`` returns
    #: :func:`~lightning_fed.batching.client_rows.per_client_loss` of losses that are each a function of
    #: one row (a pair, a sequence's tokens) and steps its optimizer automatically; subclasses inherit
    #: it, and one that replaces ``training_step`` with another reduction sets it back to ``False``
    #: (docs/developer/batching.md).
    batchable: ClassVar[bool] = False

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log``; while training, nothing when :attr:`training_logs` is off."""
        if not self.training_logs and self._trainer is not None and self._trainer.training:
            return
        super().log(name, value, *args, **kwargs)

    def keep_no_example_record(self) -> None:
        """Called before a private run starts (client-level DP or DP-SGD): drop any record of which
        examples were trained on that the run would keep or checkpoint. Nothing here; a module with
        such a record (DPO's reference cache) overrides it."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = [p for p in self.parameters() if p.requires_grad]
        hp = self.hparams
        if hp.optimizer == "sgd":
            return torch.optim.SGD(params, lr=hp.lr, weight_decay=hp.weight_decay)
        return torch.optim.AdamW(params, lr=hp.lr, weight_decay=hp.weight_decay)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Lightning's clip (``trainer.gradient_clip_val``), unless the run's turn driver clips the
        step itself (:meth:`~lightning_fed.federation.driver.TurnDriver.clip_gradients`: a group of
        clients trained together clips each client's gradient on its own)."""
        from lightning_fed.federation.driver import find_driver

        driver = find_driver(self._trainer)
        if driver is None or not driver.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """``validation_step``'s per-example metrics plus preference accuracy on summed and
        length-normalised log-probs, or ROUGE of greedy answers (see
        :mod:`lightning_fed.evaluation.test_step`)."""
        from lightning_fed.evaluation.test_step import evaluation_metrics

        return evaluation_metrics(self, batch, batch_idx)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The frozen backbone is rebuilt from the config; saving it would make every
        # checkpoint the size of the model.
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}

    def save_adapter(self, path: str | Path) -> None:
        """Write the current adapters as a PEFT folder (``PeftModel.from_pretrained`` loads it).

        PEFT keeps ``target_modules`` as a set and writes it in the process's hash order: sorted
        here, so that identical runs write identical ``adapter_config.json`` bytes."""
        self.model.save_pretrained(str(path))
        sort_target_modules(Path(path))


def sort_target_modules(folder: Path) -> None:
    """Rewrite each ``adapter_config.json`` under ``folder`` with its ``target_modules`` list sorted."""
    for file in sorted(folder.rglob("adapter_config.json")):
        config = json.loads(file.read_text())
        if isinstance(config.get("target_modules"), list):
            config["target_modules"] = sorted(config["target_modules"])
            file.write_text(json.dumps(config, indent=2, sort_keys=True))  # as PEFT writes it
