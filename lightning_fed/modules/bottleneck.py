"""FedPDPO's bottleneck adapter: the personal fusion space between backbone and heads.

Zhu et al. (2026, arXiv:2603.19741), Sec. 3.2.3 and App. D.2.3.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

#: Attribute names under which Hugging Face decoder bodies keep their final normalisation
#: (Llama/Mistral/Qwen/SmolLM: ``norm``; GPT-2: ``ln_f``; Phi: ``final_layernorm``; GPT-NeoX:
#: ``final_layer_norm``).
FINAL_NORM_NAMES = ("norm", "ln_f", "final_layernorm", "final_layer_norm")


def final_norm_name(body: nn.Module) -> str:
    """The attribute of ``body`` holding the final normalisation applied to its last hidden state.

    Raises:
        ValueError: ``body`` has none of :data:`FINAL_NORM_NAMES`.
    """
    for name in FINAL_NORM_NAMES:
        if isinstance(getattr(body, name, None), nn.Module):
            return name
    raise ValueError(
        f"model.use_bottleneck: {type(body).__name__} has no final norm under any of {FINAL_NORM_NAMES};"
        " set model.use_bottleneck=false for this backbone"
    )


class BottleneckAdapter(nn.Module):
    """``z = Norm(z' + Decode(Dropout(GELU(Encode(z')))))`` (Eq. 9).

    ``z'`` is the LoRA-adapted backbone's residual stream *before* its final normalisation, and
    ``Norm`` (the paper's LayerNorm) is a personal, trainable copy of that final normalisation
    (``RMSNorm`` for SmolLM2/Llama, ``LayerNorm`` for the paper's DistilGPT2). ``Decode`` starts
    at zero. Together this makes the personalised model at initialisation exactly the base model
    (``Norm(z')`` is the backbone's own last hidden state, which the copied LM head reads). The
    paper leaves both choices open (App. D.2.3 says the residual "ensures refinement rather than
    replacement" but not how the projections are initialised or whether ``z'`` is normalised
    already); applying a fresh LayerNorm on top of the backbone's normalised output, as this
    package did before, re-scaled SmolLM2's logits by about 2x (temperature 2) at round 0.

    The module reads ``z'`` through :meth:`reading_before_norm`, which makes the body skip its
    final norm for one forward. The Eq. (9) literal, a fresh ``nn.LayerNorm`` over whatever
    ``z'`` the caller passes, is kept when no ``body`` is given.

    Args:
        dim: Width ``d`` of the backbone's last hidden state.
        hidden: Width of the bottleneck (256 in the paper).
        dropout: Dropout between the projections (0.1 in the paper).
        body: The backbone's decoder body; its final norm is copied as ``Norm``. ``None``: a
            fresh ``nn.LayerNorm(dim)``.
    """

    def __init__(self, dim: int, hidden: int = 256, dropout: float = 0.1, body: nn.Module | None = None) -> None:
        super().__init__()
        if hidden < 1:
            raise ValueError(f"model.bottleneck_dim must be >= 1, got {hidden}")
        if not 0 <= dropout < 1:
            raise ValueError(f"model.bottleneck_dropout must be in [0, 1), got {dropout}")
        self.encode = nn.Linear(dim, hidden)
        self.decode = nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)
        # Not a submodule reference to the backbone's norm (that one stays frozen and shared):
        # only its attribute name, to bypass it in reading_before_norm.
        self.norm_name = final_norm_name(body) if body is not None else None
        if body is None:
            self.norm = nn.LayerNorm(dim)
        else:
            self.norm = copy.deepcopy(getattr(body, self.norm_name))
            for p in self.norm.parameters():
                p.requires_grad_(True)
        nn.init.zeros_(self.decode.weight)
        nn.init.zeros_(self.decode.bias)

    @contextmanager
    def reading_before_norm(self, body: nn.Module) -> Iterator[None]:
        """Inside the block, ``body``'s final norm passes its input through, so its
        ``last_hidden_state`` is ``z'`` (the residual stream); nothing to do without a copied norm."""
        if self.norm_name is None:
            yield
            return
        handle = getattr(body, self.norm_name).register_forward_hook(lambda module, args, output: args[0])
        try:
            yield
        finally:
            handle.remove()

    def forward(self, z: Tensor) -> Tensor:
        # Eq. (9): residual bottleneck, then the (copied) normalisation
        return self.norm(z + self.decode(self.dropout(torch.nn.functional.gelu(self.encode(z)))))
