"""LayerExtract (FedBiOT, Wu et al., 2024, arXiv:2406.17706, Algorithm 2) and the offsite-tuning layout.

A decoder-only model of ``n`` transformer layers is split into

* the **adapter** ``A``: layers the clients fine-tune (FedBiOT: the last ``s`` layers;
  offsite-tuning / FedOT, Xiao et al. 2023 and Kuang et al. 2023: the first 2 and last 2);
* the **non-compressed emulator** ``E*``: every other layer, kept by the server;
* the **emulator** ``E``: a uniform layer drop of ``E*`` that the clients receive instead.

``beta`` is the *drop ratio*, as in the paper's experiments ("dropout rate beta = 0.2":
30 layers of LLaMA-7B become 24, and 28 become 22). Algorithm 2 as printed writes
``n' = floor(beta (n - s))`` with beta the *kept* fraction (Sec. 2.2's "compression
ratio"); that reading contradicts those numbers, so here ``n' = floor((1 - beta) (n - s))``
and ``beta`` is in ``[0, 1)``. The stride rule is Algorithm 2's: emulator layer ``j`` is
``E*[floor(j * (n_E* - 1) / (n' - 1))]``, so the first and last layers of ``E*`` are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from torch import nn

# model_type-independent: where a causal LM keeps its list of decoder layers
DECODER_PATHS = {"transformer.h": "GPT-2 style", "model.layers": "Llama style"}


@dataclass(frozen=True)
class LayerLayout:
    """Which original layer indices (0-based) form the adapter, ``E*`` and ``E``.

    The client-side model runs ``adapter_bottom + emulator + adapter_top``; the full model
    (AdapFu) runs ``adapter_bottom + non_compressed + adapter_top``, i.e. all layers.
    """

    num_layers: int
    adapter_bottom: tuple[int, ...]
    adapter_top: tuple[int, ...]
    non_compressed: tuple[int, ...]
    emulator: tuple[int, ...]

    @property
    def adapter(self) -> tuple[int, ...]:
        return self.adapter_bottom + self.adapter_top


def uniform_drop(indices: Sequence[int], beta: float, where: str = "beta") -> tuple[int, ...]:
    """Keep ``n' = floor((1 - beta) m)`` of the ``m`` layers ``indices`` with Algorithm 2's stride.

    Integer arithmetic, so ``floor(j * stride)`` never suffers from float rounding.
    With ``n' = 1`` the stride is undefined (``0 / 0`` in Algorithm 2); ``j = 0`` picks the
    first layer whatever the stride, so the emulator is ``(indices[0],)``.

    Raises:
        ValueError: If ``beta`` is outside ``[0, 1)`` or leaves no layer.
    """
    if not 0 <= beta < 1:
        raise ValueError(f"{where} (layer drop ratio) must be in [0, 1), got {beta!r}")
    m = len(indices)
    keep = Fraction(1) - Fraction(beta).limit_denominator(10**6)  # 0.2 -> 1/5 exactly
    n_emu = int(keep * m)  # floor, Alg. 2 line 2 (with beta read as the drop ratio)
    if n_emu < 1:
        raise ValueError(f"{where}={beta!r} drops all {m} non-adapter layers; lower it so at least one stays")
    if n_emu == 1:
        return (indices[0],)
    return tuple(indices[(j * (m - 1)) // (n_emu - 1)] for j in range(n_emu))  # Alg. 2 lines 5-7


def layer_extract(n: int, s: int, beta: float) -> LayerLayout:
    """FedBiOT's LayerExtract (Algorithm 2): adapter = last ``s`` layers, emulator = uniform drop of the rest.

    Example:
        >>> layer_extract(8, 2, 0.5).emulator  # E* = 0..5, n' = 3, stride 5/2
        (0, 2, 5)
    """
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"the model must have at least 2 decoder layers for LayerExtract, got {n!r}")
    if not isinstance(s, int) or not 1 <= s < n:
        raise ValueError(f"adapter_layers (s) must be in [1, {n - 1}] for a {n}-layer model, got {s!r}")
    rest = tuple(range(n - s))  # Alg. 2 line 3
    return LayerLayout(n, (), tuple(range(n - s, n)), rest, uniform_drop(rest, beta))


def offsite_layout(n: int, beta: float, bottom: int = 2, top: int = 2) -> LayerLayout:
    """The offsite-tuning / FedOT layout: adapter = first ``bottom`` and last ``top`` layers.

    ``L_A = {1, 2, n-1, n}`` in the paper's 1-based notation (Sec. 2.2, Step 1); the middle
    layers are ``E*`` and the emulator is their uniform drop with the same stride rule.
    """
    if not isinstance(n, int) or n < bottom + top + 1:
        raise ValueError(
            f"the offsite layout needs at least {bottom + top + 1} decoder layers (adapter {bottom}+{top} plus one), "
            f"got {n!r}"
        )
    rest = tuple(range(bottom, n - top))
    return LayerLayout(n, tuple(range(bottom)), tuple(range(n - top, n)), rest, uniform_drop(rest, beta))


def decoder_path(model: nn.Module) -> str:
    """Dotted path of ``model``'s decoder-layer ``ModuleList``: ``transformer.h`` or ``model.layers``.

    Raises:
        ValueError: For any other architecture, naming its class and model type.
    """
    for path in DECODER_PATHS:
        try:
            layers = model.get_submodule(path)
        except AttributeError:
            continue
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return path
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    found = ", ".join(f"{p} ({k})" for p, k in DECODER_PATHS.items())
    raise ValueError(
        f"LayerExtract: unsupported architecture {type(model).__name__} (model_type={model_type!r}):"
        f" no decoder layer list at {found}"
    )
