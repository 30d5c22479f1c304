"""One declaration of each option's values (lightning_fed/option_rules.py), used by the classes and
by the precheck (issue 41, item 9).

Two properties keep the two from drifting:

- every parameter of a listed config class that the class refuses a value of (tried with values
  past any range: huge, negative, zero, NaN, inf, an unknown word) is declared for that class;
- for every declared rule, the live class and the precheck's merged config refuse the same values
  (Hypothesis: at and past each boundary, NaN/inf, wrong types) with the same line.

The classes are built with ``load_backbone`` replaced by one that raises ``Accepted``: a value the
class takes never loads a model, so each try costs microseconds. Every rule is applied before the
backbone loads (``check(...)`` first in each ``__init__``).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lightning_fed.datamodules as datamodules
import lightning_fed.modules as modules
import lightning_fed.round_hooks as round_hooks
import lightning_fed.strategies as strategies
from lightning_fed.config_values import Merged
from lightning_fed.federation_rules import FEDERATION_MORE
from lightning_fed.hook_cross_rules import HOOK_NEEDS, STRATEGY_NEEDS_HOOK
from lightning_fed.hook_rules import HOOK_RULES
from lightning_fed.modules.backbone import DTYPES
from lightning_fed.option_rules import (
    CROSS_CHECKS,
    DATA_RULES,
    FEDERATION_ALL,
    LORA,
    MODEL_RULES,
    PACKAGES,
    STRATEGY_RULES,
    TAKES_LORA,
    Rule,
    class_rules,
)
from lightning_fed.run_config import FederationConfig

TINY = {
    "config": {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "n_positions": 32},
    "tokenizer": "bytes",
}
UNDECLARED = {
    # (class, option): why the precheck leaves it to the class
    ("PDPOModule", "*"): "PDPO's schedule options depend on each other (local_schedule, exclusion_*, reward_weight_*)",
    ("OffsiteModule", "generation_metric"): "None or a metric name, checked with the evaluation stage",
    ("*", "data.preset"): "a preset of lightning_fed/datamodules/presets.py (names with their data files)",
    ("*", "federation.batch_clients"): "'off', 'auto' or an integer >= 1: a union, not a range",
    ("*", "federation.compression"): "a spec (int8, int4+ef, topk:<fraction>...) parsed by compression/uplink.py",
    ("*", "data.template"): "the choices depend on the data module's kind (template_choices())",
    (
        "*",
        "data.max_prompt_length",
    ): "a length budget against data.max_length (data_cross_rules.py, the precheck's too)",
    (
        "*",
        "data.max_completion_length",
    ): "a length budget against data.max_length (data_cross_rules.py, the precheck's too)",
    (
        "*",
        "data.min_prompt_length",
    ): "a length budget against data.max_length (data_cross_rules.py, the precheck's too)",
    ("*", "model.loss"): "a name of modules/dpo_losses.py or a dotted path to a function: importing it is the check",
}
PREFIX = {"federation.hooks": "federation.hooks[]"}
"""How a section's options are named in the messages (a hook does not know its index in the list)."""


class Accepted(Exception):
    """The class took every value and went on to load its backbone."""


@pytest.fixture(autouse=True)
def _no_backbone(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise Accepted

    monkeypatch.setattr("lightning_fed.modules.base.load_backbone", refuse)
    monkeypatch.setattr("lightning_fed.modules.fedbiot.load_backbone", refuse)


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters ``cls`` takes, through ``**kwargs`` to its bases."""
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass.__module__.split(".")[0] != "lightning_fed":
            continue
        params = inspect.signature(klass.__init__).parameters
        for name, param in params.items():
            if name != "self" and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
                out.setdefault(name, param)
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    return out


def _build(section: str, cls: Any, values: dict[str, Any]) -> str | None:
    """What the class says of ``values``: its ``ValueError``'s line, or ``None`` if it took them."""
    kwargs = dict(values)
    if section == "model":
        kwargs.setdefault("backbone", TINY)
    elif section == "data" and "preset" in _parameters(cls):
        kwargs.setdefault("preset", "hh-rlhf")
    elif section == "federation":
        kwargs.update(_federation_context(kwargs))
    try:
        cls(**kwargs)
    except Accepted:
        return None
    except (ValueError, TypeError, AttributeError, OverflowError) as err:
        return str(err)
    return None


def _federation_context(values: dict[str, Any]) -> dict[str, Any]:
    """What lets one ``federation.`` option be judged alone: ``local_epochs`` without ``local_steps``,
    ``sampling_rate`` with Poisson sampling (and Poisson with a rate), ``min_clients`` below any
    ``clients_per_round`` drawn."""
    out: dict[str, Any] = {}
    if "local_epochs" in values:
        out["local_steps"] = None
    if values.get("sampling_rate") is not None:
        out["sampling"] = "poisson"
    if values.get("sampling") == "poisson":
        out["sampling_rate"] = 0.5
    if "min_clients" in values:
        out["clients_per_round"] = 10**14
    return out


OTHER_HOOKS = {
    "RoundLRSchedule": "lightning_fed.callbacks.lr_schedule",
    "SystemHeterogeneity": "lightning_fed.heterogeneity",
    "AsyncArrivals": "lightning_fed.heterogeneity",
    "ClientRanks": "lightning_fed.heterogeneity",
    "HierarchicalDataSelection": "lightning_fed.selection",
    "GlobalSelect": "lightning_fed.selection",
    "RandomSelection": "lightning_fed.selection",
    "PerplexitySelection": "lightning_fed.selection",
    "CentralizedCoreset": "lightning_fed.selection",
}
"""Hooks with declared rules outside ``round_hooks/`` (``hook_rules.HOOK_PACKAGES``), by their module."""


def _hook(name: str) -> type:
    """A hook with declared rules: the package's round hooks, and those of :data:`OTHER_HOOKS`."""
    import importlib

    return (
        getattr(importlib.import_module(OTHER_HOOKS[name]), name) if name in OTHER_HOOKS else getattr(round_hooks, name)
    )


def _classes() -> list[tuple[str, str, Any]]:
    out = [("model", name, getattr(modules, name)) for name in MODEL_RULES]
    out += [("data", name, getattr(datamodules, name)) for name in DATA_RULES]
    out += [("federation.strategy", name, getattr(strategies, name)) for name in STRATEGY_RULES]
    out += [("federation.hooks", name, _hook(name)) for name in HOOK_RULES]
    return [*out, ("federation", "FederationConfig", FederationConfig)]


def _declared(section: str, name: str) -> tuple[Rule, ...]:
    if section == "federation":
        return FEDERATION_ALL + FEDERATION_MORE
    return {
        "model": MODEL_RULES,
        "data": DATA_RULES,
        "federation.strategy": STRATEGY_RULES,
        "federation.hooks": HOOK_RULES,
    }[section][name]


def test_every_strategy_and_hook_of_the_package_has_its_rules_declared():
    """A strategy or round hook the package exports is in STRATEGY_RULES / HOOK_RULES (its values
    are then checked before torch is imported), or a wrapper whose options are objects."""
    from lightning_fed.federation.hooks import RoundHook
    from lightning_fed.strategies.base import Strategy

    exported = {n for n in strategies.__all__ if isinstance(getattr(strategies, n), type)}
    concrete = {n for n in exported if issubclass(getattr(strategies, n), Strategy)}
    concrete -= {n for n in concrete if inspect.isabstract(getattr(strategies, n))}
    assert concrete - {"Strategy"} <= set(STRATEGY_RULES) | {"HeterogeneousRankLoRA"}, sorted(concrete)
    hooks = {n for n in round_hooks.__all__ if issubclass(getattr(round_hooks, n), RoundHook)}
    assert hooks | set(OTHER_HOOKS) == set(HOOK_RULES)


PROBES = (-(10**12), -1, 0, 10**12, -1e300, 1e300, math.nan, math.inf, "no-such-choice")


@pytest.mark.parametrize(("section", "name", "cls"), _classes(), ids=[c[1] for c in _classes()])
def test_every_parameter_a_class_bounds_is_declared(section, name, cls):
    declared = {rule.option for rule in _declared(section, name)}
    params = (
        {f.name for f in fields(FederationConfig)} if section == "federation" else set(_parameters(cls)) - {"backbone"}
    )
    assert {rule.name for rule in _declared(section, name)} <= params, "a rule for an option the class does not take"
    bounded = set()
    for param in sorted(params):
        option = f"{PREFIX.get(section, section)}.{param}"
        for probe in PROBES:
            said = _build(section, cls, {param: probe})
            if said is not None and said.startswith(f"{option} must"):
                bounded.add(option)
    exempt = {
        option
        for option in bounded
        if (name, "*") in UNDECLARED or (name, option.rsplit(".", 1)[1]) in UNDECLARED or ("*", option) in UNDECLARED
    }
    assert bounded - exempt <= declared, (
        f"{name} bounds options the precheck does not know: {sorted(bounded - exempt - declared)}"
    )
    assert declared <= bounded, f"{name}: declared rules the class does not apply: {sorted(declared - bounded)}"


def test_the_torch_free_choices_are_the_classes_choices():
    from lightning_fed.option_rules import DTYPES as RULE_DTYPES

    assert RULE_DTYPES == tuple(sorted(DTYPES))
    from lightning_fed.datamodules.templates import TEMPLATE_CHOICES
    from lightning_fed.hook_rules import PROMPT_TEMPLATES

    assert PROMPT_TEMPLATES == TEMPLATE_CHOICES
    from lightning_fed import hook_rules as rules
    from lightning_fed.selection import anchors, clustering, coreset, features, fusion, privacy

    assert (rules.PROXY_POOLINGS, rules.SMALL_SELECTIONS) == (features.POOLINGS, coreset.SMALL_SELECTION)
    assert (rules.HDS_TEXTS, rules.HDS_FUSIONS, rules.HDS_FRAMES) == (features.TEXTS, fusion.FUSIONS, anchors.FRAMES)
    assert (rules.HDS_SERVER_NOISE, rules.HDS_SENSITIVITIES) == (clustering.SERVER_NOISE, privacy.SENSITIVITIES)
    assert rules.HDS_ACCOUNTANTS == privacy.ACCOUNTANTS


@pytest.mark.parametrize(
    ("prune_gamma", "rank_penalty"), [(None, 0.0), (None, 0.1), (None, 2.0), (0.5, 0.1), (0.5, 0.0), (None, 1e-300)]
)
def test_hetlora_and_the_precheck_refuse_a_rank_penalty_without_prune_gamma_alike(prune_gamma, rank_penalty):
    from lightning_fed.option_rules import hetlora_problem

    said = _build("federation.strategy", strategies.HetLoRA, {"prune_gamma": prune_gamma, "rank_penalty": rank_penalty})
    assert said == hetlora_problem({"prune_gamma": prune_gamma, "rank_penalty": rank_penalty})
    merged = Merged()
    strategy = {"class_path": "HetLoRA", "init_args": {"prune_gamma": prune_gamma, "rank_penalty": rank_penalty}}
    merged.set_section("federation.strategy", strategy)
    assert merged.problem() == said
    assert (said is None) == (prune_gamma is not None or rank_penalty == 0)


def _boundaries(rule: Rule) -> list[Any]:
    if rule.choices is not None:
        return [*rule.choices, "", rule.choices[0].upper(), 1, None]
    out: list[Any] = [None, True, "1", math.nan, math.inf, -math.inf]
    for edge in (rule.low, rule.high):
        if edge is None:
            continue
        if rule.integer:
            out += [int(edge) - 1, int(edge), int(edge) + 1, float(edge)]
        else:
            out += [edge, math.nextafter(edge, -math.inf), math.nextafter(edge, math.inf), int(edge)]
    return out


def _values(rule: Rule) -> st.SearchStrategy:
    numbers = st.integers(-(10**13), 10**13) if rule.integer else st.floats(allow_nan=True, allow_infinity=True)
    other = st.one_of(st.integers(-5, 5), st.floats(-5, 5), st.text(max_size=3), st.booleans(), st.none())
    return st.one_of(st.sampled_from(_boundaries(rule)), numbers, other)


def _through_cli(rule: Rule, value: Any, expected: str | None) -> str | None:
    """What the CLI says of ``value``: a NaN or inf anywhere is refused by one check before any
    class's (``config_values.non_finite_problem``, as ``FederatedCLI.before_instantiate_classes``),
    and so is ``nan``/``inf`` written for a number (the parser's type check, simplified)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{rule.option} must be a finite number, got {value}"
    if _word(value) and rule.choices is None and not rule.integer:
        return f"{rule.option} must be a finite number, got {value}"
    return expected


def _word(value: Any) -> bool:
    return isinstance(value, str) and value.lower().lstrip("+-") in ("nan", "inf", "infinity")


CASES = [(s, n, c, r) for s, n, c in _classes() for r in _declared(s, n)]


HOOK_CONTEXT = {"ClientRanks": {"choices": [4]}}
"""What lets one hook option be judged alone: ClientRanks needs one of per_client, choices, column
(the precheck says so too, red team 9 row 10)."""


def _precheck(section: str, name: str, rule: Rule, value: Any) -> str | None:
    merged = Merged()
    if section == "federation":
        merged.set_section("federation", {rule.name: value, **_federation_context({rule.name: value})})
    elif section == "federation.strategy":  # as a config file gives it, under federation: (with the hook it needs)
        hooks = [STRATEGY_NEEDS_HOOK[name][0]] if name in STRATEGY_NEEDS_HOOK else []
        strategy = {"class_path": name, "init_args": {rule.name: value}}
        merged.set_section("federation", {"strategy": strategy, "hooks": hooks})
    elif section == "federation.hooks":  # the second hook of the list: its messages say [1]
        context = HOOK_CONTEXT.get(name, {})
        hook = {"class_path": f"{PACKAGES[section]}.{name}", "init_args": {**context, rule.name: value}}
        hooks = [{"class_path": f"{PACKAGES[section]}.{name}", "init_args": context}, hook]  # any target fits
        strategy = HOOK_NEEDS.get(name, ("FedAvg",))[0]  # the strategy the hook drives
        merged.set_section("federation", {"hooks": hooks, "clients_per_round": 10**14, "strategy": strategy})
    else:
        merged.set_section(section, {"class_path": f"{PACKAGES[section]}.{name}", "init_args": {rule.name: value}})
    return merged.problem()


@pytest.mark.parametrize(("section", "name", "cls", "rule"), CASES, ids=[f"{c[1]}-{c[3].name}" for c in CASES])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_class_and_the_precheck_refuse_the_same_values_with_the_same_line(section, name, cls, rule, data):
    value = data.draw(_values(rule))
    expected = rule.problem(rule.parsed(value))
    said = _build(section, cls, {rule.name: rule.parsed(value)})  # what jsonargparse hands the class
    if expected is None:
        assert said is None or not said.startswith(f"{rule.option} must"), said
    else:
        assert said == expected
    via_cli = _through_cli(rule, value, expected)
    if via_cli is None and expected is None and name in CROSS_CHECKS:  # e.g. HetLoRA's rank_penalty alone
        via_cli = CROSS_CHECKS[name]({rule.name: rule.parsed(value)})
        assert said == via_cli
    if via_cli is not None and section == "federation.hooks":
        via_cli = via_cli.replace("federation.hooks[].", "federation.hooks[1].", 1)
    if via_cli is None and section == "federation":  # its checks of two options too (federation_rules.py)
        via_cli = said
    assert _precheck(section, name, rule, value) == via_cli


@pytest.mark.parametrize("rule", LORA, ids=[r.name for r in LORA])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_lora_settings_and_the_precheck_refuse_the_same_values(rule, data):
    value = data.draw(_values(rule))
    expected = rule.problem(rule.parsed(value))
    try:
        modules.LoraSettings(**{rule.name: rule.parsed(value)})
        said = None
    except (ValueError, TypeError) as err:
        said = str(err)
    assert said == expected or (expected is None and not said.startswith(rule.option))
    merged = Merged()
    merged.set_section("model", {"class_path": "DPOModule", "init_args": {"lora": {rule.name: value}}})
    if (isinstance(value, float) and not math.isfinite(value)) or (_word(value) and not rule.integer):
        expected = f"{rule.option} must be a finite number, got {value}"  # as model.beta's (issue 41)
    assert merged.problem() == expected
    assert "DPOModule" in TAKES_LORA


@pytest.mark.parametrize(
    ("section", "class_path", "known"),
    [
        ("model", "DPOModule", True),
        ("model", "lightning_fed.modules.DPOModule", True),
        ("model", "lightning_fed.modules.dpo.DPOModule", True),
        ("model", "my_package.DPOModule", False),
        ("model", "MyModule", False),
        ("data", "lightning_fed.datamodules.PreferenceDataModule", True),
        ("data", "lightning_fed.modules.PreferenceDataModule", False),
    ],
)
def test_a_class_path_selects_rules_only_for_the_package_s_own_classes(section, class_path, known):
    assert (class_rules(section, class_path) is not None) == known


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_rule_s_interval_is_what_its_message_says(value):
    rule = Rule("model.x", low=0, high=1, low_open=True)
    assert (rule.problem(value) is None) == (math.isfinite(value) and 0 < value <= 1)
    assert rule.problem(value) in (None, f"model.x must be in (0, 1], got {value}")


SOURCE_READ = [
    c for c in _classes() if c[0] in ("federation.strategy", "federation.hooks") and c[1] != "RoundLRSchedule"
]  # the hooks of OTHER_HOOKS by their full path
"""RoundLRSchedule is a hook of ``callbacks/``, outside ``PACKAGES["federation.hooks"]``: its values are
checked before torch, an option it does not take is left to the live parser."""


@pytest.mark.parametrize(("section", "name", "cls"), SOURCE_READ, ids=[c[1] for c in SOURCE_READ])
def test_the_options_read_from_the_source_are_the_class_s_parameters(section, name, cls):
    """lightning_fed/class_parameters.py reads them without importing the class (the precheck's
    unknown-option check); here the class is imported and asked."""
    from lightning_fed.class_parameters import parameters

    if name not in OTHER_HOOKS:
        assert parameters(PACKAGES[section], name) == set(_parameters(cls))
    assert parameters(PACKAGES[section], f"{cls.__module__}.{name}") == set(_parameters(cls))
