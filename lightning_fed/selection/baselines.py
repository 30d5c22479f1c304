"""The coreset baselines of FedHDS (Sec. 5.1 and 5.4), as round hooks like FedHDS itself.

* :class:`RandomSelection`: a random ``ratio`` of each client's data.
* :class:`PerplexitySelection`: the ``ratio`` of each client's samples with the lowest
  perplexity under the current global model (Chen et al., 2024).
* :class:`CentralizedCoreset` (Coreset-Cent, Chen et al., 2023): K-means over the
  last-layer features of *all* clients' data, the sample nearest each centre. It sees all
  data at once, so it is a reference, not a federated method; its time is the server's.
* :class:`GlobalSelect`: FedHDS's fused features of every sample go to the server, which
  clusters them all at once (the ablation of Fig. 6).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lightning_fed.federation.hooks import Capability
from lightning_fed.hook_rules import SERVER_SIDE_CORESET
from lightning_fed.selection.clustering import Groups, hdbscan_groups, nearest_members
from lightning_fed.selection.coreset import CoresetSelection, Selection
from lightning_fed.selection.features import _batches, _pad, layer_features
from lightning_fed.selection.hds import HierarchicalDataSelection
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import Payload
    from lightning_fed.federation.server_round import ServerRound


def _check_ratio(ratio: float) -> None:
    check(SERVER_SIDE_CORESET, ratio=ratio)  # lightning_fed/hook_rules.py: the precheck's line


def _count(n: int, ratio: float) -> int:
    return max(1, min(n, math.ceil(ratio * n)))


class ServerSideCoreset(CoresetSelection):
    """A coreset chosen on the server from the clients' data (:meth:`choose`): in one process only."""

    capabilities = CoresetSelection.capabilities | {Capability.READS_CLIENT_DATA}

    def on_client_data(
        self,
        server: ServerRound,
        context: Any,
        module: pl.LightningModule,
        round_idx: int,
        clients: list[int],
        data: Any,
    ) -> None:
        self.select_from_data(server, context, module, round_idx, clients, data)


class RandomSelection(ServerSideCoreset):
    """A uniformly random ``ratio`` of each sampled client's data (at least one sample).

    Args:
        ratio: Fraction of local data kept (the paper searches 0.2%-5%).
        seed: Seed (default: the loop's); draws depend only on (seed, round, client).
    """

    def __init__(self, ratio: float = 0.05, seed: int | None = None) -> None:
        _check_ratio(ratio)
        super().__init__(seed=seed, figures=False)
        self.ratio = ratio

    def choose(
        self, server: ServerRound, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> Selection:
        indices, seconds = {}, {}
        for c in clients:
            t0 = time.perf_counter()
            n = len(server.datamodule.client(c).full_train)
            rng = np.random.default_rng(self.round_seed(server, round_idx, c))
            indices[c] = sorted(rng.choice(n, _count(n, self.ratio), replace=False).tolist())
            seconds[c] = {"cluster": time.perf_counter() - t0}
        return Selection(indices, seconds)


@torch.no_grad()
def perplexities(model: torch.nn.Module, items: list[dict[str, Any]], pad_id: int, batch_size: int = 16) -> np.ndarray:
    """Perplexity of each item's response, ``exp(mean response-token NLL)``, in eval mode."""
    from lightning_fed.modules.losses import IGNORE_INDEX, token_log_probs

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = np.zeros(len(items))
    try:
        for idx in _batches([len(items[i]["input_ids"]) for i in range(len(items))], batch_size):
            ids, mask = _pad([items[i]["input_ids"] for i in idx], pad_id)
            labels, _ = _pad([items[i]["labels"] for i in idx], IGNORE_INDEX)
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            logps, scored = token_log_probs(logits, labels.to(device))
            nll = -logps.sum(-1) / scored.sum(-1).clamp(min=1)
            out[idx] = torch.exp(nll).cpu().numpy()
    finally:
        model.train(was_training)
    return out


class PerplexitySelection(ServerSideCoreset):
    """The ``ratio`` of each client's samples with the lowest perplexity under the global model.

    Args:
        ratio: Fraction of local data kept.
        batch_size: Samples per scoring forward pass.
        seed: Unused (the choice is deterministic); kept for a uniform interface.
    """

    def __init__(self, ratio: float = 0.05, batch_size: int = 16, seed: int | None = None) -> None:
        _check_ratio(ratio)
        super().__init__(seed=seed, figures=False)
        self.ratio, self.batch_size = ratio, batch_size

    def choose(
        self, server: ServerRound, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> Selection:
        indices, seconds = {}, {}
        for c in clients:
            t0 = time.perf_counter()
            items = server.datamodule.client(c).full_train
            scores = perplexities(module.model, items, module.tokenizer.pad_token_id, self.batch_size)
            t1 = time.perf_counter()
            order = np.argsort(scores, kind="stable")
            indices[c] = sorted(order[: _count(len(items), self.ratio)].tolist())
            seconds[c] = {"extract": t1 - t0, "cluster": time.perf_counter() - t1}
        return Selection(indices, seconds)


class CentralizedCoreset(ServerSideCoreset):
    """Coreset-Cent: K-means (``K = ceil(ratio * N)``) over all clients' last-layer features.

    A reference only: it reads every client's data in one place. Run each round with the
    current global model; each sampled client trains on the selected samples it holds
    (clients holding none are skipped, see ``CoresetSelection``).

    Args:
        ratio: Fraction of all data kept (one sample per K-means centre).
        batch_size: Samples per forward pass.
        seed: K-means seed (default: the loop's).
    """

    def __init__(self, ratio: float = 0.01, batch_size: int = 16, seed: int | None = None) -> None:
        _check_ratio(ratio)
        super().__init__(seed=seed, figures=False)
        self.ratio, self.batch_size = ratio, batch_size

    def choose(
        self, server: ServerRound, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> Selection:
        from sklearn.cluster import KMeans

        t0 = time.perf_counter()
        dm = server.datamodule
        owners = [(c, i) for c in range(dm.num_clients) for i in range(len(dm.client(c).full_train))]
        items = [dm.client(c).full_train[i] for c, i in owners]
        feats = layer_features(
            module.model, items, module.tokenizer.pad_token_id, batch_size=self.batch_size, last_layer_only=True
        )
        k = _count(len(items), self.ratio)
        kmeans = KMeans(n_clusters=k, n_init=3, random_state=self.round_seed(server, round_idx)).fit(feats)
        groups = Groups(np.asarray(kmeans.labels_), np.ones(len(items)))
        chosen = nearest_members(
            feats, groups, kmeans.cluster_centers_, [g for g in range(k) if (kmeans.labels_ == g).any()]
        )
        indices: dict[int, list[int]] = {c: [] for c in clients}
        for j in chosen:
            c, i = owners[j]
            if c in indices:
                indices[c].append(i)
        fallback = {c: 0 for c in clients}
        return Selection(
            indices,
            server_seconds=time.perf_counter() - t0,
            fallback=fallback,
            up_bytes=4 * int(feats.size),
            info={"selected_groups": len(chosen)},
        )


class GlobalSelect(ServerSideCoreset, HierarchicalDataSelection):
    """FedHDS's fused features of *every* sample go to the server, which clusters them all.

    Same arguments as :class:`HierarchicalDataSelection`; the server runs HDBSCAN with
    ``min_cluster_size`` over all samples and selects the sample nearest each group's centroid.
    An ablation run in-process: it computes every client's features on the server.
    """

    def client_queries(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> dict[int, Payload]:
        return {}  # no pre-round exchange: :meth:`choose` runs on the server (in-process)

    def choose(
        self, server: ServerRound, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> Selection:
        t0 = time.perf_counter()
        frame = self.shared_frame(server, module, round_idx)
        frame_seconds = time.perf_counter() - t0
        dm = server.datamodule
        views = {
            c: self.intra_client(module, dm.client(c).full_train, c, self.round_seed(server, round_idx, c), frame)
            for c in clients
        }
        owners = [(c, i) for c in clients for i in range(len(views[c].shared))]
        points = np.concatenate([views[c].shared for c in clients])
        t1 = time.perf_counter()
        groups = hdbscan_groups(points, self.min_cluster_size, self.min_samples)
        if groups.count == 0:
            groups = Groups(np.zeros(len(points), dtype=int), np.ones(len(points)))
        chosen = nearest_members(points, groups, groups.centroids(points), list(range(groups.count)))
        indices: dict[int, list[int]] = {c: [] for c in clients}
        for j in chosen:
            indices[owners[j][0]].append(owners[j][1])
        for c in clients:  # the client-side clustering is not part of this method
            views[c].seconds.pop("cluster", None)
        return Selection(
            indices=indices,
            seconds={c: views[c].seconds for c in clients},
            server_seconds=time.perf_counter() - t1 + frame_seconds,
            up_bytes=4 * int(points.size),
            down_bytes=4 * len(chosen),
            fallback={c: self.fallback(views[c]) for c in clients},
            points={c: views[c].shared for c in clients},
            info={"server_groups": int(groups.count), "selected_groups": len(chosen)},
        )
