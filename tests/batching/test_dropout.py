"""Dropout in a batched group: each client's step has its sequential step's distribution (issue 43).

Not bitwise: the masks are drawn in another order. Over ``SEEDS`` draws, each client's training
loss in a group of 3 (LoRA dropout 0.3 and GPT-2's own dropout 0.1) and in its own sequential step
must agree in mean within 4 standard errors (Welch: about 6e-5 of a two-sided false alarm), and in
spread within a factor of 2 (the ratio of two sample variances of 60 draws exceeds 2 with
probability ~0.4 % each way). The control: without dropout both sides are one value, and the
batched one is that value.
"""

from __future__ import annotations

import warnings

import torch

from lightning_fed.batching.client_rows import ClientRows
from lightning_fed.batching.multi_lora import StackedLora
from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
from tests.helpers.runs import TINY_GPT2

SEEDS = 60
CLIENTS = 3


def _module(dropout: bool) -> SFTModule:
    torch.manual_seed(0)
    config = dict(TINY_GPT2) if dropout else {**TINY_GPT2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    module = SFTModule(
        BackboneConfig(config=config, tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.3 if dropout else 0.0),
    )
    module.train()
    return module


def _batches() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for k in range(CLIENTS):
        ids = torch.randint(0, 256, (2, 16), generator=g)
        labels = ids.clone()
        labels[:, :6] = -100
        out.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "labels": labels,
                "client_id": torch.full((2,), k),
            }
        )
    return out


def _client_states(module: SFTModule) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    return [
        {n: torch.randn(p.shape, generator=g) * 0.2 for n, p in module.shared_parameters().items()}
        for _ in range(CLIENTS)
    ]


@torch.no_grad()
def losses(dropout: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sequential, batched)``, each ``(SEEDS, CLIENTS)``: every client's loss over the draws."""
    module, batches = _module(dropout), _batches()
    states = _client_states(module)
    seq = torch.zeros(SEEDS, CLIENTS)
    warnings.simplefilter("ignore")  # self.log without a Trainer
    for k, state in enumerate(states):
        module.load_state(state)
        for s in range(SEEDS):
            torch.manual_seed(1000 + s)
            seq[s, k] = module.training_step(batches[k], 0)["loss"]
    rows = ClientRows.of([k for k in range(CLIENTS) for _ in range(2)], CLIENTS)
    stacked = StackedLora(module.model, module.shared_parameters(), lambda: rows)
    for state in states:
        module.load_state(state)
        stacked.capture()
    stacked.stack()
    group = {n: torch.cat([b[n] for b in batches]) for n in batches[0]}
    bat = torch.zeros(SEEDS, CLIENTS)
    try:
        for s in range(SEEDS):
            torch.manual_seed(5000 + s)
            bat[s] = module.training_step(group, 0)["client_losses"]
    finally:
        stacked.unstack()
    return seq, bat


def test_each_client_s_loss_has_its_sequential_distribution_under_dropout():
    seq, bat = losses(dropout=True)
    assert (seq.std(0) > 0).all() and (bat.std(0) > 0).all()  # dropout acts on both sides
    se = (seq.var(0) / SEEDS + bat.var(0) / SEEDS).sqrt()
    assert ((seq.mean(0) - bat.mean(0)).abs() <= 4 * se).all(), (seq.mean(0), bat.mean(0), se)
    ratio = bat.var(0) / seq.var(0)
    assert ((ratio > 0.5) & (ratio < 2.0)).all(), ratio


def test_without_dropout_the_batched_loss_is_the_sequential_one():
    seq, bat = losses(dropout=False)
    assert (seq.std(0) == 0).all() and (bat.std(0) == 0).all()
    torch.testing.assert_close(bat[0], seq[0], rtol=1e-5, atol=1e-6)
