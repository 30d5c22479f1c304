"""What a private run refuses of the rest of the config, from the merged config's text (no torch).

Two checks the run made once its objects were built, each a comparison of config values alone:

* ``federation.privacy`` with a client-level budget (``target_epsilon`` or ``noise_multiplier``)
  needs ``ClientLevelDP`` in ``federation.strategy`` (:func:`lightning_fed.run_checks.run_problem`,
  :meth:`lightning_fed.privacy.run.RunPrivacy.plan`): red team 11 row 16, the right line after 11.6 s
  of CPU (torch, Lightning and transformers imported) where the other ``federation:``-only checks
  cost half a second.
* ``model.cache_reference=true`` in a private run (ClientLevelDP, or an example-level DP module:
  :func:`lightning_fed.privacy.run.privacy_enabled`;
  :meth:`lightning_fed.modules.dpo.DPOModule.keep_no_example_record`, issue 40): red team 11 row 15,
  two lines after the model was built.

Both are refused here only where certain: every strategy in ``federation.strategy`` (and those its
wrappers wrap) and the model are the package's classes; a class of the user's (which may subclass
``ClientLevelDP``) is left to the run's own check, which says the same line.
"""

from __future__ import annotations

from typing import Any

DP_MODULES = ("DPDPOModule", "DPSFTModule")
"""The package's example-level DP modules (:class:`~lightning_fed.privacy.dp_sgd.ExampleLevelDP`)."""


def needs_client_dp_line(strategy_name: str) -> str:
    """A client-level budget without ClientLevelDP: the precheck's and the run's line."""
    return (
        "federation.privacy sets a client-level budget: it needs federation.strategy ="
        f" lightning_fed.privacy.ClientLevelDP (around the server strategy), got {strategy_name}"
    )


def private_cache_line(why: str = "") -> str:
    """``model.cache_reference=true`` in a private run (``why``: what makes it private, where known)."""
    return (
        f"model.cache_reference=true in a private run{why}: the cache would record which examples were"
        " trained on in the checkpoint; set model.cache_reference=false (or leave it unset)"
    )


CLIENT_DP_WHY = " (federation.strategy has lightning_fed.privacy.ClientLevelDP)"
"""What makes a run private in :func:`private_cache_line`, when it is ClientLevelDP."""


def cache_options(problem: str) -> tuple[str, str | None] | None:
    """``(option, other)`` of a :func:`private_cache_line`: the option whose value it reports, and the option
    that makes the run private when another (``federation.strategy``): the precheck names each one's
    file (:func:`lightning_fed.config_precheck._in_file`; issue 41: the strategy's file was named for both)."""
    if not problem.startswith(private_cache_line("").split(":")[0].removesuffix(" in a private run")):
        return None
    return "model.cache_reference", "federation.strategy" if CLIENT_DP_WHY in problem else None


def _client_dp_in(strategy: Any) -> bool | None:
    """Whether ``federation.strategy`` (merged) has ClientLevelDP (itself or wrapped); ``None`` where a
    class of the user's or an unreadable value makes it uncertain."""
    from lightning_fed.wrapper_rules import _package_strategy, _section, _wrapper, wrapped_sections

    chain = [_section(strategy), *(section for _, section in wrapped_sections(strategy))]
    found = False
    for section in chain:
        if section is None:
            return None
        wrapper = _wrapper(section["class_path"])
        if wrapper is None and _package_strategy(section["class_path"]) is None:
            return None
        found = found or wrapper == "ClientLevelDP"
    return found


def _client_level(privacy: Any) -> bool:
    return isinstance(privacy, dict) and any(privacy.get(k) is not None for k in ("target_epsilon", "noise_multiplier"))


def privacy_strategy_problem(sections: dict[str, Any]) -> str | None:
    """A client-level ``federation.privacy`` without ClientLevelDP (module docstring), or ``None``."""
    federation, strategy = sections.get("federation"), sections.get("federation.strategy")
    if not isinstance(federation, dict) or not _client_level(federation.get("privacy")) or strategy is None:
        return None
    if _client_dp_in(strategy) is not False:
        return None
    from lightning_fed.wrapper_rules import _section

    section = _section(strategy)
    return needs_client_dp_line(section["class_path"].rpartition(".")[2]) if section else None


def private_cache_problem(sections: dict[str, Any]) -> str | None:
    """``model.cache_reference=true`` in a private run (module docstring), or ``None``."""
    from lightning_fed.class_kinds import package_class

    model = sections.get("model")
    if not isinstance(model, dict) or model.get("init_args", {}).get("cache_reference") is not True:
        return None
    name = model["class_path"].rpartition(".")[2]
    if package_class("model", model["class_path"]) and name in DP_MODULES:
        return private_cache_line(f" (model {name}: example-level DP)")
    strategy = sections.get("federation.strategy")
    if strategy is not None and _client_dp_in(strategy):
        return private_cache_line(CLIENT_DP_WHY)
    return None
