"""DPO through a personal LM head: the common base of FedPDPO, FedPer and FedRep.

The policy is ``head_i(M_i(z'))``: the frozen backbone with the shared LoRA gives the last
hidden state ``z'``; an optional personal :class:`BottleneckAdapter` ``M_i`` fuses it
(FedPDPO); a personal, *untied* copy of the backbone's output embeddings maps it to the
vocabulary. The DPO reference stays the backbone alone: adapters disabled, its own head,
no bottleneck. Personal modules are kept in ``personal_dtype`` whatever the backbone's dtype
(float32 by default; bfloat16 halves them, their gradients and their AdamW moments, which
PyTorch keeps in the parameters' dtype, and so what every client stores between rounds and
what a checkpoint holds per client). Their size is reported by :meth:`personal_state_nbytes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from lightning_fed.batching.personal_rows import scored_rows
from lightning_fed.modules.backbone import DTYPES
from lightning_fed.modules.bottleneck import BottleneckAdapter
from lightning_fed.modules.dpo import DPOModule
from lightning_fed.modules.lora import adapter_layers, adapters_disabled
from lightning_fed.modules.losses import sequence_log_probs
from lightning_fed.modules.preference import concatenated_inputs
from lightning_fed.modules.scored_logits import head_logits, scored_positions
from lightning_fed.option_rules import PERSONAL_HEAD_OWN, check


@contextmanager
def frozen(params: Iterable[nn.Parameter]) -> Iterator[None]:
    """Freeze the trainable ``params`` for the block (Algorithm 1's "freeze ..."), then restore."""
    params = [p for p in params if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def build_optimizer(kind: str, params: list[nn.Parameter], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """``adamw`` or ``sgd`` over ``params`` (as :class:`FederatedModule` builds its own)."""
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


class PersonalHeadDPO(DPOModule):
    """DPO whose policy reads through a personal LM head (and optionally a bottleneck).

    Args:
        use_bottleneck: Put a personal :class:`BottleneckAdapter` before the head.
        bottleneck_dim: Its hidden width.
        bottleneck_dropout: Its dropout.
        personal_dtype: dtype of the personal modules and of their optimizer state: float32,
            bfloat16 or float16. In bfloat16 an update smaller than about 1/256 of a weight
            rounds away, so keep the personal learning rate large enough (or float32).
        gradient_clip_val: Max gradient norm of each manual optimisation step (subclasses
            that optimise manually; Lightning's ``trainer.gradient_clip_val`` does not apply
            to manual optimisation). ``None`` disables clipping.
        **kwargs: See :class:`~lightning_fed.modules.DPOModule`.
    """

    #: Top-level attribute names of the personal modules (kept by each client).
    personal_modules: tuple[str, ...] = ("lm_head", "bottleneck")

    def __init__(
        self,
        *args: Any,
        use_bottleneck: bool = False,
        bottleneck_dim: int = 256,
        bottleneck_dropout: float = 0.1,
        personal_dtype: str = "float32",
        gradient_clip_val: float | None = None,
        **kwargs: Any,
    ) -> None:
        check(PERSONAL_HEAD_OWN, personal_dtype=personal_dtype, gradient_clip_val=gradient_clip_val)
        super().__init__(*args, **kwargs)
        self.gradient_clip_val = gradient_clip_val
        self.personal_dtype = DTYPES[personal_dtype]
        base = self.model.get_base_model()
        out = base.get_output_embeddings()
        if out is None or not hasattr(base, base.base_model_prefix):
            raise ValueError(f"model.backbone: {type(base).__name__} has no output embeddings/body to personalise")
        vocab, dim = out.weight.shape
        self.hidden_dim = dim
        # Initialised from the backbone's head, then untied: each client moves its own copy.
        self.lm_head = nn.Linear(dim, vocab, bias=getattr(out, "bias", None) is not None, dtype=self.personal_dtype)
        with torch.no_grad():
            self.lm_head.weight.copy_(out.weight)
            if self.lm_head.bias is not None:
                self.lm_head.bias.copy_(out.bias)
        self.bottleneck = (
            BottleneckAdapter(dim, bottleneck_dim, bottleneck_dropout, body=getattr(base, base.base_model_prefix)).to(
                self.personal_dtype
            )
            if use_bottleneck
            else None
        )

    # ------------------------------------------------------------------ state partition
    def is_personal(self, name: str) -> bool:
        return name.split(".", 1)[0] in self.personal_modules

    def setup(self, stage: str) -> None:
        # Subclasses add personal modules after this __init__ (FedPDPO's reward head); put every
        # trainable personal parameter in personal_dtype before the optimizers are built. Frozen
        # personal statistics (the EMA scale s, its count, the lr-decay state) stay float32.
        for name in self.personal_modules:
            module = getattr(self, name, None)
            if isinstance(module, nn.Module):
                for p in module.parameters():
                    if p.requires_grad and p.is_floating_point() and p.dtype != self.personal_dtype:
                        p.data = p.data.to(self.personal_dtype)
        self._parameters_by_name(refresh=True)

    def personal_state_nbytes(self) -> int:
        """Bytes of one client's personal state (what the store keeps per client)."""
        return sum(p.numel() * p.element_size() for p in self.personal_parameters().values())

    def on_fit_start(self) -> None:
        shared = sum(p.numel() * p.element_size() for p in self.shared_parameters().values())
        rank_zero_info(
            f"{type(self).__name__}: personal state {self.personal_state_nbytes():,} B per client (kept on the CPU,"
            f" on disk past federation.max_state_memory_bytes); shared state (uploaded) {shared:,} B"
        )

    # --------------------------------------------------------------------------- forward
    def backbone_features(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """``z'``: the LoRA-adapted backbone's last hidden state, ``(B, T, d)`` in ``personal_dtype``
        (with a bottleneck, the residual stream before the body's final norm, which ``M_i`` applies)."""
        base = self.model.get_base_model()
        body = getattr(base, base.base_model_prefix)  # LoRA layers are injected in place
        if self.bottleneck is None:
            return body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state.to(
                self.lm_head.weight.dtype
            )
        with self.bottleneck.reading_before_norm(body):  # z' before the final norm, which M_i applies (Eq. 9)
            z = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return z.to(self.lm_head.weight.dtype)

    def features(self, input_ids: Tensor, attention_mask: Tensor, backbone: Tensor | None = None) -> Tensor:
        """``z = M_i(z')`` (or ``z'`` without bottleneck): ``(B, T, d)`` features in ``personal_dtype``.

        Args:
            backbone: ``z'`` from an earlier :meth:`backbone_features` of the same inputs and the same
                LoRA weights, to reuse instead of running the backbone again.
        """
        z = backbone if backbone is not None else self.backbone_features(input_ids, attention_mask)
        return z if self.bottleneck is None else self.bottleneck(z)

    def policy_forward(
        self, batch: dict[str, Tensor], backbone: Tensor | None = None
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """One concatenated forward of chosen then rejected.

        Args:
            batch: A preference batch.
            backbone: ``z'`` of the concatenated batch already computed (see :meth:`features`).

        Returns:
            ``(log p(y|x) (2B,), features z (2B, T, d), inputs)`` where ``inputs`` holds the
            concatenated ``input_ids``, ``attention_mask`` and ``labels``.
        """
        inputs = concatenated_inputs(batch)
        z = self.features(inputs["input_ids"], inputs["attention_mask"], backbone)
        if self.scored_head:  # the personal head on the response positions only (issue 43)
            with scored_rows(self.lm_head, scored_positions(inputs["labels"])):  # a group's stacked heads
                logps = head_logits(self.lm_head, z, inputs["labels"]).sequence_log_probs()
        else:
            logps = sequence_log_probs(self.lm_head(z), inputs["labels"])
        return logps, z, inputs

    def sequence_log_probs(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(log p(y_w|x), log p(y_l|x))`` under the client's personalised policy."""
        logps, _, _ = self.policy_forward(batch)
        return logps.chunk(2)

    def compute_reference_log_probs(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The reference: the backbone alone (adapters disabled, its own head, no bottleneck).

        Fixed for the run (the backbone and its head are frozen; the personal head is a copy),
        so :meth:`reference_log_probs` may serve it from the cache."""
        # Flag-only disabling (lora.adapters_disabled): unlike PEFT's disable_adapter() it
        # leaves the requires_grad flags that the alternating steps set untouched.
        if self._adapter_layers is None:
            self._adapter_layers = adapter_layers(self.model)
        with torch.no_grad(), adapters_disabled(self._adapter_layers):
            return DPOModule.sequence_log_probs(self, batch)

    # ------------------------------------------------------------------- manual stepping
    def trainable_personal(self) -> list[nn.Parameter]:
        return [p for p in self.personal_parameters().values() if p.requires_grad]

    def trainable_shared(self) -> list[nn.Parameter]:
        return [p for p in self.shared_parameters().values() if p.requires_grad]

    def manual_step(self, optimizer: Any, loss: Tensor) -> None:
        """Backward, optional clipping, step (the loop's gradient correction runs in the step)."""
        optimizer.zero_grad()
        self.manual_backward(loss)
        if self.gradient_clip_val is not None:  # through the driver: a group clips each client on its own
            self.configure_gradient_clipping(optimizer, self.gradient_clip_val, "norm")
        optimizer.step()
        optimizer.zero_grad()

    def log_metrics(self, metrics: dict[str, Tensor], prefix: str = "train") -> None:
        bs = metrics["loss"].shape[0]
        for name, value in metrics.items():
            self.log(f"{prefix}/{name}", value.float().mean(), prog_bar=name in ("loss", "pref_acc"), batch_size=bs)
