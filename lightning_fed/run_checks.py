"""Conflicts between a run's settings, found from the ``federation:`` section alone.

A conflict between the strategy, the round hooks, the compression and the privacy budget
needs neither the model nor the data, so it is found before either is built (every reader of a config calls
:func:`run_problem` through :func:`lightning_fed.run_parser.config_problem`, on the section
instantiated by itself: no backbone loads, no folder is made) and again when a Flower server binds the run. Checks that
need the clients' data or the module stay in :meth:`RoundHook.check_server`.
"""

from __future__ import annotations

from typing import Any

from lightning_fed.wrapper_rules import secure_compression_problem


def inner_strategy(strategy: Any) -> Any:
    """The strategy a wrapper (client-level DP, secure aggregation) aggregates with."""
    seen = 0
    while seen < 8:
        inner = getattr(strategy, "wrapped", None) or getattr(strategy, "strategy", None)
        if inner is None or inner is strategy:
            return strategy
        strategy, seen = inner, seen + 1
    return strategy


def missing_hook_problem(run: Any) -> str | None:
    """A strategy of :data:`~lightning_fed.hook_cross_rules.STRATEGY_NEEDS_HOOK` (FedBiscuit, or a
    subclass, behind a wrapper too) without the hook that drives it, in the precheck's line: a
    FedBiscuit run built in Python without ClientGrouping ran with exit 0 and never grouped its clients."""
    from lightning_fed.hook_cross_rules import STRATEGY_NEEDS_HOOK, missing_hook_line

    strategy = inner_strategy(run.strategy)
    bases = {cls.__name__ for cls in type(strategy).__mro__}
    hooks = list(run.hooks or [])
    for needing, (hook, why) in STRATEGY_NEEDS_HOOK.items():
        if needing in bases and not any(hook in {c.__name__ for c in type(h).__mro__} for h in hooks):
            return missing_hook_line(type(strategy).__name__, hook, why, [type(h).__name__ for h in hooks])
    return None


def run_problem(run: Any) -> str | None:
    """The first conflict between the settings of ``run`` (a ``FederatedRun``), or ``None``."""
    from lightning_fed.privacy.client_dp import client_level_dp

    if problem := missing_hook_problem(run):
        return problem
    strategy = run.strategy
    if run.compression and getattr(strategy, "secure_sum", False):  # the strategy declares it (SecureAggregation)
        return secure_compression_problem(run.compression)  # the precheck's line (lightning_fed/wrapper_rules.py)
    if run.privacy is not None and run.privacy.client_level and client_level_dp(strategy) is None:
        from lightning_fed.private_run_rules import needs_client_dp_line

        return needs_client_dp_line(type(strategy).__name__)  # the precheck's line
    for hook in run.hooks:
        check = getattr(hook, "check_run", None)
        if check is None:
            continue
        try:
            check(run)
        except (ValueError, TypeError) as err:  # a hook's one-line refusal
            return str(err)
    return None
