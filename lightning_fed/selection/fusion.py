"""Feature fusion: many-layer features to a few dimensions, Eq. (7) of FedHDS (Sec. 4.2).

``P: R^{l x v} -> R^k`` is fitted on one client's features. t-SNE with the Barnes-Hut
approximation (van der Maaten, 2013) is the paper's choice; PCA and Kernel PCA are its
ablation (Table 4). All are scikit-learn's, seeded.

:class:`SharedFrame` is this package's addition for the inter-client step: t-SNE and PCA
coordinates fitted on one client are in that client's own frame (t-SNE is invariant to
rotation and reflection, PCA signs and order depend on the data), so centroids from
different clients are not comparable as such. A ``SharedFrame`` is a linear map fitted by
the server on public anchor samples and sent to every client; clients express their group
centroids in it (see :class:`~lightning_fed.selection.HierarchicalDataSelection`,
``frame="anchored"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FUSIONS = ("tsne", "pca", "kpca")


def fuse(
    features: np.ndarray,
    method: str = "tsne",
    dim: int = 2,
    seed: int = 0,
    perplexity: float = 30.0,
    max_iter: int = 1000,
) -> np.ndarray:
    """Reduce one client's features to ``dim`` dimensions, Eq. (7).

    Args:
        features: ``(n, D)`` features of one client's samples.
        method: ``tsne`` (Barnes-Hut, PCA initialisation), ``pca`` or ``kpca`` (RBF kernel).
        dim: Output dimension ``k`` (the paper uses 2; Barnes-Hut t-SNE needs ``k < 4``).
        seed: Random state of t-SNE / the PCA solvers.
        perplexity: t-SNE perplexity, capped at ``n - 1`` for small clients (as the
            authors' code does).
        max_iter: t-SNE optimisation steps (scikit-learn's and the authors' default 1000).

    Returns:
        ``(n, dim)`` float64 coordinates. A client with fewer than 3 samples gets its first
        ``dim`` PCA coordinates (t-SNE is undefined there), zero-padded.
    """
    if method not in FUSIONS:
        raise ValueError(f"`fusion` must be one of {FUSIONS}, got {method!r}")
    if dim < 1:
        raise ValueError(f"`dim` must be >= 1, got {dim}")
    if method == "tsne" and dim >= 4:
        raise ValueError(f"`dim` must be < 4 for Barnes-Hut t-SNE, got {dim}")
    from threadpoolctl import threadpool_limits

    # One client's fusion is a small problem: thread pools cost more than they give, and
    # much more on a busy machine (measured: t-SNE of 40 samples 3.7 s with 2 threads
    # under load, 0.16 s with 1).
    with threadpool_limits(limits=1):
        return _fuse(np.asarray(features, dtype=np.float64), method, dim, seed, perplexity, max_iter)


def _fuse(x: np.ndarray, method: str, dim: int, seed: int, perplexity: float, max_iter: int = 1000) -> np.ndarray:
    n = len(x)
    if n < 3 or method == "pca":
        return _pca(x, dim, seed)
    if method == "kpca":
        from sklearn.decomposition import KernelPCA

        k = min(dim, n - 1)
        return _pad(KernelPCA(n_components=k, kernel="rbf", random_state=seed).fit_transform(x), dim)
    from sklearn.manifold import TSNE

    tsne = TSNE(
        n_components=dim,
        perplexity=min(perplexity, n - 1),
        method="barnes_hut",
        init="pca",
        random_state=seed,
        max_iter=max_iter,
    )
    return tsne.fit_transform(x)


def _pca(x: np.ndarray, dim: int, seed: int) -> np.ndarray:
    from sklearn.decomposition import PCA

    k = min(dim, len(x), x.shape[1])
    if len(x) < 2:
        return np.zeros((len(x), dim))
    return _pad(PCA(n_components=k, random_state=seed).fit_transform(x), dim)


def _pad(y: np.ndarray, dim: int) -> np.ndarray:
    if y.shape[1] == dim:
        return y
    return np.concatenate([y, np.zeros((len(y), dim - y.shape[1]))], axis=1)


@dataclass
class SharedFrame:
    """A linear map ``x -> (x - mean) @ components.T`` that every client applies the same way.

    Attributes:
        mean: ``(D,)`` centre of the anchor features.
        components: ``(k, D)`` principal directions of the anchor features.
    """

    mean: np.ndarray
    components: np.ndarray

    @classmethod
    def fit(cls, anchors: np.ndarray, dim: int = 2, seed: int = 0) -> SharedFrame:
        """PCA of public anchor features, computed by the server."""
        from sklearn.decomposition import PCA

        x = np.asarray(anchors, dtype=np.float64)
        if len(x) <= dim:
            raise ValueError(f"`anchors`: need more than dim={dim} anchor samples, got {len(x)}")
        pca = PCA(n_components=dim, random_state=seed).fit(x)
        return cls(pca.mean_, pca.components_)

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return (np.asarray(features, dtype=np.float64) - self.mean) @ self.components.T

    @property
    def nbytes(self) -> int:
        """Bytes the server sends each client for this map (float32)."""
        return 4 * (self.mean.size + self.components.size)
