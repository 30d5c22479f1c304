"""Intra- and inter-client clustering of FedHDS (Sec. 4.2-4.3, Eq. (8)-(10)).

One HDBSCAN implementation is used everywhere: the ``hdbscan`` package (McInnes et al.,
2017; the algorithm of Campello et al., 2013), as in the authors' code. A group's
*approximate centroid* is its members' mean weighted by their HDBSCAN membership
probabilities, i.e. ``HDBSCAN.weighted_cluster_centroid``; it is not a real sample.

Noise (HDBSCAN label ``-1``): a noise sample belongs to no group, so it is never sent (as
part of a centroid) and never selected, as in the authors' code. If HDBSCAN finds no group
at all on a client (fewer samples than ``min_cluster_size``, or everything noise), the
whole client is one group, so that a small client still takes part. On the server, noise
centroids (client groups like no other client's) are dropped by default, as in the
authors' code (``server_noise="drop"``); ``server_noise="keep"`` selects each as its own
server group instead. If the server finds no group at all, it retries with
``min_samples=1``, then puts all centroids in one group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SERVER_NOISE = ("drop", "keep")


@dataclass
class Groups:
    """A clustering of points.

    Attributes:
        labels: ``(n,)`` group of each point, ``-1`` for noise.
        probabilities: ``(n,)`` HDBSCAN membership strength of each point (0 for noise).
    """

    labels: np.ndarray
    probabilities: np.ndarray

    @property
    def count(self) -> int:
        return int(self.labels.max()) + 1 if len(self.labels) else 0

    def centroids(self, points: np.ndarray) -> np.ndarray:
        """``(count, k)`` probability-weighted mean of each group's members in ``points``."""
        out = []
        for g in range(self.count):
            member = self.labels == g
            w = self.probabilities[member]
            w = w if w.sum() > 0 else np.ones_like(w)
            out.append((points[member] * w[:, None]).sum(0) / w.sum())
        return np.array(out).reshape(self.count, points.shape[1])


def hdbscan_groups(points: np.ndarray, min_cluster_size: int, min_samples: int | None = None) -> Groups:
    """HDBSCAN of ``points``; all points noise if there are fewer than ``min_cluster_size``."""
    x = np.asarray(points, dtype=np.float64)
    if len(x) < max(2, min_cluster_size):
        return Groups(np.full(len(x), -1), np.zeros(len(x)))
    from hdbscan import HDBSCAN

    fitted = HDBSCAN(
        min_cluster_size=min_cluster_size, min_samples=min_samples, allow_single_cluster=False, core_dist_n_jobs=1
    ).fit(x)
    return Groups(np.asarray(fitted.labels_), np.asarray(fitted.probabilities_, dtype=np.float64))


def intra_client_groups(points: np.ndarray, min_cluster_size: int = 5, min_samples: int | None = None) -> Groups:
    """A client's groups of its fused features (step 3 of Fig. 3); one group if none is found."""
    if min_cluster_size < 2:
        raise ValueError(f"`min_cluster_size` must be >= 2, got {min_cluster_size}")
    groups = hdbscan_groups(points, min_cluster_size, min_samples)
    if groups.count == 0:
        return Groups(np.zeros(len(points), dtype=int), np.ones(len(points)))
    return groups


def nearest_members(points: np.ndarray, groups: Groups, centroids: np.ndarray, selected: list[int]) -> list[int]:
    """Eq. (10): for each selected group, the index of its member nearest its centroid."""
    out = []
    for g in selected:
        members = np.flatnonzero(groups.labels == g)
        out.append(int(members[np.argmin(np.linalg.norm(points[members] - centroids[g], axis=1))]))
    return out


@dataclass
class ServerSelection:
    """The server's answer.

    Attributes:
        groups: Server groups of the received centroids (Eq. (8)).
        selected: Index of the chosen centroid in each server group (Eq. (9)), in group order.
    """

    groups: Groups
    selected: list[int]


def inter_client_selection(
    centroids: np.ndarray, min_cluster_size: int = 2, server_noise: str = "drop", min_samples: int | None = None
) -> ServerSelection:
    """Eq. (8)-(9): HDBSCAN over all received centroids; in each server group, the centroid
    nearest the group's own centroid is selected.

    Args:
        centroids: ``(m, k)`` centroids received from the round's clients.
        min_cluster_size: HDBSCAN ``min_cluster_size`` of the server (the paper uses 2).
        server_noise: ``drop`` (noise centroids are not selected) or ``keep`` (each is
            selected as a group of its own).
        min_samples: HDBSCAN ``min_samples`` of the server (default: ``min_cluster_size``,
            hdbscan's and the authors' choice). With few centroids that default can find no
            group at all (e.g. three well-separated pairs are all noise); the server then
            retries with ``min_samples=1``, and only if that finds nothing either puts all
            centroids in one group. (``min_samples=1`` from the start over-splits dense
            clumps of duplicates, so it is only the fallback.)
    """
    if server_noise not in SERVER_NOISE:
        raise ValueError(f"`server_noise` must be one of {SERVER_NOISE}, got {server_noise!r}")
    c = np.asarray(centroids, dtype=np.float64)
    if len(c) == 0:
        return ServerSelection(Groups(np.zeros(0, dtype=int), np.zeros(0)), [])
    groups = hdbscan_groups(c, min_cluster_size, min_samples)
    if groups.count == 0 and min_samples != 1:
        groups = hdbscan_groups(c, min_cluster_size, 1)
    if groups.count == 0:  # no group at all: every centroid is in one
        groups = Groups(np.zeros(len(c), dtype=int), np.ones(len(c)))
    centres = groups.centroids(c)
    selected = nearest_members(c, groups, centres, list(range(groups.count)))
    if server_noise == "keep":
        selected += np.flatnonzero(groups.labels < 0).tolist()
    return ServerSelection(groups, selected)
