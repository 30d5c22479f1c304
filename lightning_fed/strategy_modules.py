"""What a server strategy needs of the model (``model:``), declared once (issue 41: a config error
before torch is imported).

:class:`~lightning_fed.strategies.FedBiscuit` aggregates U selectors, each a LoRA adapter of
:class:`~lightning_fed.modules.BinarySelectorModule` named by its index: over another module (the
shipped ``tiny`` config's ``DPOModule``), or over fewer selectors than its own ``num_selectors``,
its ``setup`` found selectors without parameters, after 11-12 s of imports and a TensorBoard
file written (``FedBiscuit: no parameters for selectors [1, 2]``). :data:`MODULE_NEEDS` says it
once: :class:`~lightning_fed.callbacks.FederatedLoop` asks :func:`module_problem` of the built
strategy and module before the strategy's ``setup``, and the precheck
(:func:`config_module_problem`) of the merged config, the classes and their defaults read from
the source (:mod:`lightning_fed.class_parameters`), so both refuse with the same line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from lightning_fed.class_parameters import class_chain, init_defaults
from lightning_fed.option_rules import PACKAGES


class ModuleNeed(NamedTuple):
    """The module class a strategy aggregates, the options both must set alike, and why."""

    module: str
    same: tuple[str, ...]
    why: str


MODULE_NEEDS = {
    "FedBiscuit": ModuleNeed("BinarySelectorModule", ("num_selectors",), "aggregates one LoRA selector per cluster"),
}
"""Strategy class name -> what it needs of ``model:``."""


def module_problem(
    strategy: str, strategy_options: Mapping[str, Any], module_classes: Iterable[str], module_options: Mapping[str, Any]
) -> str | None:
    """The line refusing ``model:`` for the strategy ``strategy`` (class name), or ``None``.
    ``module_classes``: the module's class name and its bases' (a subclass of the needed module
    is one); the options: their values as set or defaulted."""
    need = MODULE_NEEDS.get(strategy)
    if need is None:
        return None
    classes = list(module_classes)
    example = ", ".join(f"{k}={strategy_options.get(k)!r}" for k in need.same)
    if need.module not in classes:
        return (
            f"federation.strategy={strategy} needs model: {need.module}({example}) ({strategy} {need.why}),"
            f" got {classes[0] if classes else None}"
        )
    for key in need.same:
        if strategy_options.get(key) != module_options.get(key):
            return (
                f"federation.strategy.{key}={strategy_options.get(key)!r} must equal model.{key}="
                f"{module_options.get(key)!r} ({strategy} {need.why})"
            )
    return None


def aggregating_strategy(strategy: Any, names: Iterable[str] = ()) -> Any:
    """The merged config's ``federation.strategy`` (``{"class_path", "init_args"}``) that aggregates:
    the strategy a ClientLevelDP / SecureAggregation wraps (its ``strategy`` option), or the first
    of ``names`` met on the way; not a mapping where that cannot be told from the config."""
    for _ in range(4):  # ClientLevelDP / SecureAggregation wrap the strategy that aggregates
        if not isinstance(strategy, dict):
            return None
        inner = strategy.get("init_args", {}).get("strategy")
        if strategy["class_path"].rpartition(".")[2] in names or inner is None:
            break
        strategy = {"class_path": inner, "init_args": {}} if isinstance(inner, str) else inner
    return strategy


def config_module_problem(model: Any, strategy: Any) -> str | None:
    """:func:`module_problem` of the merged config's ``model:`` and ``federation.strategy``
    (``{"class_path", "init_args"}``; a wrapper's inner strategy as well), or ``None`` where a
    class is not the package's."""
    strategy = aggregating_strategy(strategy, MODULE_NEEDS)
    if not isinstance(strategy, dict) or not isinstance(model, dict):
        return None
    name = strategy["class_path"].rpartition(".")[2]
    if name not in MODULE_NEEDS or not list(class_chain(PACKAGES["federation.strategy"], strategy["class_path"])):
        return None
    chain = [node.name for _, node in class_chain(PACKAGES["model"], model["class_path"])]
    if not chain:
        return None  # a user's module: the live check decides
    strategy_options = {**init_defaults(PACKAGES["federation.strategy"], name), **strategy.get("init_args", {})}
    module_options = {**init_defaults(PACKAGES["model"], model["class_path"]), **model.get("init_args", {})}
    return module_problem(name, strategy_options, chain, module_options)
