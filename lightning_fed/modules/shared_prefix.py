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
positions where both rows have the same token, the same mask bit and the same label; the packed row
is the prefix, then the chosen row's positions past it up to its last attended one, then the
rejected row's; position ids are each token's index in its own row, which is what the unshared
forward uses (Transformers numbers positions ``0..T-1`` whatever the padding). :func:`shared_log_probs`
runs the model once on it, with the LM head on the scored positions only
(:mod:`~lightning_fed.modules.scored_logits`, a position read by both sides gathered twice, the
gradient flowing back through both), and returns the rows' ``log p(y|x)`` in the order the unshared
path returns them.

**No padding between pairs**: with a ``capacity``, :func:`pack_rows` concatenates a client's
consecutive pairs into rows of up to that many tokens (or the widest pair's), a block-diagonal mask
between them and each token's position id unchanged, so a row is padded only at its end; a row holds
one client's pairs (the batching engine gives each packed row its client's adapter, through
:func:`~lightning_fed.batching.client_rows.packed_rows`).

The model receives the mask as a 4D ``(B, 1, W, W)`` tensor, which Transformers' ``masking_utils``
passes through unchanged ("If the mask is already 4D, simply return as-is (it was already prepared,
or it is custom)"): boolean (``True`` attends) for SDPA, additive (0 or the dtype's minimum) for eager
attention. Only architectures whose attention reads that mask and whose positions come from
``position_ids`` alone are laid out so (:data:`SHARED_PREFIX_MODELS`; sliding-window attention is
excluded: a custom mask would drop the window); any other model, attention implementation or batch
(a scored position past its row's last attended token) runs the unshared path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lightning_fed.batching.client_rows import packed_rows
from lightning_fed.modules.scored_logits import ScoredLogits, head_on_positions, output_head, scored_positions

#: ``model_type`` s whose decoder takes a custom 4D mask and ``position_ids`` as they are (absolute
#: or rotary positions from ``position_ids``, the mask through ``masking_utils``), tested exact.
SHARED_PREFIX_MODELS = frozenset({"gpt2", "llama", "qwen2"})
#: Attention implementations the mask is built for: boolean for SDPA, additive for eager.
ATTENTION_MASKS = frozenset({"sdpa", "eager"})
SIDES = ("chosen", "rejected")
#: A packed row holds a client's consecutive pairs up to this many tokens (or its widest pair's):
#: the attention over a row's masked keys grows with the row (at SmolLM2-135M's width the attention
#: of a 128-token row is ~4 % of its linear layers' FLOPs), the padding it removes is up to half a row.
PACK_TOKENS = 128


def pack_capacity(model: nn.Module) -> int | None:
    """How many tokens a packed row of ``model``'s forward may hold (:data:`PACK_TOKENS`), or ``None``
    (a row per pair) under gradient checkpointing: its recomputation in the backward runs outside the
    forward's :func:`~lightning_fed.batching.client_rows.packed_rows`, where the batching engine would
    not know each packed row's client."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    name = (
        "is_activation_checkpointing"
        if hasattr(type(base), "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    return None if getattr(base, name, False) else PACK_TOKENS


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
    """A preference batch as packed rows: each pair one sequence, several pairs of one client in a row.

    Attributes:
        input_ids: ``(R, W)`` the packed tokens (0 past each row's end).
        position_ids: ``(R, W)`` each token's index in its own (unpacked) row.
        attend: ``(R, 1, W, W)`` bool: query ``q`` attends key ``k``.
        index: ``(2B, T)`` the flat packed position (``row * W + column``) of each position of the
            chosen rows, then the rejected rows (its row's first position where a position is not
            packed: never a scored one).
        prefix: ``(B,)`` each pair's shared prefix length.
        row_of_pair: ``(B,)`` the packed row each pair is in (non-decreasing: rows in pair order).
    """

    input_ids: Tensor
    position_ids: Tensor
    attend: Tensor
    index: Tensor
    prefix: Tensor
    row_of_pair: Tensor

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


def pair_layout(
    batch: Mapping[str, Tensor], client_ids: Tensor | None = None, capacity: int | None = None
) -> PairLayout | None:
    """The shared-prefix layout of a preference batch, or ``None`` when a scored position would not
    be packed (a label on a token past its row's last attended position).

    Args:
        batch: A preference batch (``chosen_*``/``rejected_*``).
        client_ids: ``(B,)`` each pair's client: a packed row holds one client's pairs only (the
            batching engine gives each row its client's adapter); ``None``: one client.
        capacity: Pack consecutive pairs of a client into one row while it stays within
            ``max(capacity, the widest pair)`` tokens (:func:`pack_rows`); ``None``: a row per pair.
    """
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
    # The prefix: positions where both rows agree (token, mask bit, label): the prompt, and the
    # responses' common first tokens (the same keys, and each side's logits read there predict the same
    # token, gathered once per side).
    differ = (
        (ids["chosen"] != ids["rejected"])
        | (masks["chosen"] != masks["rejected"])
        | (labels["chosen"] != labels["rejected"])
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
    pairs = PairLayout(input_ids, position, attend.unsqueeze(1), index, prefix, torch.arange(n, device=device))
    if capacity is None or n < 2:
        pairs.index = index + packed * torch.arange(2 * n, device=device).remainder(n).unsqueeze(1)
        return pairs
    return pack_rows(pairs, lengths, client_ids, capacity)


def row_assignment(lengths: list[int], clients: list[int], capacity: int) -> tuple[list[int], list[int]]:
    """Each pair's packed row and its offset in it: consecutive pairs of the same client share a
    row while its length stays within ``capacity`` (first fit in order: the pairs' order is kept)."""
    rows, offsets, row, used = [], [], -1, capacity
    for i, (length, client) in enumerate(zip(lengths, clients)):
        if i == 0 or client != clients[i - 1] or used + length > capacity:
            row, used = row + 1, 0
        rows.append(row)
        offsets.append(used)
        used += length
    return rows, offsets


def pack_rows(pairs: PairLayout, lengths: Tensor, client_ids: Tensor | None, capacity: int) -> PairLayout:
    """``pairs`` (one row per pair, :func:`pair_layout`) packed: a client's consecutive pairs
    concatenated into rows of at most ``max(capacity, widest pair)`` tokens, a block-diagonal mask
    between them (a token attends only to its own pair's keys, as in its pair's row), each token's
    position id unchanged; no padding between pairs, only at the end of a row.

    The attention then runs over a row of several pairs, its masked keys computed and discarded: a
    cost that grows with the row, which ``capacity`` bounds (the body's linear layers cost the same
    per token whatever the row).
    """
    n, width = pairs.input_ids.shape
    device = pairs.input_ids.device
    clients = [0] * n if client_ids is None else client_ids.tolist()
    sizes = lengths.tolist()
    rows, offsets = row_assignment(sizes, clients, max(capacity, max(sizes)))
    row_of_pair = torch.tensor(rows, device=device)
    offset = torch.tensor(offsets, device=device)
    count = rows[-1] + 1
    packed = max(o + size for o, size in zip(offsets, sizes))
    j = torch.arange(width, device=device).expand(n, width)
    keep = j < lengths.unsqueeze(1)
    dest = (row_of_pair * packed + offset).unsqueeze(1) + j  # flat packed position of each token
    pair = torch.arange(n, device=device).unsqueeze(1).expand(n, width)
    input_ids = torch.zeros(count * packed, dtype=pairs.input_ids.dtype, device=device)
    position = torch.zeros(count * packed, dtype=torch.long, device=device)
    token_pair = torch.full((count * packed,), -1, dtype=torch.long, device=device)
    token_at = torch.zeros(count * packed, dtype=torch.long, device=device)
    input_ids[dest[keep]] = pairs.input_ids[keep]
    position[dest[keep]] = pairs.position_ids[keep]
    token_pair[dest[keep]] = pair[keep]
    token_at[dest[keep]] = j[keep]
    tp, at = token_pair.view(count, packed), token_at.view(count, packed)
    same = (tp.unsqueeze(2) == tp.unsqueeze(1)) & (tp >= 0).unsqueeze(2)
    inner = pairs.attend[:, 0][tp.clamp(min=0).unsqueeze(2), at.unsqueeze(2), at.unsqueeze(1)]
    attend = same & inner
    pad = (tp < 0).unsqueeze(2) & torch.eye(packed, dtype=torch.bool, device=device)  # see pair_layout
    attend = attend | pad
    base = (row_of_pair * packed + offset).repeat(2).unsqueeze(1)
    index = base + pairs.index
    return PairLayout(
        input_ids.view(count, packed),
        position.view(count, packed),
        attend.unsqueeze(1),
        index,
        pairs.prefix,
        row_of_pair,
    )


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
    flat = layout.index[keep]  # (M,) in the unshared path's row-major order
    forward = {"input_ids": layout.input_ids, "attention_mask": mask, "position_ids": layout.position_ids, **kwargs}
    head = output_head(model)
    if head is None:  # an adapted head: every position, gathered after
        with packed_rows(layout.row_of_pair):
            logits = model(**forward).logits
        return ScoredLogits(logits.flatten(0, 1)[flat], target, keep).sequence_log_probs()
    with head_on_positions(head, flat), packed_rows(layout.row_of_pair):
        logits = model(**forward).logits
    return ScoredLogits(logits.reshape(-1, logits.shape[-1]), target, keep).sequence_log_probs()
