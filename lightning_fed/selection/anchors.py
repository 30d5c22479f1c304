"""The anchored frame of FedHDS's centroids: public anchor samples the server fits a shared map on.

Frames (this package's one deviation from the paper, on by default when ``anchors`` is set).
The paper runs t-SNE separately on every client and sends the groups' 2-D t-SNE centroids.
t-SNE coordinates are defined only up to rotation, reflection, translation and scale (its
loss depends on pairwise distances only, and the layout depends on the client's other
samples), so two clients' centroids of the *same* kind of data generally land in different
places and the server's HDBSCAN groups centroids that are near by accident. Measured on 6
clients that all hold the same 3 planted families (FedHDS-Turbo features, seeds 0-2):
``frame="local"`` selected one sample of every family in 1 of 3 draws (the others kept a
family twice and dropped one); with clients holding 2 of the 3 families, in none of 3.
``frame="anchored"`` selected exactly one sample of each family in 6 of 6 draws.

``frame="anchored"``: the server fits a 2-D PCA map on the features of a few *public*
anchor samples and sends it to the clients (:class:`SharedFrame`, ``4 (D + 2 D)`` bytes,
once per round, or once for a fixed proxy). Clients still fuse with t-SNE and cluster with
HDBSCAN exactly as in the paper (intra-client selection and the coreset choice, Eq. (10),
are unchanged), but describe each group to the server by its members' weighted mean under
the shared linear map instead of its t-SNE centroid. A linear map is the same function on
every client, so equal kinds of data land together whichever client holds them, and the
server's groups (Eq. (8)-(9)) really are cross-client duplicates. What travels is still one
2-D point per group (and DP applies to it the same way). The cost: the server needs a
public sample resembling the clients' data (``anchors``). Without ``anchors`` the hook
falls back to the paper's ``local`` frame and warns once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FRAMES = ("local", "anchored")


ANCHORS = "federation.hooks: HierarchicalDataSelection.anchors"
"""How the hook's lines name its ``anchors`` (the class does not know its index in ``federation.hooks``)."""
ANCHOR_FIELD_MAP = "federation.hooks: HierarchicalDataSelection.anchor_field_map"


def load_anchor_records(dataset: str, kind: str, synthetic_args: dict | None, field_map: dict | None) -> Any:
    """The anchors read as the run's data module reads its records (``kind``: their fields), or a one-line
    :class:`~lightning_fed.errors.UserError` (a ``ValueError``) naming ``anchors`` (and
    ``anchor_field_map``) where the data source's names ``data.dataset`` (and ``data.field_map``): red
    team 10 row 7."""
    from lightning_fed.datamodules.sources import load_records
    from lightning_fed.errors import UserError

    try:
        return load_records(dataset, kind, split="train", field_map=field_map, synthetic_args=synthetic_args)
    except ValueError as err:
        message = str(err).replace("data.dataset", ANCHORS, 1).replace("data.field_map", ANCHOR_FIELD_MAP)
        raise UserError(message) from None  # one line: input the user must fix


def load_anchor_items(
    dm: Any,
    dataset: str,
    synthetic_args: dict | None,
    field_map: dict | None,
    count: int,
    seed: int,
    records: Any = None,
) -> list[dict[str, Any]]:
    """``count`` public anchor samples, tokenized like the training data (``dm.encode``); ``records``: the
    anchors already read (:func:`load_anchor_records`)."""
    from lightning_fed.datamodules.tokenize import Overflow

    if records is None:
        records = load_anchor_records(dataset, dm.kind, synthetic_args, field_map)
    order = np.random.default_rng(seed).permutation(len(records))
    items = []
    for i in order:
        try:
            items.append(dm.encode(records[int(i)]))
        except Overflow:
            continue
        if len(items) == count:
            break
    if len(items) < 3:
        raise ValueError(f"`anchors` {dataset!r}: only {len(items)} samples fit data.max_length; need at least 3")
    return items
