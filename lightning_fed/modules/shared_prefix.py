"""The prompt once per pair: chosen and rejected as one sequence with a shared prefix.

A preference pair's chosen and rejected rows start with the same prompt; the concatenated forward
(:func:`~lightning_fed.modules.preference.concatenated_inputs`) runs it twice. Wang & Hegde (2024,
"Accelerating Direct Preference Optimization with Prefix Sharing", arXiv:2410.20305) run each pair as
one sequence ``[prompt | chosen response | rejected response]`` with a block mask: the prompt is
causal, the chosen response attends to the prompt and to itself, the rejected response to the prompt
and to itself, never to the chosen one; the rejected response's position ids restart at the prompt's
end. Every token then sees exactly the keys, at exactly the positions, it sees in its own row, so
every scored log-probability is the same computation, to float rounding (the attention's reduction
over a longer, partly masked key axis); the prompt's tokens are computed once.

:func:`pair_layout` builds that layout from a preference batch (right- or left-padded, rows of any
prompt length, holes in the mask allowed): for pair ``i`` the shared prefix is the longest run of
positions where both rows have the same token, the same mask bit and no scored label; the packed row
is the prefix, then the chosen row's positions past it up to its last attended one, then the
rejected row's; position ids are each token's index in its own row, which is what the unshared
forward uses (Transformers numbers positions ``0..T-1`` whatever the padding). :func:`shared_log_probs`
runs the model once on it, with the LM head on the scored positions only
(:mod:`~lightning_fed.modules.scored_logits`, a position read by both sides gathered twice, the
gradient flowing back through both), and returns the rows' ``log p(y|x)`` in the order the unshared
path returns them.

The model receives the mask as a 4D ``(B, 1, W, W)`` tensor, which Transformers' ``masking_utils``
passes through unchanged ("If the mask is already 4D, simply return as-is (it was already prepared,
or it is custom)"): boolean (``True`` attends) for SDPA, additive (0 or the dtype's minimum) for eager
attention. Only architectures whose attention reads that mask and whose positions come from
``position_ids`` alone are laid out so (:data:`SHARED_PREFIX_MODELS`; sliding-window attention is
excluded: a custom mask would drop the window); any other model, attention implementation or batch
(a scored position past its row's last attended token) runs the unshared path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lightning_fed.modules.losses import IGNORE_INDEX
from lightning_fed.modules.scored_logits import ScoredLogits, head_on_positions, output_head, scored_positions

#: ``model_type`` s whose decoder takes a custom 4D mask and ``position_ids`` as they are (absolute
#: or rotary positions from ``position_ids``, the mask through ``masking_utils``), tested exact.
SHARED_PREFIX_MODELS = frozenset({"gpt2", "llama", "qwen2"})
#: Attention implementations the mask is built for: boolean for SDPA, additive for eager.
ATTENTION_MASKS = frozenset({"sdpa", "eager"})
SIDES = ("chosen", "rejected")


def model_config(model: nn.Module) -> object | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, "config", None)


def supports_shared_prefix(model: nn.Module) -> bool:
    """Whether ``model`` (a Hugging Face / PEFT causal LM) runs the shared-prefix layout exactly."""
    config = model_config(model)
    if config is None or getattr(config, "model_type", None) not in SHARED_PREFIX_MODELS:
        return False
    if (
        getattr(config, "use_sliding_window", False)
        or getattr(config, "layer_types", None)
        and any(t != "full_attention" for t in config.layer_types)
    ):
        return False
    return getattr(config, "_attn_implementation", None) in ATTENTION_MASKS


@dataclass
class PairLayout:
    """A preference batch as one packed sequence per pair.

    Attributes:
        input_ids: ``(B, W)`` the packed tokens (0 past each pair's end).
        position_ids: ``(B, W)`` each token's index in its own row.
        attend: ``(B, 1, W, W)`` bool: query ``q`` attends key ``k``.
        index: ``(2B, T)`` the packed position of each position of the chosen rows, then the
            rejected rows (0 where a position is not packed: never a scored one).
        prefix: ``(B,)`` each pair's shared prefix length.
    """

    input_ids: Tensor
    position_ids: Tensor
    attend: Tensor
    index: Tensor
    prefix: Tensor

    def mask_for(self, attn_implementation: str, dtype: torch.dtype) -> Tensor:
        """The 4D mask the model's attention reads: boolean for SDPA, additive for eager."""
        if attn_implementation == "eager":
            return torch.zeros(self.attend.shape, dtype=dtype, device=self.attend.device).masked_fill(
                ~self.attend, torch.finfo(dtype).min
            )
        return self.attend


def last_attended(mask: Tensor) -> Tensor:
    """``(B,)`` one past each row's last attended position (0 when none)."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return (mask.bool() * positions).amax(-1)


def pair_layout(batch: dict[str, Tensor]) -> PairLayout | None:
    """The shared-prefix layout of a preference batch, or ``None`` when a scored position would not
    be packed (a label on a token past its row's last attended position)."""
    ids = {s: batch[f"{s}_input_ids"] for s in SIDES}
    masks = {s: batch[f"{s}_attention_mask"] for s in SIDES}
    labels = {s: batch[f"{s}_labels"] for s in SIDES}
    device = ids["chosen"].device
    n, width = ids["chosen"].shape
    ends = {s: last_attended(masks[s]) for s in SIDES}
    for s in SIDES:  # the last scored position predicts the last label: it must be packed
        scored = scored_positions(labels[s])
        if bool((scored & (torch.arange(width, device=device) >= ends[s].unsqueeze(1))).any()):
            return None
    # The prefix: positions where both rows agree (token, mask bit) and neither is scored.
    differ = (
        (ids["chosen"] != ids["rejected"])
        | (masks["chosen"] != masks["rejected"])
        | (labels["chosen"] != IGNORE_INDEX)
        | (labels["rejected"] != IGNORE_INDEX)
    )
    common = torch.minimum(ends["chosen"], ends["rejected"])
    first_diff = torch.where(differ.any(-1), differ.int().argmax(-1), torch.full_like(common, width))
    prefix = torch.minimum(first_diff, common)
    lengths = ends["chosen"] + ends["rejected"] - prefix  # packed tokens of each pair
    packed = int(lengths.max()) if n else 0
    packed = max(packed, 1)
    t = torch.arange(width, device=device).expand(n, width)
    # Packed position of each original position: the chosen row keeps its own (prefix, then its
    # response), the rejected response follows the chosen row's last attended token.
    chosen_at = t
    rejected_at = torch.where(t < prefix.unsqueeze(1), t, ends["chosen"].unsqueeze(1) + t - prefix.unsqueeze(1))
    chosen_in = t < ends["chosen"].unsqueeze(1)
    rejected_in = (t >= prefix.unsqueeze(1)) & (t < ends["rejected"].unsqueeze(1))
    rows = torch.arange(n, device=device).unsqueeze(1).expand(n, width)
    segment = torch.full((n, packed), 3, dtype=torch.long, device=device)  # 0 prefix, 1 chosen, 2 rejected, 3 pad
    position = torch.zeros((n, packed), dtype=torch.long, device=device)
    valid = torch.zeros((n, packed), dtype=torch.bool, device=device)
    input_ids = torch.zeros((n, packed), dtype=ids["chosen"].dtype, device=device)
    for side, at, keep, seg in (("chosen", chosen_at, chosen_in, 1), ("rejected", rejected_at, rejected_in, 2)):
        r, c = rows[keep], at[keep]
        input_ids[r, c] = ids[side][keep]
        position[r, c] = t[keep]
        valid[r, c] = masks[side][keep].bool()
        in_prefix = t[keep] < prefix[r]
        segment[r, c] = torch.where(in_prefix, torch.zeros_like(c), torch.full_like(c, seg))
    q_seg, k_seg = segment.unsqueeze(2), segment.unsqueeze(1)
    attend = (
        valid.unsqueeze(1)
        & (position.unsqueeze(1) <= position.unsqueeze(2))
        & ((k_seg == q_seg) | (k_seg == 0))
        & (q_seg != 3)
    )
    # A query with no key at all (padding; a masked position) attends to itself, so that SDPA gives
    # no NaN; its output is read by nothing (a masked token is no one's key, and is never scored).
    alone = ~attend.any(-1, keepdim=True)
    attend = attend | (alone & torch.eye(packed, dtype=torch.bool, device=device))
    index = torch.cat(
        [torch.where(chosen_in, chosen_at, 0), torch.where(rejected_in | (t < prefix.unsqueeze(1)), rejected_at, 0)]
    )
    return PairLayout(input_ids, position, attend.unsqueeze(1), index, prefix)


def shared_log_probs(model: nn.Module, batch: dict[str, Tensor], layout: PairLayout, **kwargs: object) -> Tensor:
    """``(2B,)`` summed log-probabilities of the chosen rows then the rejected rows (the unshared
    path's order), from one forward of ``model`` over ``layout``.

    Args:
        model: A Hugging Face / PEFT causal LM that :func:`supports_shared_prefix`.
        batch: The preference batch ``layout`` was built from.
        layout: :func:`pair_layout` of ``batch``.
        **kwargs: More arguments of the forward (``use_cache=False``).
    """
    config = model_config(model)
    dtype = next(model.parameters()).dtype
    mask = layout.mask_for(config._attn_implementation, dtype)
    labels = torch.cat([batch["chosen_labels"], batch["rejected_labels"]])
    keep = scored_positions(labels)
    target = labels[:, 1:][keep[:, :-1]]
    n, packed = layout.input_ids.shape
    pair = torch.arange(2 * n, device=keep.device).remainder(n).unsqueeze(1)
    flat = (pair * packed + layout.index)[keep]  # (M,) in the unshared path's row-major order
    forward = {"input_ids": layout.input_ids, "attention_mask": mask, "position_ids": layout.position_ids, **kwargs}
    head = output_head(model)
    if head is None:  # an adapted head: every position, gathered after
        logits = model(**forward).logits
        return ScoredLogits(logits.flatten(0, 1)[flat], target, keep).sequence_log_probs()
    with head_on_positions(head, flat):
        logits = model(**forward).logits
    return ScoredLogits(logits.reshape(-1, logits.shape[-1]), target, keep).sequence_log_probs()
