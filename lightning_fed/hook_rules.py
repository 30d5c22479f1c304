"""The round hooks' option rules (``federation.hooks[i].<option>``), declared once, without torch.

Each hook of the package (``round_hooks/``, ``heterogeneity/``, ``selection/``, ``callbacks/``) with
options that take a range or choices has its :class:`~lightning_fed.value_rules.Rule` tuple here,
keyed by class name in :data:`HOOK_RULES`: the hook's ``__init__`` refuses a bad value through them
(:func:`~lightning_fed.value_rules.check`), and the precheck applies the same rules to each item of
``federation.hooks`` before torch is imported (:func:`hook_problems` names the item's index), through
:func:`lightning_fed.option_rules.class_rules`. Also ClientRanks' lists of ranks
(:func:`rank_lists_problem`, :func:`ranks_above_problem`,
:func:`per_client_length_problem`), AsyncArrivals' ``concurrency`` against the
clients (:func:`concurrency_problem`) and where the package's hooks live (:data:`HOOK_PACKAGES`).
Split from :mod:`lightning_fed.option_rules` (which holds ``model:``, ``data:``, ``federation:`` and
``federation.strategy:``'s rules and reads :data:`HOOK_RULES` from here).

Imports nothing but :mod:`lightning_fed.limits`, :mod:`lightning_fed.value_rules` (what a rule is)
and the standard library.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from lightning_fed.limits import MAX_LOCAL_STEPS
from lightning_fed.value_rules import SEED_MAX, Rule, at_least, in_range, one_of, problems

PROMPT_TEMPLATES = ("alpaca", "plain", "chat")
"""The prompt templates by name (``lightning_fed.datamodules.templates.TEMPLATE_CHOICES``, which
imports nothing heavy but sits in a package that does): EmulatorAlignment's ``template``."""

ALIGNMENT_OPTIMIZERS = ("sgd", "adamw")
"""EmulatorAlignment's ``optimizer``."""
KL_DIRECTIONS = ("eq2", "teacher_first")
"""EmulatorAlignment's ``kl_direction``."""
L2_TERMS = ("sum", "mean", "rms", "off")
"""EmulatorAlignment's ``l2_term``."""
HOOK = "federation.hooks[]."
"""A hook's options are named ``federation.hooks[i].<option>``; a class does not know its ``i``
(the precheck fills it in, :func:`hook_problems`)."""
CLIENT_GROUPING = (
    at_least(HOOK + "clip_loss", 0, low_open=True),
    at_least(HOOK + "noise_multiplier", 0, low_open=True, nullable=True),
)
EMULATOR_ALIGNMENT = (
    at_least(HOOK + "steps_per_round", 0, integer=True),
    at_least(HOOK + "distill_steps", 0, integer=True),
    at_least(HOOK + "batch_size", 1, integer=True),
    at_least(HOOK + "max_length", 2, integer=True),
    at_least(HOOK + "max_examples", 1, integer=True, nullable=True),
    at_least(HOOK + "lam", 0),
    at_least(HOOK + "lr", 0, low_open=True),
    one_of(HOOK + "optimizer", ALIGNMENT_OPTIMIZERS),
    one_of(HOOK + "kl_direction", KL_DIRECTIONS),
    one_of(HOOK + "l2_term", L2_TERMS),
    one_of(HOOK + "template", PROMPT_TEMPLATES),
)
"""EmulatorAlignment's."""
LR_SCHEDULES = ("constant", "cosine", "step")
"""RoundLRSchedule's ``schedule``."""
ROUND_LR_SCHEDULE = (
    one_of(HOOK + "schedule", LR_SCHEDULES),
    at_least(HOOK + "min_lr", 0),
    at_least(HOOK + "step_size", 1, integer=True),
    in_range(HOOK + "gamma", 0, 1, low_open=True),
    at_least(HOOK + "rounds", 1, integer=True, nullable=True),
)
"""RoundLRSchedule's (a hook of ``callbacks/``, named by its short name in a config)."""
HOOK_SEED = in_range(HOOK + "seed", 0, SEED_MAX, integer=True)
"""A hook's ``seed`` (numpy's ``default_rng`` refused ``-1`` with ``expected non-negative integer``,
naming no option, after the imports): bounded as
:func:`~lightning_fed.option_rules.seed_problem`'s ``seed_everything``."""
CLOCKS = ("virtual", "wall")
"""SystemHeterogeneity's ``clock``."""
SYSTEM_PROFILE = (
    in_range(HOOK + "local_steps", 1, MAX_LOCAL_STEPS, integer=True),
    at_least(HOOK + "step_time", 0, low_open=True),
    in_range(HOOK + "slow_fraction", 0, 1),
    at_least(HOOK + "slow_factor", 1),
    in_range(HOOK + "availability", 0, 1, low_open=True),  # 0: no client would ever be online
    in_range(HOOK + "dropout", 0, 1, high_open=True),  # 1: every client would drop out
)
"""The clients' profile options SystemHeterogeneity and AsyncArrivals both take (``SystemProfile`` checks
the same again, for a ``trace`` file's rows)."""
SYSTEM_HETEROGENEITY = (
    at_least(HOOK + "target", 1, integer=True, nullable=True),
    one_of(HOOK + "clock", CLOCKS),
    in_range(HOOK + "reply_margin", 0, 1, high_open=True),
    at_least(HOOK + "deadline", 0, low_open=True, nullable=True),
    *SYSTEM_PROFILE,
    HOOK_SEED,
)
"""SystemHeterogeneity's (a hook of ``heterogeneity/``)."""
PROXY_POOLINGS = ("mean", "last")
"""HierarchicalDataSelection's ``proxy_pooling`` (``null``: by the proxy's kind)."""
SMALL_SELECTIONS = ("warn", "error", "ignore")
"""``on_small_selection`` of the selection hooks that take it (``selection/coreset.py``'s ``CoresetSelection``)."""
HDS_TEXTS = ("full", "prompt")
HDS_FUSIONS = ("tsne", "pca", "kpca")
HDS_SERVER_NOISE = ("drop", "keep")
HDS_FRAMES = ("local", "anchored")
HDS_SENSITIVITIES = ("l2", "paper")
HDS_ACCOUNTANTS = ("rdp", "prv")
"""HierarchicalDataSelection's ``text``, ``fusion``, ``server_noise``, ``frame``, ``dp_sensitivity`` and
``dp_accountant`` (``selection/``'s ``TEXTS``, ``FUSIONS``... import torch; ``tests/test_option_rules.py``
compares them)."""
HIERARCHICAL_DATA_SELECTION = (
    one_of(HOOK + "proxy_pooling", PROXY_POOLINGS, nullable=True),
    one_of(HOOK + "on_small_selection", SMALL_SELECTIONS),
    one_of(HOOK + "text", HDS_TEXTS),
    one_of(HOOK + "fusion", HDS_FUSIONS),
    one_of(HOOK + "server_noise", HDS_SERVER_NOISE),
    one_of(HOOK + "frame", HDS_FRAMES, nullable=True),
    one_of(HOOK + "dp_sensitivity", HDS_SENSITIVITIES),
    one_of(HOOK + "dp_accountant", HDS_ACCOUNTANTS),
    at_least(HOOK + "tsne_iters", 250, integer=True),  # scikit-learn's minimum
    at_least(HOOK + "min_cluster_size", 2, integer=True),
    at_least(HOOK + "server_min_cluster_size", 2, integer=True),
    at_least(HOOK + "num_anchors", 3, integer=True),  # selection/anchors.py: fewer than 3 anchors fit no frame
)
"""HierarchicalDataSelection's and GlobalSelect's (hooks of ``selection/``; ``hds_options.py`` checks
the options that depend on each other). ``num_anchors`` is the package's own (the FedHDS paper sends
centroids in each client's t-SNE frame, with no anchors): ``load_anchor_items`` needs at least 3 of
them, and a count below 1 took every row of the set (``num_anchors: -1`` ran, red team 8 row 16)."""
SERVER_SIDE_CORESET = (in_range(HOOK + "ratio", 0, 1, low_open=True),)
"""RandomSelection's, PerplexitySelection's and CentralizedCoreset's (``selection/baselines.py``): the share kept."""
ASYNC_ARRIVALS = (at_least(HOOK + "concurrency", 1, integer=True), *SYSTEM_PROFILE, HOOK_SEED)
"""AsyncArrivals' (its clients' profile, :data:`SYSTEM_PROFILE`, was checked only by ``SystemProfile``
once the run was built: red team 9 row 9)."""
CLIENT_RANKS = (HOOK_SEED,)
"""ClientRanks' (its lists of ranks: :func:`rank_lists_problem`)."""


def rank_lists_problem(prefix: str, init_args: Mapping[str, Any]) -> str | None:
    """ClientRanks' ``per_client`` / ``choices`` (positive integers, not empty) and ``probabilities``
    (one per choice, >= 0, summing to 1), each line starting with ``prefix`` (the class's
    ``federation.hooks: ClientRanks``, the precheck's ``federation.hooks[i]``); ``None`` if they fit.
    ``RankAssignment`` raises these lines, and that exactly one of ``per_client``, ``choices``,
    ``column`` is given (red team 9 row 10: said by the class alone, after the imports, in two lines)."""
    given = [name for name in ("per_client", "choices", "column") if init_args.get(name) is not None]
    found = (
        []
        if len(given) == 1
        else [f"{prefix}: give exactly one of per_client, choices, column (got {given or 'none'})"]
    )
    for name in ("per_client", "choices"):
        values = init_args.get(name)
        if values is None:
            continue
        if not isinstance(values, (list, tuple)):
            return f"{prefix}.{name} must be a list of positive integers or null, got {values!r}"
        if not values:
            found.append(f"{prefix}.{name}: must not be empty")
        found += [
            f"{prefix}.{name}[{i}]: a rank must be a positive integer, got {r!r}"
            for i, r in enumerate(values)
            if isinstance(r, bool) or not isinstance(r, numbers.Integral) or not r > 0  # numpy's too
        ]
    probabilities, choices = init_args.get("probabilities"), init_args.get("choices")
    if probabilities is not None:
        if not isinstance(probabilities, (list, tuple)) or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) for p in probabilities
        ):
            return f"{prefix}.probabilities must be a list of numbers or null, got {probabilities!r}"
        if choices is None:
            found.append(f"{prefix}.probabilities: needs choices")
        elif isinstance(choices, (list, tuple)) and len(probabilities) != len(choices):
            found.append(f"{prefix}.probabilities: {len(probabilities)} values for {len(choices)} choices")
        if any(not (p >= 0) for p in probabilities) or not abs(sum(probabilities) - 1.0) < 1e-6:
            found.append(f"{prefix}.probabilities: must be >= 0 and sum to 1, got {list(probabilities)}")
    return "; ".join(found) or None


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def concurrency_problem(prefix: str, concurrency: Any, num_clients: Any) -> str | None:
    """AsyncArrivals' ``concurrency`` above ``data.num_clients`` (virtual arrivals keep that many
    clients training at once), the line starting with ``prefix`` (the class's ``federation.hooks:
    AsyncArrivals``, the precheck's ``federation.hooks[i]``); ``None`` if it fits. Red team 9 row 9:
    said by the class alone when the run was bound, after the imports, in two lines."""
    if _integer(concurrency) and _integer(num_clients) and concurrency > num_clients:
        return f"{prefix}.concurrency must be in [1, data.num_clients={num_clients}], got {concurrency}"
    return None


def target_below_line(target: int, least: int) -> str:
    """SystemHeterogeneity's ``target`` below ``federation.min_clients`` (a round closes at its
    target-th report: every round would fail; red team B11), after the option's prefix: the precheck's
    line (``federation.hooks[i].``) and the hook's when the run is bound (``check_server``)."""
    return (
        f"target={target} is below federation.min_clients={least}: a round closes at its target-th report,"
        " so every round would fail"
    )


def buffer_below_line(buffer_size: int, least: int) -> str:
    """FedBuff's ``buffer_size`` below ``federation.min_clients`` under AsyncArrivals' virtual arrivals
    (a server step takes exactly ``buffer_size`` arrivals: every round would fail; red team 17 B11): the
    precheck's line and AsyncArrivals' when the run is bound (``check_server``), the same."""
    return (
        f"federation.strategy.buffer_size={buffer_size} is below federation.min_clients={least}: a FedBuff"
        " step aggregates buffer_size updates, so every round would fail"
    )


def per_client_length_problem(prefix: str, per_client: Any, num_clients: Any) -> str | None:
    """ClientRanks' ``per_client`` not one rank per client of ``data.num_clients``, the line starting
    with ``prefix`` (as :func:`rank_lists_problem`'s); ``None`` if it fits. Red team 10 row 6b: said by
    the class alone when the run was bound, after the imports, in two lines."""
    if not isinstance(per_client, (list, tuple)) or not _integer(num_clients) or len(per_client) == num_clients:
        return None
    return (
        f"{prefix}.per_client: {len(per_client)} ranks for data.num_clients={num_clients} (one per client),"
        f" got {list(per_client)}"
    )


UNWRAPPED = {
    "AsyncArrivals": (
        "FedBuff",
        "its privacy accounting assumes synchronous rounds of sampled clients, which asynchronous arrivals replace",
    ),
}
"""Hook class name -> (the strategy it drives, why that strategy may not be wrapped by ClientLevelDP or
SecureAggregation): the hook's ``check_run`` and the precheck refuse the wrapper with
:func:`wrapped_strategy_problem`."""


def wrapped_strategy_problem(prefix: str, hook: str, wrapper: str) -> str:
    """The line refusing the hook ``hook`` (:data:`UNWRAPPED`) under the wrapper ``wrapper``, starting with
    ``prefix`` (the class's ``federation.hooks: AsyncArrivals``, the precheck's ``federation.hooks[i]: AsyncArrivals``).
    Red team 10 row 9: said by the class alone, after the imports (13 s of CPU), naming no file."""
    strategy, why = UNWRAPPED[hook]
    return (
        f"{prefix} cannot run under federation.strategy={wrapper}: {why}; use {strategy} without {wrapper},"
        f" or drop {hook}"
    )


def ranks_above_problem(prefix: str, init_args: Mapping[str, Any], max_rank: Any) -> str | None:
    """ClientRanks' ``per_client`` / ``choices`` ranks above the global LoRA rank ``max_rank``
    (``model.lora.r``; a choice of probability 0 is never drawn), the line starting with ``prefix``
    (as :func:`rank_lists_problem`'s); ``None`` if they fit. Red team 9 row 10: said by the class
    alone when the run was bound, after the imports, in two lines."""
    if not _integer(max_rank):
        return None
    for name in ("per_client", "choices"):
        values = init_args.get(name)
        if not isinstance(values, (list, tuple)):
            continue
        weights = init_args.get("probabilities") if name == "choices" else None
        if not isinstance(weights, (list, tuple)) or len(weights) != len(values):
            weights = [1] * len(values)
        above = [r for r, p in zip(values, weights, strict=True) if _integer(r) and r > max_rank and p != 0]
        if above:
            shown = list(dict.fromkeys(above))
            return f"{prefix}.{name}: ranks above the global LoRA rank model.lora.r={max_rank}, got {shown}"
    return None


HOOK_RULES: dict[str, tuple[Rule, ...]] = {
    "ClientGrouping": CLIENT_GROUPING,
    "EmulatorAlignment": EMULATOR_ALIGNMENT,
    "RoundLRSchedule": ROUND_LR_SCHEDULE,
    "SystemHeterogeneity": SYSTEM_HETEROGENEITY,
    "AsyncArrivals": ASYNC_ARRIVALS,
    "ClientRanks": CLIENT_RANKS,
    "HierarchicalDataSelection": HIERARCHICAL_DATA_SELECTION,
    "GlobalSelect": HIERARCHICAL_DATA_SELECTION,
    **dict.fromkeys(("RandomSelection", "PerplexitySelection", "CentralizedCoreset"), SERVER_SIDE_CORESET),
}
"""``federation.hooks:``' rules by class name."""
HOOK_PACKAGES = (
    "lightning_fed.round_hooks",
    "lightning_fed.heterogeneity",
    "lightning_fed.selection",
    "lightning_fed.callbacks",
)
"""Where the package's round hooks live (a hook is named by its short name or a path in one of these)."""


def hook_problems(rules: Iterable[Rule], values: Mapping[str, Any], index: int) -> list[str]:
    """:func:`problems` of the hook at ``federation.hooks[index]``, its messages naming the index."""
    return [p.replace("federation.hooks[].", f"federation.hooks[{index}].", 1) for p in problems(rules, values)]
