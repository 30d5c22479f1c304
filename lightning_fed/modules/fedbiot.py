"""Offsite tuning: the client-side model of FedBiOT (Wu et al., 2024, arXiv:2406.17706), FedOT and offsite-tuning.

The pre-trained model is split by :mod:`~lightning_fed.modules.layer_extract` into an
adapter ``A``, a non-compressed emulator ``E*`` and its compressed emulator ``E``.
``self.model`` *is* the client-side model: embeddings, ``E``, ``A``, final norm and head;
``E*`` lives outside it, in ``self.non_compressed``, and is never part of
:meth:`OffsiteModule.client_state`. Clients train the adapter with the task loss (the
proximal term of Eq. (1) is FedProx's correction with ``mu = epsilon``, see
:func:`adapter_proximal_term`); the server aligns ``E`` with
:class:`~lightning_fed.round_hooks.EmulatorAlignment` (Eq. (2)).

Evaluation reports both compositions of the paper (Sec. 2.2): AdapEmu (``A`` + ``E``, what a
client can run) and AdapFu (``A`` + ``E*``, the full model on the server).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

from lightning_fed.modules.backbone import BackboneConfig, load_backbone
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.layer_extract import LayerLayout, decoder_path, layer_extract, offsite_layout
from lightning_fed.modules.losses import sft_loss, token_log_probs
from lightning_fed.modules.scored_logits import ScoredLogits, scored_logits
from lightning_fed.option_rules import OFFSITE
from lightning_fed.option_rules import problems as rule_problems
from lightning_fed.state import state_nbytes
from lightning_fed.strategies.fedprox import proximal_term

COMPOSITIONS = ("emulator", "full")
GENERATION_METRICS = ("exact_match", "rougeL")


def adapter_proximal_term(adapter: Mapping[str, Tensor], received: Mapping[str, Tensor], epsilon: float) -> Tensor:
    """``epsilon/2 * ||w_A - w_A^(t)||_2^2``, the regulariser of Eq. (1).

    Its gradient is ``epsilon * (w_A - w_A^(t))`` (Algorithm 1, line 11), which is exactly
    what :class:`~lightning_fed.strategies.FedProx` adds to the shared parameters' gradients
    with ``mu = epsilon``; FedBiOT's configs therefore use ``FedProx(mu=epsilon)``.
    """
    return proximal_term(adapter, received, epsilon)


class OffsiteModule(FederatedModule):
    """Offsite tuning of full adapter layers, with AdapEmu and AdapFu evaluation.

    Args:
        backbone: The pre-trained model (GPT-2 style ``transformer.h`` or Llama style
            ``model.layers``).
        layout: ``fedbiot`` (adapter = last ``adapter_layers`` layers, Algorithm 2) or
            ``offsite`` (adapter = first 2 and last 2 layers: offsite-tuning and FedOT).
        adapter_layers: ``s``, the adapter size of the ``fedbiot`` layout.
        beta: Layer drop ratio of the emulator, in ``[0, 1)`` (the paper's "dropout rate").
        lr: Local learning rate (the paper uses SGD).
        weight_decay: Weight decay of the optimizer.
        optimizer: ``sgd`` or ``adamw``.
        generation_metric: Also generate greedily at validation and score the answer:
            ``exact_match`` (math-style answers) or ``rougeL``; ``None`` for losses only.
        max_new_tokens: Most generated tokens per answer.
    """

    def __init__(
        self,
        backbone: BackboneConfig,
        layout: str = "fedbiot",
        adapter_layers: int = 2,
        beta: float = 0.5,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        optimizer: str = "sgd",
        generation_metric: str | None = None,
        max_new_tokens: int = 32,
    ) -> None:
        # FederatedModule.__init__ wraps the backbone with LoRA; the offsite adapter is made
        # of whole decoder layers, so only LightningModule's own initialisation runs here.
        pl.LightningModule.__init__(self)
        backbone = BackboneConfig(**backbone) if isinstance(backbone, dict) else backbone
        problems = rule_problems(
            OFFSITE, {"layout": layout, "optimizer": optimizer, "lr": lr, "weight_decay": weight_decay}
        )
        if generation_metric is not None and generation_metric not in GENERATION_METRICS:
            problems.append(
                f"model.generation_metric must be None or one of {GENERATION_METRICS}, got {generation_metric!r}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        # Explicit: Lightning's frame inspection finds init args through zero-argument super().
        self.save_hyperparameters(
            dict(
                backbone=backbone,
                layout=layout,
                adapter_layers=adapter_layers,
                beta=beta,
                lr=lr,
                weight_decay=weight_decay,
                optimizer=optimizer,
                generation_metric=generation_metric,
                max_new_tokens=max_new_tokens,
            )
        )
        model, self.tokenizer = load_backbone(backbone)
        model.requires_grad_(False)
        self._decoder_path = decoder_path(model)  # one-line error for other architectures
        layers = model.get_submodule(self._decoder_path)
        n = len(layers)
        self.layout: LayerLayout = (
            layer_extract(n, adapter_layers, beta) if layout == "fedbiot" else offsite_layout(n, beta)
        )
        lay = self.layout
        # E* stays with the server; E starts as a copy of the kept layers of E*.
        self.non_compressed = nn.ModuleList([layers[i] for i in lay.non_compressed])
        self._bottom = [layers[i] for i in lay.adapter_bottom]
        self._top = [layers[i] for i in lay.adapter_top]
        emulator = [copy.deepcopy(layers[i]) for i in lay.emulator]
        self._set_stack(model, self._bottom + emulator + self._top)
        for layer in self._bottom + self._top:
            layer.requires_grad_(True)
        self.model = model
        self.model.train()  # a loaded HF model is in eval mode (see FederatedModule)
        self.non_compressed.train()  # only ever run under eval(); train mode silences Lightning's warning
        self.strict_loading = False
        # Names inside the client stack: adapter at the two ends, emulator in the middle.
        nb, ne = len(lay.adapter_bottom), len(lay.emulator)
        prefix = f"model.{self._decoder_path}."
        self._adapter_prefixes = tuple(
            f"{prefix}{i}." for i in [*range(nb), *range(nb + ne, nb + ne + len(lay.adapter_top))]
        )
        self._emulator_prefixes = tuple(f"{prefix}{i}." for i in range(nb, nb + ne))
        self._parameters_by_name(refresh=True)  # indexed now, never while E* is swapped in

    # ------------------------------------------------------------------ state partition
    def is_shared(self, name: str) -> bool:
        """The adapter layers' parameters: what clients train and upload (FedAvg)."""
        return name.startswith(self._adapter_prefixes)

    def emulator_parameters(self) -> dict[str, nn.Parameter]:
        """``w_E``: server state, trained by emulator alignment, sent down each round."""
        return {n: p for n, p in self._parameters_by_name().items() if n.startswith(self._emulator_prefixes)}

    def client_state(self) -> dict[str, Tensor]:
        """Everything a client receives: the client-side model (embeddings, ``E``, ``A``, head).

        Keyed like ``self.model``'s parameters; a tied input/output embedding counts once.
        """
        return {n: p.detach() for n, p in self.model.named_parameters()}

    def frozen_client_state(self) -> dict[str, Tensor]:
        """The part of :meth:`client_state` that never changes (embeddings, norms, head)."""
        emu, adapter = self.emulator_parameters(), self.shared_parameters()
        return {k: v for k, v in self.client_state().items() if f"model.{k}" not in emu and f"model.{k}" not in adapter}

    def full_model_nbytes(self) -> int:
        """Bytes of the whole pre-trained model (what the server protects)."""
        with self.composition("full"):
            return state_nbytes({n: p for n, p in self.model.named_parameters()})

    # ----------------------------------------------------------------------- compositions
    @staticmethod
    def _parent(model: nn.Module, path: str) -> tuple[nn.Module, str]:
        parent, _, attr = path.rpartition(".")
        return model.get_submodule(parent), attr

    def _set_stack(self, model: nn.Module, layers: list[nn.Module]) -> nn.ModuleList:
        parent, attr = self._parent(model, self._decoder_path)
        previous = getattr(parent, attr)
        setattr(parent, attr, nn.ModuleList(layers))
        return previous

    @contextmanager
    def composition(self, which: str) -> Iterator[None]:
        """Run ``self.model`` as AdapEmu (``"emulator"``, the default) or AdapFu (``"full"``)."""
        if which not in COMPOSITIONS:
            raise ValueError(f"`which` must be one of {COMPOSITIONS}, got {which!r}")
        if which == "emulator":
            yield
            return
        previous = self._set_stack(self.model, self._bottom + list(self.non_compressed) + self._top)
        try:
            yield
        finally:
            self._set_stack(self.model, list(previous))

    @contextmanager
    def emulator_output(self, which: str) -> Iterator[list[Tensor]]:
        """Capture ``E(x)`` (``which="emulator"``) or ``E*(x)`` (``"full"``) of the next forward.

        That is the hidden state leaving the last layer of ``E`` / ``E*``, before the top
        adapter; yields a list that holds it once the forward has run.
        """
        last = self.model.get_submodule(self._decoder_path)[
            len(self.layout.adapter_bottom) + len(self.layout.emulator) - 1
        ]
        if which == "full":
            last = self.non_compressed[-1]
        captured: list[Tensor] = []
        handle = last.register_forward_hook(
            lambda _m, _a, out: captured.append(out[0] if isinstance(out, tuple) else out)
        )
        try:
            yield captured
        finally:
            handle.remove()

    # --------------------------------------------------------------------------- training
    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits

    def scored(self, batch: Mapping[str, Tensor]) -> ScoredLogits:
        """The logits of the response positions only (:mod:`~lightning_fed.modules.scored_logits`)."""
        return scored_logits(self.model, batch["input_ids"], batch["attention_mask"], batch["labels"], use_cache=False)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        # F_m of Eq. (1), the response-token NLL; the prox term is FedProx's
        loss = self.scored(batch).nll().mean() if self.scored_head else sft_loss(self(batch), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    @torch.no_grad()
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for name, which in (("adapemu", "emulator"), ("adapfu", "full")):
            with self.composition(which):
                if self.scored_head:
                    scored = self.scored(batch)
                    (logps, mask), hits = scored.token_log_probs(), scored.hits()
                else:
                    logits = self(batch)
                    logps, mask = token_log_probs(logits, batch["labels"])
                    hits = (logits[:, :-1].argmax(-1) == batch["labels"][:, 1:]) & mask
                n = mask.sum(-1).clamp(min=1)
                nll = -logps.sum(-1) / n
                out[f"{name}_loss"], out[f"{name}_ppl"] = nll, nll.clamp(max=50).exp()
                out[f"{name}_token_acc"] = hits.sum(-1) / n
                if self.hparams.generation_metric:
                    out[f"{name}_{self.hparams.generation_metric}"] = self._generation_scores(batch)
        return out

    def _generation_scores(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Greedy answers to the batch's prompts, scored against the reference responses."""
        from lightning_fed.evaluation.generation import generate_responses
        from lightning_fed.evaluation.rouge import rouge_per_example

        prompts, refs = [], []
        for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
            scored = (labels != -100) & mask.bool()
            first = int(scored.nonzero()[0]) if scored.any() else int(mask.sum())
            prompts.append(self.tokenizer.decode(ids[:first].tolist(), skip_special_tokens=True))
            refs.append(self.tokenizer.decode(labels[scored].tolist(), skip_special_tokens=True))
        answers = generate_responses(self.model, self.tokenizer, prompts, self.hparams.max_new_tokens)
        if self.hparams.generation_metric == "exact_match":
            scores = [float(a.strip() == r.strip()) for a, r in zip(answers, refs)]
        else:
            scores = rouge_per_example(answers, refs, types=["rougeL"])["rougeL"]
        return torch.tensor(scores, device=batch["input_ids"].device)

    def save_adapter(self, path: str | Path) -> None:
        """Write the adapter layers (``adapter.pt``, parameter name -> tensor) and the layout."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in self.shared_parameters().items()}, path / "adapter.pt")
        (path / "layout.txt").write_text(f"{self.layout}\n")
