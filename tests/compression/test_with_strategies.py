"""Compression composes with the strategies: they aggregate the decoded states like any others."""

import pytest
import torch

from lightning_fed.compression import BlockwiseQuantization, TopKSparsification, decode_update, encode_update
from lightning_fed.strategies import (
    ClientUpdate,
    CoordinateMedian,
    FedAvg,
    FedAvgM,
    FedBuff,
    FedProx,
    HetLoRA,
    TrimmedMean,
)

X = {"w": torch.linspace(-1.0, 1.0, 200).reshape(10, 20), "b": torch.zeros(7)}


def _updates(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        ClientUpdate(k, 10 + k, {n: v + 0.1 * torch.randn(v.shape, generator=g) for n, v in X.items()})
        for k in range(5)
    ]


@pytest.mark.parametrize(
    "make",
    [
        FedAvg,
        lambda: FedProx(mu=0.1),
        lambda: FedAvgM(server_lr=1.0),
        CoordinateMedian,
        lambda: TrimmedMean(0.2),
        lambda: FedBuff(5),
    ],
)
def test_int8_moves_every_aggregate_by_at_most_the_quantization_error(make):
    """Each rule here is 1-Lipschitz per coordinate in each client's value, so the aggregate of
    decoded updates is within the largest per-value int8 error (half a level of its block)."""
    ups = _updates(0)
    comp = BlockwiseQuantization(8, 32)
    decoded, bound = [], 0.0
    for u in ups:
        payload, _, _ = encode_update(u.state, X, comp, {})
        state = decode_update(payload, X, comp)
        bound = max(bound, max(float((state[k] - u.state[k]).abs().max()) for k in X))
        decoded.append(ClientUpdate(u.client_id, u.num_examples, state))
    a, b = make(), make()
    for s in (a, b):
        s.setup(X, 5)
    exact, approx = a.aggregate(X, ups), b.aggregate(X, decoded)
    assert 0 < bound <= 0.5 * 0.4 / 127  # |delta| < ~0.4 per block: half an int8 level of it
    for k in X:
        assert float((exact[k] - approx[k]).abs().max()) <= bound * (1 + 1e-5)


def test_a_rank_r_client_compresses_against_its_own_start():
    a_key, b_key = "m.lora_A.default.weight", "m.lora_B.default.weight"
    glob = {a_key: torch.ones(2, 3), b_key: torch.zeros(4, 2)}
    strategy = HetLoRA(client_ranks=[1, 2], weighting="uniform")
    strategy.setup(glob, 2)
    comp = TopKSparsification(fraction=1.0)  # lossless: the test is about shapes and keys
    ups = []
    for k in range(2):
        start = strategy.client_model(k, glob)
        trained = {n: v + 1.0 for n, v in start.items()}
        payload, _, _ = encode_update(trained, start, comp, {})
        ups.append(ClientUpdate(k, 1, decode_update(payload, start, comp)))
    assert ups[0].state[a_key].shape == (1, 3)
    out = strategy.aggregate(glob, ups)
    # A: row 0 is 2 for both clients; row 1 only client 1 (2), padded 0 for client 0 -> 1
    torch.testing.assert_close(out[a_key], torch.tensor([[2.0] * 3, [1.0] * 3]))
