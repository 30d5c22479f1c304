"""FedBis / FedBiscuit as a two-stage pipeline (Wu et al., 2024, arXiv:2407.03038).

Stage 1 (Sec. 3.1, Sec. 3.2 for U selectors): the clients train the binary selector(s)
federatedly, an ordinary ``lightning-fed fit`` of a selector config. Stage 2 (Sec. 4 and App.
A.2, Step 1): on the server the policy, still at its starting point ``theta_0``, samples ``n``
completions of each unlabeled prompt at temperature 0.7, the selector(s) label all ``C(n, 2)``
pairs (the majority of U for FedBiscuit), and the policy is DPO-trained on that set ``D_gen``
(Eq. (2)) by the RLFT run's own fit.

The selector comes from :class:`~lightning_fed.modules.selector_source.SelectorSource`:
``selector.path`` names a finished stage-1 run (two CLI calls), ``selector.train_config`` a
config that :func:`train_selector` runs first (one CLI call). Either way :func:`prepare_rlft`
builds ``D_gen`` and hands it to the :class:`~lightning_fed.datamodules.rlft.RLFTDataModule`,
which only partitions and serves it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.utilities import rank_zero_info

from lightning_fed.datamodules.rlft import RLFTDataModule
from lightning_fed.datamodules.templates import format_prompt
from lightning_fed.modules.rlft import label_pairs, sample_completions
from lightning_fed.modules.selector import BinarySelectorModule
from lightning_fed.modules.selector_source import load_selector

Fit = Callable[[list[str]], Any]
"""Runs ``lightning-fed <args>`` in-process and returns the CLI object (``.model`` is the trained
module); the CLI passes its own ``main``."""

_SEED_ENV = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")  # what seed_everything leaves in os.environ


def flower_refusal(datamodule: Any) -> str | None:
    """Why a Flower run of this data cannot be the paper's RLFT stage, or ``None`` if it is not one.

    App. A.2: "The reinforcement-learning fine-tuning takes place on the server" -- the server's
    unlabeled prompts, the policy at ``theta_0`` and the trained selector(s) make ``D_gen`` there,
    and the policy is DPO-trained on it there (Eq. (2)). Under Flower the training runs in the
    ClientApps, on each SuperNode's own data: the server's ``D_gen`` would have to be shipped to
    them, or every node would rerun stage 1 (holding every client's preference data) to rebuild
    it. Stage 1 runs under Flower as any selector config; this stage is a ``lightning-fed fit``.
    """
    if not isinstance(datamodule, RLFTDataModule):
        return None
    return (
        f"data: {type(datamodule).__name__} cannot run under Flower: RLFT trains the policy on the server's own"
        " D_gen (Wu et al., 2024, App. A.2); train the selector(s) under Flower, then run this config with"
        " `lightning-fed fit` and data.init_args.selector.path"
    )


def usable_pairs(records: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Drop pairs DPO cannot learn from: a blank completion, or two equal ones."""
    return [r for r in records if r["chosen"].strip() and r["rejected"].strip() and r["chosen"] != r["rejected"]]


def train_selector(config: str, args: Sequence[str], fit: Fit) -> BinarySelectorModule:
    """Stage 1: ``lightning-fed fit --config config *args``; its final global selector(s).

    The stage runs with its own ``seed_everything``; the caller's RNG states and seed
    environment are restored afterwards, so stage 2 gives the same result whether its selector
    was trained here or loaded by ``selector.path``.

    Raises:
        FileNotFoundError: If ``config`` is not a file.
        ValueError: If the config does not train a :class:`BinarySelectorModule`.
    """
    if not Path(config).is_file():
        raise FileNotFoundError(f"selector.train_config {config!r}: no such file")
    rng, env = _collect_rng_states(), {k: os.environ.get(k) for k in _SEED_ENV}
    try:
        cli = fit(["fit", "--config", config, *args])
    finally:
        _set_rng_states(rng)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if not isinstance(cli.model, BinarySelectorModule):
        raise ValueError(
            f"selector.train_config {config!r} trains a {type(cli.model).__name__}, not a BinarySelectorModule"
        )
    return cli.model  # the FederatedLoop loads the final global state at the end of fit


def preference_set(
    policy: Any, selector: BinarySelectorModule, data: RLFTDataModule, device: Any = None
) -> list[dict[str, str]]:
    """``D_gen``: ``data.num_completions`` samples per prompt from ``policy``, every pair labelled.

    Sampling is seeded by ``data.generation_seed``; the global RNG is left as it was.

    Raises:
        ValueError: If every generated pair is blank or equal.
    """
    device = torch.device(device) if device is not None else policy.device
    policy.to(device)
    selector.to(device)
    prompts = data.prompts
    # The prompts as the policy was trained on them (its chat template and system turn with `chat`).
    fmt = {"tokenizer": policy.tokenizer, "system_prompt": data.system_prompt}
    formatted = [format_prompt(data.template, p, **fmt) for p in prompts]
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        completions = sample_completions(
            policy.model,
            policy.tokenizer,
            formatted,
            data.num_completions,
            data.max_new_tokens,
            data.temperature,
            data.generation_seed,
        )
    records = label_pairs(
        selector, prompts, completions, data.selector_template, data.selector_max_length, data.selector_batch_size
    )
    kept = usable_pairs(records)
    rank_zero_info(
        f"RLFT: {len(prompts)} prompts x C({data.num_completions}, 2) = {len(records)} pairs labelled by "
        f"{selector.num_selectors} selector(s); {len(kept)} kept (blank or equal completions dropped)"
    )
    if not kept:
        raise ValueError(
            f"RLFT: all {len(records)} generated pairs were blank or equal;"
            " raise data.max_new_tokens or data.temperature"
        )
    return kept


def prepare_rlft(model: Any, datamodule: Any, fit: Fit, device: Any = None) -> bool:
    """Everything stage 2 needs before its fit: the selector (stage 1 if asked) and ``D_gen``.

    Cheap checks come first (the prompts load, a ``selector.path`` exists), so bad input fails
    before any training. A ``data.records_path`` that exists is reused (e.g. on ``--ckpt_path``
    resume) and neither stage 1 nor the generation runs again.

    Args:
        model: The policy (stage 2's LightningModule, at ``theta_0``).
        datamodule: Any data module; only an :class:`RLFTDataModule` is prepared.
        fit: Runs stage 1 (see :data:`Fit`).
        device: Where to generate and label (default: the policy's device).

    Returns:
        Whether ``datamodule`` was an RLFT one (and is now ready for ``setup``).
    """
    if not isinstance(datamodule, RLFTDataModule):
        return False
    if datamodule.generated is not None or datamodule.read_saved_records():
        return True
    if datamodule.prompts is None:
        datamodule.prompts = datamodule.load_prompts()
    source = datamodule.selector_source
    if source.path is None:
        selector = train_selector(source.train_config, source.train_args or [], fit)
        selector.eval()
    else:
        selector = load_selector(source)
    datamodule.use_records(preference_set(model, selector, datamodule, device))
    return True
