"""FedHDS's intra-client step (Qin et al., 2025, arXiv:2410.10926, Fig. 3 steps 2-4).

Runs on the client, on the features of its own samples: fusion to ``dim`` dimensions
(Eq. (7)), HDBSCAN groups with approximate centroids, and the centroids that leave the client
(in the shared frame when there is one, privatized when ``sigma`` is set, Theorem 1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from lightning_fed.federation.hooks import Payload
from lightning_fed.selection.clustering import Groups, intra_client_groups, nearest_members
from lightning_fed.selection.fusion import SharedFrame, fuse
from lightning_fed.selection.privacy import privatize_centroids


@dataclass
class ClientView:
    """One client's intra-client result (kept on the client, except ``sent``)."""

    fused: np.ndarray  # (n, dim) fused features, Eq. (7)
    groups: Groups  # intra-client HDBSCAN groups
    centroids: np.ndarray  # (g, dim) approximate centroids in the fused space
    shared: np.ndarray  # (n, dim) coordinates in the frame the server sees
    sent: np.ndarray  # (g, dim) what goes to the server (shared frame, maybe privatized)
    seconds: dict[str, float]


def intra_client_view(
    feats: np.ndarray,
    fusion: str,
    dim: int,
    seed: int,
    perplexity: float,
    tsne_iters: int,
    min_cluster_size: int,
    min_samples: int | None,
    frame: SharedFrame | None,
    sigma: float | None,
) -> ClientView:
    """Steps 2-4 of Fig. 3 on one client's features ``feats`` (``(n, D)``).

    ``seconds`` holds ``fusion`` and ``cluster`` (the caller adds ``extract``).
    """
    t1 = time.perf_counter()
    fused = fuse(feats, fusion, dim, seed=seed, perplexity=perplexity, max_iter=tsne_iters)  # Eq. (7)
    t2 = time.perf_counter()
    groups = intra_client_groups(fused, min_cluster_size, min_samples)
    centroids = groups.centroids(fused)
    shared = fused if frame is None else frame(feats)
    sent = centroids if frame is None else groups.centroids(shared)
    if sigma is not None:
        sent = privatize_centroids(sent, sigma, np.random.default_rng(seed))
    t3 = time.perf_counter()
    return ClientView(fused, groups, centroids, shared, sent, {"fusion": t2 - t1, "cluster": t3 - t2})


def fallback_sample(view: ClientView) -> int:
    """The sample nearest the centroid of the client's largest group."""
    sizes = np.bincount(view.groups.labels[view.groups.labels >= 0], minlength=view.groups.count)
    return nearest_members(view.fused, view.groups, view.centroids, [int(np.argmax(sizes))])[0]


def view_reply(view: ClientView, num_samples: int, points: bool = False) -> Payload:
    """What the client sends the server: its groups' (privatized) centroids, the sample nearest
    each group's centroid (Eq. (10), as local indices), its fallback sample and the phase seconds;
    with ``points`` also its samples' coordinates in the shared frame (for the figure)."""
    reply: Payload = {
        "centroids": torch.from_numpy(np.ascontiguousarray(view.sent, dtype=np.float64)),
        "representatives": nearest_members(view.fused, view.groups, view.centroids, list(range(view.groups.count))),
        "fallback": fallback_sample(view),
        "num_samples": num_samples,
        **{f"{phase}_seconds": float(s) for phase, s in view.seconds.items()},
    }
    if points:
        reply["points"] = torch.from_numpy(np.ascontiguousarray(view.shared, dtype=np.float64))
    return reply


def check_reply(reply: Payload, dim: int) -> Payload:
    """``reply`` if it is a well-formed :func:`view_reply` (shapes, index ranges), else ``ValueError``."""
    centroids, reps, n = reply["centroids"], list(reply["representatives"]), int(reply["num_samples"])
    if not torch.is_tensor(centroids) or centroids.dim() != 2 or centroids.shape != (len(reps), dim):
        raise ValueError(f"'centroids' must be ({len(reps)}, {dim}), got {getattr(centroids, 'shape', None)}")
    if not torch.isfinite(centroids).all():
        raise ValueError("'centroids' must be finite")
    if n < 1 or not all(0 <= int(i) < n for i in [*reps, reply["fallback"]]):
        raise ValueError(f"'representatives' and 'fallback' must index its {n} samples")
    points = reply.get("points")
    if points is not None and (not torch.is_tensor(points) or tuple(points.shape) != (n, dim)):
        raise ValueError(f"'points' must be ({n}, {dim}), got {getattr(points, 'shape', None)}")
    return reply
