"""One module trained twice from the same start on the same batches (an old path and a new one),
and how far apart the two runs' tensors end: the exactness tests of issue 43's paths."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def start_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable tensor moved off its initial value (LoRA's B starts at zero)."""
    gen = torch.Generator().manual_seed(7)
    return {
        n: p.detach() + 0.1 * torch.randn(p.shape, generator=gen)
        for n, p in module.named_parameters()
        if p.requires_grad
    }


def sgd_steps(
    module: torch.nn.Module,
    start: dict[str, torch.Tensor],
    batches: Sequence[dict[str, torch.Tensor]],
    loss_fn: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor],
    lr: float,
) -> dict[str, torch.Tensor]:
    """One plain SGD step a batch over every trainable tensor of ``module``, from ``start``; the
    trained tensors. The global seed is reset first, so a module that keeps dropout draws the same
    masks on both paths."""
    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(start[n])
    opt = torch.optim.SGD(list(params.values()), lr=lr)
    torch.manual_seed(0)
    for batch in batches:
        opt.zero_grad()
        loss_fn(module, batch).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in params.items()}


def largest_relative_difference(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> float:
    """``max over tensors of max|new - old| / max|old|``."""
    return max(((new[n] - old[n]).abs().max() / old[n].abs().max().clamp(min=1e-30)).item() for n in old)
