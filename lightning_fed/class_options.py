"""The options of the package's own ``model:`` and ``data:`` classes, checked from their source.

:mod:`lightning_fed.option_rules` declares the ranges the classes refuse with; what is left to
the live parser (10-20 s of CPU of imports first) is what the signatures themselves say: which
keys a class takes, which type each has, and the name tables some options are looked up in
(``data.template``, ``model.loss``, ``data.dataset``'s ``synthetic:`` sets, ``data.partition``,
``model.backbone.dtype``). These are read here from the package's source with ``ast``
(:mod:`lightning_fed.class_parameters`), never copied, so ``tests/test_class_options.py`` compares
them with the imported classes and tables.

Only what is certainly wrong is refused, as the live parser or the class would refuse it: a key
the class (or its ``backbone`` / ``lora`` dataclass) does not take, with the closest key or the
accepted ones; a word where an ``int``, ``float`` or ``bool`` is annotated; a name outside its
table; a LoRA rank above the backbone's hidden size, and ``data.max_length`` above its
positions, where the backbone's size is in the config or a local ``config.json``. Options are
named as every ``model:`` option is (``model.backbone.dtype``: the key without ``init_args``).
A ``class_path`` that names no class is refused here too (:func:`class_path_problem`, for the
strategy and round hooks as well). Anything else (an annotation not read here, a user's class
that exists) is left to the live parser.
"""

from __future__ import annotations

import ast
import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.class_kinds import wrong_kind_problem
from lightning_fed.class_locations import bound_class, defined, exported_path
from lightning_fed.class_parameters import (
    Annotated,
    class_chain,
    fields,
    registered,
    signature,
    subclasses,
    table,
)
from lightning_fed.class_paths import closest_name, dotted_path_problem, package_subclasses
from lightning_fed.errors import _REPLACED_OPTIONS
from lightning_fed.model_sources import missing_source_problem
from lightning_fed.option_rules import LORA, PACKAGES, SECTIONS, TAKES_LORA, class_rules
from lightning_fed.option_types import type_problem
from lightning_fed.transformers_configs import (
    config_class_keys,
    config_values_problem,
    heads_problem,
    missing_modules_problem,
    model_type_problem,
)
from lightning_fed.value_rules import unknown_key
from lightning_fed.yaml_reading import any_value

NESTED = {
    "backbone": ("lightning_fed.modules.backbone", "BackboneConfig"),
    "lora": ("lightning_fed.modules.lora", "LoraSettings"),
}
"""``model:``'s dataclass-valued options: their keys are that dataclass's fields."""
BACKBONE_TABLES = {
    "dtype": ("lightning_fed.modules.backbone", "DTYPES"),
    "quantization": ("lightning_fed.modules.backbone", "QUANTIZATIONS"),
}
"""``model.backbone.<option>`` -> the table (module, name) its value must be a key of."""
BUILTIN_TOKENIZERS = (
    ("lightning_fed.modules.backbone", "BYTES_TOKENIZER"),
    ("lightning_fed.modules.backbone", "GPT2_BPE_TOKENIZER"),
)
"""The tokenizers built in (``bytes``, ``gpt2-bpe``): no path, no hub id."""
BYTES_TOKENIZER_SIZE = 259
"""Token ids of the built-in ``bytes`` tokenizer: the 256 bytes, ``<pad>``, ``<eos>``, ``<bos>``
(:func:`lightning_fed.modules.backbone.byte_tokenizer` asserts their ids 256-258;
``tests/test_backbone_config_values_cli.py`` compares with the live tokenizer)."""
LOSSES = ("lightning_fed.modules.dpo_losses", "dpo_loss_function")
"""``model.loss`` of :class:`~lightning_fed.modules.DPOModule` and its subclasses: the registered names."""
SYNTHETIC = ("lightning_fed.datamodules.synthetic", "SYNTHETIC")
FEEDBACK_PRESETS = ("lightning_fed.datamodules.human_feedback", "FEEDBACK_PRESETS")
"""``data.preset`` of the ``Feedback*DataModule`` classes (TL;DR, SHP)."""
PARTITIONERS = ("lightning_fed.datamodules.partition", "Partitioner")
SYNTHETIC_PREFIX = "synthetic:"
PLUGIN_GROUPS = {
    "model": "lightning_fed.modules",
    "data": "lightning_fed.datamodules",
    "federation.strategy": "lightning_fed.strategies",
}
"""The entry-point groups whose plugins may add classes a short ``class_path`` names."""
SHORT_NAME_BASES = {"federation.strategy": "Strategy", "federation.hooks": "RoundHook"}
"""The base class whose subclasses (the package's, read from its source) a short ``class_path`` of
a strategy or a round hook names (jsonargparse resolves a short name among a base's subclasses)."""
ABSTRACT = frozenset({"FedOpt", "HeterogeneousRankLoRA"})
"""The package's strategy bases no run uses by name (listed among the choices otherwise)."""
HIDDEN_KEYS = ("n_embd", "hidden_size", "d_model")
"""A transformers config's hidden size (GPT-2's name first)."""
POSITION_KEYS = ("n_positions", "max_position_embeddings")
"""A transformers config's number of positions (GPT-2's name first)."""


def template_choices(class_path: str) -> tuple[str, ...] | None:
    """``data.template``'s choices of a data class: the table its ``template_choices`` returns."""
    for where, node in class_chain(PACKAGES["data"], class_path):
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "template_choices":
                ret = item.body[-1]
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Name):
                    value = table(where, ret.value.id)
                    return tuple(value) if isinstance(value, (tuple, list)) else None
                return None
    return None


def _choice_problem(section: str, name: str, where: str, value: Any, class_path: str) -> str | None:
    """A name outside the table the class looks ``value`` up in (``model.loss``, ``data.template``...)."""
    if not isinstance(value, str):
        return None
    option = f"{section}.{name}"
    if section == "model" and name == "loss" and where == "lightning_fed.modules.dpo" and "." not in value:
        losses = registered(*LOSSES)
        if losses and value not in losses:
            return f"{option} must be one of {sorted(losses)} or a dotted path to a function, got {value!r}"
    if section == "data" and name == "template" and (choices := template_choices(class_path)):
        if value not in choices:
            return f"{option} must be one of {list(choices)}, got {value!r}"
    # not test_dataset: only `test` reads it, and a `fit` with a bad one runs
    if section == "data" and name in ("dataset", "val_dataset") and value.startswith(SYNTHETIC_PREFIX):
        sets = table(*SYNTHETIC)
        if isinstance(sets, dict) and value[len(SYNTHETIC_PREFIX) :] not in sets:
            valid = [SYNTHETIC_PREFIX + key for key in sets]
            return f"{option} {value!r}: unknown synthetic set; valid: {valid}"
    if section == "data" and name == "preset" and where == FEEDBACK_PRESETS[0]:
        presets = table(*FEEDBACK_PRESETS)
        if isinstance(presets, dict) and value not in presets:
            return f"{option} must be one of {sorted(presets)}, got {value!r}"
    if section == "data" and name == "partition" and "." not in value and value.isidentifier():
        names = subclasses(*PARTITIONERS)
        if names and value not in names:  # the closest, as a misspelt class_path is (class_paths.short_name_problem)
            near = closest_name(value, names)
            hint = f"did you mean {near}?" if near else f"one of {', '.join(names)}, or a dotted class path"
            return f"{option} {value!r} is not a partitioner; {hint}"
    return None


def _nested_problem(
    option: str, owner: tuple[str, str], value: Mapping[str, Any], skip: set[str], as_text: frozenset[str] | set[str]
) -> str | None:
    """The keys, types and tables of a dataclass-valued option (``model.backbone``, ``model.lora``);
    ``as_text``: the options given on the command line (:func:`type_problem`)."""
    found = fields(*owner)
    if found is None:
        return None
    for key, item in value.items():
        if str(key) not in found:
            return unknown_key(option, owner[1], str(key), list(found))
        if str(key) in skip:
            continue
        name = f"{option}.{key}"
        if problem := type_problem(name, found[str(key)][0], item, name in as_text):
            return problem
        if owner[1] == "BackboneConfig" and key in BACKBONE_TABLES and isinstance(item, str):
            choices = table(*BACKBONE_TABLES[str(key)])
            if isinstance(choices, (dict, tuple)) and item not in choices:
                shown = sorted(choices) if isinstance(choices, dict) else choices
                return f"{option}.{key} must be one of {shown}, got {item!r}"
    if owner[1] == "BackboneConfig":
        return _backbone_source_problem(option, value)
    return None


def _backbone_source_problem(option: str, backbone: Mapping[str, Any]) -> str | None:
    """``BackboneConfig``'s own rule, named as the user writes it: exactly one of ``name_or_path``
    and ``config`` (both default to ``null``), and a ``config`` that names its ``model_type``."""
    given = [backbone.get(key) is not None for key in ("name_or_path", "config")]
    if all(given) or not any(given):
        which = "both" if all(given) else "neither"
        return f"exactly one of {option}.name_or_path and {option}.config must be set, got {which}"
    config = backbone.get("config")
    if isinstance(config, Mapping):  # a mapping of Any: jsonargparse reads `n_embd: "32"` as 32
        config = {key: any_value(value) for key, value in config.items()}
    if isinstance(config, Mapping) and "model_type" not in config:
        return f"{option}.config must contain 'model_type', got keys {sorted(map(str, config))}"
    builtin = (table(*BUILTIN_TOKENIZERS[0]), table(*BUILTIN_TOKENIZERS[1]))
    for key in ("name_or_path", "tokenizer"):
        spec = backbone.get(key)
        if not isinstance(spec, str) or spec.startswith("gguf:") or (key == "tokenizer" and spec in builtin):
            continue
        # a name_or_path hub id is looked up after every value is checked (class_sections.hub_model_problem)
        if problem := missing_source_problem(f"{option}.{key}", spec, hub=key == "tokenizer"):
            return problem
    model_type = config.get("model_type") if isinstance(config, Mapping) else None
    if isinstance(model_type, str) and (problem := model_type_problem(f"{option}.config.model_type", model_type)):
        return problem
    if isinstance(model_type, str) and (known := config_class_keys(model_type)) is not None:
        # transformers keeps a key its config does not take as an unread attribute (`n_embd_: 8`)
        name, keys = known
        for key in config:
            if str(key) not in keys:
                return unknown_key(f"{option}.config", f"{name} (model_type {model_type})", str(key), list(keys))
    if isinstance(config, Mapping) and (problem := heads_problem(f"{option}.config", dict(config))):
        return problem  # `n_head: 3` with `n_embd: 32`: the attention's ValueError after the imports
    if isinstance(config, Mapping) and (
        problem := config_values_problem(f"{option}.config", dict(config), tokenizer_size(backbone.get("tokenizer")))
    ):
        return problem  # `attn_pdrop: 2.0`, `vocab_size: 10`: the model's errors after the imports
    return None


def tokenizer_size(spec: Any) -> int | None:
    """The token ids the tokenizer ``spec`` (``model.backbone.tokenizer``; ``null`` with a ``config``:
    ``bytes``) makes, as far as known without transformers: :data:`BYTES_TOKENIZER_SIZE`, or a local
    folder's ``tokenizer.json`` (its largest id + 1); ``None`` for ``gpt2-bpe`` and a hub id (not read)."""
    if spec is None or spec == table(*BUILTIN_TOKENIZERS[0]):
        return BYTES_TOKENIZER_SIZE
    path = Path(spec).expanduser() / "tokenizer.json" if isinstance(spec, str) else None
    if path is None or not path.is_file():
        return None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
        vocab = loaded["model"]["vocab"]
        ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
        ids += [token["id"] for token in loaded.get("added_tokens") or []]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return max(ids) + 1 if ids and all(type(i) is int for i in ids) else None


def backbone_size(backbone: Any) -> dict[str, Any] | None:
    """The backbone's transformers config as far as known without torch: ``backbone.config``, or a
    local folder's ``config.json`` (``name_or_path``); ``None`` otherwise."""
    if not isinstance(backbone, Mapping):
        return None
    if isinstance(config := backbone.get("config"), Mapping):
        return {key: any_value(value) for key, value in config.items()}  # a mapping of Any: "32" is 32
    path = backbone.get("name_or_path")
    if isinstance(path, str) and (Path(path).expanduser() / "config.json").is_file():
        try:
            loaded = json.loads((Path(path).expanduser() / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None
    return None


def _first_int(config: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, int] | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


def lora_targets_problem(model: Any) -> str | None:
    """A ``model.lora.target_modules`` name the backbone has no module of, where its model type is
    known (``backbone.config`` or a local ``config.json``) and its modules are
    (:func:`~lightning_fed.transformers_configs.missing_modules_problem`): the model's line, 14.7 s of
    CPU earlier."""
    model_args = model.get("init_args") if isinstance(model, dict) else None
    if not isinstance(model_args, dict) or str(model.get("class_path", "")).rpartition(".")[2] not in TAKES_LORA:
        return None
    config, lora = backbone_size(model_args.get("backbone")), model_args.get("lora")
    if config is None or not isinstance(lora, dict):
        return None
    return missing_modules_problem(config.get("model_type"), lora.get("target_modules"))


def size_problem(model: Any, data: Any) -> str | None:
    """A LoRA rank above the backbone's hidden size (every target module, in or out, is that wide:
    its full rank is at most that), or ``data.max_length`` above the backbone's positions."""
    model_args = model.get("init_args") if isinstance(model, dict) else None
    config = backbone_size(model_args.get("backbone")) if isinstance(model_args, dict) else None
    if config is None:
        return None
    lora = model_args.get("lora")
    hidden = _first_int(config, HIDDEN_KEYS)
    takes_lora = str(model.get("class_path", "")).rpartition(".")[2] in TAKES_LORA
    rank = any_value(lora.get("r")) if isinstance(lora, dict) else None  # an int: "8" is 8 to the parser
    if takes_lora and hidden and isinstance(rank, int) and not isinstance(rank, bool) and rank > hidden[1]:
        # GPT-2's every target (c_attn, c_proj, c_fc) has n_embd on one side: its full rank, as
        # lightning_fed/modules/lora.py says it; another model's hidden size is an upper bound
        gpt2 = hidden[0] == "n_embd"
        why = (
            "the full rank of the largest target module" if gpt2 else f"the backbone's {hidden[0]}: no target is wider"
        )
        return f"model.lora.r must be <= {hidden[1]} ({why}), got {rank}"
    positions = _first_int(config, POSITION_KEYS)
    data_args = data.get("init_args") if isinstance(data, dict) else None
    length = any_value(data_args.get("max_length")) if isinstance(data_args, dict) else None
    if positions and isinstance(length, int) and not isinstance(length, bool) and length > positions[1]:
        return f"data.max_length must be <= the backbone's {positions[0]} ({positions[1]}), got {length}"
    return None


def _plugins_installed(section: str) -> bool:
    from importlib.metadata import entry_points

    return section in PLUGIN_GROUPS and bool(entry_points(group=PLUGIN_GROUPS[section]))


def _short_names(section: str) -> list[str]:
    """The classes ``section`` takes by short name: ``model:`` / ``data:`` the package's with rules,
    a strategy or round hook any of the package's subclasses of its base (read from source)."""
    if section in SHORT_NAME_BASES:
        return sorted(package_subclasses(SHORT_NAME_BASES[section]) - ABSTRACT)
    return sorted(SECTIONS[section])


def class_path_problem(section: str, value: Any, key: str | None = None) -> str | None:
    """A ``class_path`` of ``model:``, ``data:``, ``federation.strategy`` or a ``federation.hooks``
    item (``key``: ``federation.hooks[1]``) that certainly names no class: a short name none of the
    package's classes has (unless an installed plugin could add it) or a path into the section's
    package (``lightning_fed.modules.FedDPOModul``), refused naming the closest class, as the option
    names are; any other dotted path by :func:`~lightning_fed.class_paths.dotted_path_problem` (an
    uninstalled module, a name its source does not bind, a function, ``os.system``). A user's own
    class that exists is left to the live parser."""
    if section not in PACKAGES or not isinstance(value, dict):
        return None
    key = key or section
    if problem := wrong_kind_problem(section, value, key):  # a strategy as data: (lightning_fed/class_kinds.py)
        return problem
    class_path = value["class_path"]
    module, _, name = class_path.rpartition(".")
    package = PACKAGES[section]
    if not name.isidentifier():
        return None
    known = _short_names(section)
    if module and module != package and not module.startswith(package + "."):
        problem = dotted_path_problem(key, class_path)
        if problem is not None or module.partition(".")[0] != "lightning_fed" or bound_class(module, name):
            return problem
        # a path into the package whose module does not exist (red team 14 M9: lightning_fed.hooks.RoundLRSchedule,
        # refused after torch naming no class): the package's sources are all there, so it names no class
    elif module and defined(module, name):
        return None
    if not module and (name in known or (section not in SHORT_NAME_BASES and defined(package, name))):
        return None
    if not module and _plugins_installed(section):
        return None
    # every name ends in Module / DataModule: a higher cutoff than the options', or any word is "close"
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    if near:  # a path as the parser finds the class (RoundLRSchedule: in lightning_fed.callbacks, not round_hooks)
        hint = f"did you mean {(exported_path(package, near[0]) or f'{package}.{near[0]}') if module else near[0]}?"
    else:
        hint = f"the package's: {', '.join(known)}"
    return f"{key}: unknown class_path {class_path!r}; {hint}"


def class_option_problem(section: str, value: Any, as_text: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The line refusing a key or a value of ``section``'s class (``{"class_path", "init_args"}``)
    that its source says is certainly wrong, or ``None`` (the live parser decides). ``as_text``:
    the options given on the command line (``model.backbone.tokenizer``), kept as text by the parser."""
    if section not in ("model", "data") or not isinstance(value, dict):
        return None
    class_path = value["class_path"]
    if class_rules(section, class_path) is None:
        return None  # not one of the package's classes
    params: Annotated | None = signature(PACKAGES[section], class_path)
    if params is None:
        return None
    ruled = {rule.name for rule in class_rules(section, class_path) or ()}
    owner = class_path.rpartition(".")[2]
    for key, item in value["init_args"].items():
        name = str(key)
        if name not in params:
            if section == "data" and name in _REPLACED_OPTIONS:  # what replaces it, not the closest name
                return _REPLACED_OPTIONS[name]
            return unknown_key(section, owner, name, list(params))
        annotation, where = params[name]
        nested = section == "model" and name in NESTED and NESTED[name][1] in ast.unparse(annotation or ast.Name(""))
        if nested and item is not None and not isinstance(item, (Mapping, str)):  # `lora: [4, 8]`
            keys = ", ".join(fields(*NESTED[name]) or ())
            return f"model.{name} must be a mapping with keys {keys}, got {item!r}"
        if nested and isinstance(item, Mapping):
            skip = {rule.name for rule in LORA} if name == "lora" else set()
            if name == "lora" and owner not in TAKES_LORA:
                continue
            if problem := _nested_problem(f"model.{name}", NESTED[name], item, skip, as_text):
                return problem
            continue
        option = f"{section}.{name}"
        if name not in ruled and (problem := type_problem(option, annotation, item, option in as_text)):
            return problem
        if problem := _choice_problem(section, name, where, item, class_path):
            return problem
    return None
