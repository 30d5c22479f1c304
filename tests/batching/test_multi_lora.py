"""Stacked adapters: each row gets its own client's LoRA factors; the base alone when disabled."""

from __future__ import annotations

import torch

from lightning_fed.batching.client_rows import ClientRows, per_client_loss
from lightning_fed.batching.multi_lora import StackedLora
from lightning_fed.modules import BackboneConfig, BinarySelectorModule, LoraSettings
from lightning_fed.modules.lora import adapter_layers, adapters_disabled
from tests.batching.test_parity import NO_DROPOUT


def selector(num_selectors: int = 1) -> BinarySelectorModule:
    torch.manual_seed(0)
    return BinarySelectorModule(
        BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        num_selectors=num_selectors,
    )


def randomize(module: BinarySelectorModule, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def logits(module, ids):
    return module.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_each_row_gets_its_clients_adapter_including_mixed_adapters_and_copies():
    """Three clients, two of them on selector 1 and one on selector 0 (FedBiscuit after grouping);
    the forward over the rows twice stacked (a pair's two orders) equals each client's own forward."""
    module = selector(num_selectors=3)
    ids = torch.randint(0, 256, (6, 7))
    slots = torch.tensor([0, 0, 1, 2, 2, 2])
    chosen = [1, 0, 1]
    expected = []
    rows = ClientRows(slots, 3)
    stacked = StackedLora(module.model, module.shared_parameters(), lambda: rows)
    for k, u in enumerate(chosen):
        randomize(module, seed=k)
        module.use_selector(u)
        stacked.capture()
        expected.append(logits(module, ids[slots == k]))
    stacked.stack()
    try:
        with torch.no_grad():
            out = logits(module, torch.cat([ids, ids]))
            with adapters_disabled(adapter_layers(module.model)):
                base = logits(module, ids)
    finally:
        stacked.unstack()
    want = torch.cat(expected)
    torch.testing.assert_close(out[:6], want, rtol=0, atol=1e-5)
    torch.testing.assert_close(out[6:], want, rtol=0, atol=1e-5)
    with adapters_disabled(adapter_layers(module.model)), torch.no_grad():
        torch.testing.assert_close(base, logits(module, ids), rtol=0, atol=1e-6)
    assert not (out[:6] - base).abs().max() < 1e-3  # the adapters did change the output
    # unstacked: the parameters have their own shapes again
    assert all(p.dim() == 2 for p in module.shared_parameters().values())


def test_equal_segments_take_the_batched_matmul_and_match_each_clients_forward():
    """The usual step (every client's batch of the same size, in slot order, one adapter): the
    segmented batched matmul, over the rows and over the rows twice stacked (chosen, rejected)."""
    module = selector()
    ids = torch.randint(0, 256, (6, 5))
    rows = ClientRows.of([0, 0, 1, 1, 2, 2], 3)
    assert rows.per_client == 2 and ClientRows.of([0, 1, 1, 2], 3).per_client is None
    stacked = StackedLora(module.model, module.shared_parameters(), lambda: rows)
    expected = []
    for k in range(3):
        randomize(module, seed=10 + k)
        stacked.capture()
        with torch.no_grad():
            expected.append(logits(module, ids[2 * k : 2 * k + 2]))
    stacked.stack()
    try:
        with torch.no_grad():
            out = logits(module, torch.cat([ids, ids]))
    finally:
        stacked.unstack()
    want = torch.cat(expected)
    torch.testing.assert_close(out, torch.cat([want, want]), rtol=0, atol=1e-5)


def test_per_client_reductions():
    """One reduction for both paths: each client's mean over its own rows (tokens), summed; one
    client's batch gives the plain mean, bit for bit."""
    ids = torch.tensor([7, 7, 3])
    out = per_client_loss(torch.tensor([1.0, 3.0, 10.0]), ids)
    assert out["loss"].item() == 12.0  # client 7: mean 2, client 3: mean 10
    assert dict(zip(out["client_ids"].tolist(), out["client_losses"].tolist())) == {7: 2.0, 3: 10.0}
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    mask = torch.tensor([[True, False], [True, True], [False, True]])
    # client 7: tokens 1, 3, 4 -> 8 / 3; client 3: token 6
    torch.testing.assert_close(per_client_loss(values, ids, mask)["loss"], torch.tensor(8 / 3 + 6))
    one = torch.tensor([0.3, 1.7, 2.9])
    assert torch.equal(per_client_loss(one, torch.tensor([5, 5, 5]))["loss"], one.mean())
    assert torch.equal(per_client_loss(values, None, mask)["loss"], values[mask].mean())
    assert per_client_loss(one, None)["client_losses"].shape == (1,)


@torch.no_grad()
def test_a_group_set_aside_runs_the_module_s_own_forward_and_takes_its_stack_back():
    """Red team 10 row 2: a validation inside a group's steps ran through the stacked factors, sized for
    the training rows (shape mismatch). Set aside, the module has its own data and forward (any rows);
    taken back, the same stacked tensors (the optimizer's state and the slot views refer to them)."""
    module = selector()
    randomize(module, 1)
    params = module.shared_parameters()
    ids = torch.randint(0, 256, (4, 7))
    own = logits(module, ids)
    rows = ClientRows.of([0, 0, 1, 1, 2, 2, 3, 3], 4)  # a step of 4 clients' 2 rows: 8 rows
    stacked = StackedLora(module.model, params, lambda: rows)
    for _ in range(4):
        stacked.capture()
    stacked.stack()
    data = {n: p.data for n, p in params.items()}
    view = stacked.views(1)
    stacked.set_aside()
    torch.testing.assert_close(logits(module, ids), own)  # 4 rows, not the step's 8
    stacked.take_back()
    assert all(p.data_ptr() == data[n].data_ptr() and p.shape == data[n].shape for n, p in params.items())
    assert all(view[n].data_ptr() == data[n][1].data_ptr() for n in view)
    torch.testing.assert_close(logits(module, torch.cat([ids, ids])), logits(module, torch.cat([ids, ids])))
    stacked.unstack()
    torch.testing.assert_close(logits(module, ids), own)
