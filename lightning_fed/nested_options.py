"""Values nested inside a ``model:`` or ``data:`` option, checked from the package's source before
torch is imported (issue 41: each was refused only after the imports, 8-11 s of CPU, in words
naming no option: ``TypeError: planted_preferences() got an unexpected keyword argument``,
``Field 'n_layer' expected int, got bool``, ``unhashable type: 'dict'``).

- ``data.synthetic_args``: the keyword arguments of the generator ``data.dataset``
  (``synthetic:<name>``) names, the function :data:`~lightning_fed.datamodules.synthetic.SYNTHETIC`
  maps it to: each key one of its parameters (or the closest is named), an ``int`` / ``float``
  parameter a number, a ``Sequence[str]`` one a string or a list of strings, and ``groups`` names
  of :data:`~lightning_fed.datamodules.synthetic.PREFERENCE_GROUPS`;
- ``model.backbone.config``: a mapping whose ``model_type`` is a string and whose sizes
  (:data:`INTEGER_SIZES`) are integers (transformers' config classes refuse ``false`` and
  ``'NaN'`` there; a bool is no integer to them);
- ``data.partition`` given as ``{class_path, init_args}`` of the package's
  :class:`~lightning_fed.datamodules.partition.Partitioner` dataclasses: its fields (the
  closest named), the required ones present, their types, and
  :class:`~lightning_fed.datamodules.partition.Dirichlet`'s own bounds (:data:`PARTITION_RULES`);
  a ``class_path`` that names no class, with the closest (a dotted one its module does not bind,
  :func:`~lightning_fed.class_paths.dotted_path_problem`; a short one no partitioner has).

An option below ``data.partition`` given on the command line (``--data.init_args.partition.alpha=-1``
after ``--data.init_args.partition=Dirichlet``) is followed into the partition's ``init_args``
(:func:`class_option_target`), as jsonargparse reads it. Everything else is left to the live parser
and the classes, as before.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from lightning_fed.class_parameters import (
    dataclass_fields,
    function_definition,
    function_parameters,
    subclasses,
    table,
    table_names,
)
from lightning_fed.class_paths import dotted_path_problem, short_name_problem
from lightning_fed.data_cross_rules import READS_ITS_SOURCE, field_mapped, local_columns, partition_column_problem
from lightning_fed.limits import BUILDS_WEIGHTS, MAX_CONFIG_PARAMETERS
from lightning_fed.option_rules import class_rules
from lightning_fed.value_rules import Rule, at_least, in_range, problems, unknown_key
from lightning_fed.yaml_reading import any_value, value_of

SYNTHETIC_MODULE = "lightning_fed.datamodules.synthetic"
SYNTHETIC_PREFIX = "synthetic:"
NAME_TABLES = {
    "groups": (SYNTHETIC_MODULE, "PREFERENCE_GROUPS"),
    "families": ("lightning_fed.datamodules.synthetic_instructions", "INSTRUCTION_FAMILIES"),
    "held_out_families": ("lightning_fed.datamodules.synthetic_instructions", "INSTRUCTION_FAMILIES"),
}
"""A generator's ``Sequence[str]`` parameter -> the table (module, name) its names are keys of."""
GENERATOR_RULES: dict[str, tuple[Rule, ...]] = {
    "planted_hard_preferences": (
        in_range("data.synthetic_args.label_noise", 0, 0.5, high_open=True),
        in_range("data.synthetic_args.distractor", 0, 1),
        in_range("data.synthetic_args.purity", 0.5, 1, low_open=True),
    ),
}
"""The bounds a generator raises with (``planted_hard_preferences: `purity` must be in (0.5, 1]``,
after the imports), named as the option is written."""
NOT_EMPTY = frozenset({"groups", "families"})
"""The generators' name lists that may not be empty (``planted_preferences: `groups` is empty``,
``planted_instructions: no family left``, 15 s of CPU after the imports; ``families: null`` is every family)."""
INTEGER_SIZES = (
    "n_layer",
    "n_head",
    "n_embd",
    "n_positions",
    "n_inner",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "intermediate_size",
    "max_position_embeddings",
    "vocab_size",
)
"""A transformers config's sizes (GPT-2's names and the common ones): integers, not bools, >= 1
(``n_inner: -4`` was ``Trying to create tensor with negative dimension`` after the imports; ``null``
is its default, 4 x ``n_embd``)."""
PARTITIONS = "lightning_fed.datamodules.partition"
PARTITION_RULES: dict[str, tuple[Rule, ...]] = {
    "Dirichlet": (
        at_least("data.partition.alpha", 0, low_open=True),
        at_least("data.partition.min_size", 1, integer=True),
        at_least("data.partition.max_attempts", 1, integer=True),
    ),
}
"""The bounds a partitioner's ``__post_init__`` raises with, named as the option is written."""


def _kind(annotation: ast.expr | None) -> str | None:
    """``int``, ``float``, ``bool``, ``str`` or ``names`` (``Sequence[str]`` and the like) of an annotation."""
    if annotation is None:
        return None
    text = ast.unparse(annotation).replace(" ", "").removesuffix("|None")
    if text in ("int", "float", "bool", "str"):
        return text
    return "names" if text in ("Sequence[str]", "list[str]", "tuple[str,...]") else None


def _plain_problem(option: str, kind: str | None, value: Any, nullable: bool = True) -> str | None:
    """A value of the wrong type for ``kind`` (``None``: not checked), as one line; ``null`` too where
    not ``nullable``. A string is read as jsonargparse reads one for an ``int``/``float``/``bool``
    parameter (``alpha: "0.3"``, as every other section: :meth:`~lightning_fed.value_rules.Rule.parsed`)."""
    if (value is None and nullable) or kind is None:
        return None
    if isinstance(value, str) and kind in ("int", "float", "bool"):
        loaded = value_of(value)
        if not isinstance(loaded, str) and loaded is not None and _plain_problem(option, kind, loaded) is None:
            return None  # the parser casts it; a string it does not cast is refused as given
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return f"{option} must be an integer, got {value!r}"
    if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"{option} must be a number, got {value!r}"
    if kind == "bool" and not isinstance(value, bool):
        return f"{option} must be true or false, got {value!r}"
    if kind == "str" and not isinstance(value, str):
        return f"{option} must be a string, got {value!r}"
    if kind == "names":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            return f"{option} must be a name or a list of names, got {value!r}"
        for i, item in enumerate(items):
            if not isinstance(item, str):
                return f"{option}[{i}] must be a name (a string), got {item!r}"
    return None


def synthetic_args_problem(init_args: Mapping[str, Any]) -> str | None:
    """``data.synthetic_args`` against the generator ``data.dataset`` names (module docstring)."""
    dataset, args = init_args.get("dataset"), init_args.get("synthetic_args")
    if not isinstance(dataset, str) or not dataset.startswith(SYNTHETIC_PREFIX) or args is None:
        return None
    generator = (table_names(SYNTHETIC_MODULE, "SYNTHETIC") or {}).get(dataset[len(SYNTHETIC_PREFIX) :])
    params = function_parameters(SYNTHETIC_MODULE, generator) if generator else None
    if params is None:
        return None  # an unknown set is refused by its own check (class_options)
    if not isinstance(args, Mapping):
        return f"data.synthetic_args must be a mapping of {generator}'s options ({', '.join(params)}), got {args!r}"
    args = {key: any_value(value) for key, value in args.items()}
    for key, value in args.items():
        option = f"data.synthetic_args.{key}"
        if str(key) not in params:
            return unknown_key("data.synthetic_args", f"{generator} ({dataset})", str(key), list(params))
        annotation = params[str(key)][0]
        kind = _kind(annotation)
        # a name list annotated without None (`groups: Sequence[str]`): null was `TypeError: 'NoneType'
        # object is not iterable` after the imports (red team 8, sy04)
        nullable = kind != "names" or annotation is None or "None" in ast.unparse(annotation)
        if problem := _plain_problem(option, kind, value, nullable):
            return problem
        if kind == "names" and str(key) in NAME_TABLES and value is not None:  # families: null is every family
            names = table(*NAME_TABLES[str(key)])
            items = [value] if isinstance(value, str) else value
            if isinstance(names, dict) and (bad := [v for v in items if v not in names]):
                return f"{option}: unknown name {bad[0]!r}; valid: {sorted(names)}"
            if isinstance(names, dict) and not items and str(key) in NOT_EMPTY:
                return f"{option} must name at least one of {sorted(names)}, got []"
    rules = GENERATOR_RULES.get(generator, ())
    found = problems(rules, {rule.name: rule.parsed(args[rule.name]) for rule in rules if rule.name in args})
    if found:
        return "; ".join(found)
    return _families_problem(args) if generator == "planted_instructions" else None


def _default(function: str, name: str) -> Any:
    """The default of the planted-set generator ``function``'s parameter ``name`` (a literal), or ``None``."""
    node = function_definition(SYNTHETIC_MODULE, function)
    if node is None:
        return None
    names = [a.arg for a in node.args.args]
    if name not in names or names.index(name) < len(names) - len(node.args.defaults):
        return None
    try:
        return ast.literal_eval(node.args.defaults[names.index(name) - len(names)])
    except ValueError:
        return None


def _families_problem(args: Mapping[str, Any]) -> str | None:
    """``planted_instructions``' families in use (``families`` less ``held_out_families``, names
    checked before): none left, or fewer than ``families_per_client`` (its default read from its
    signature), as the generator refuses them after the imports."""
    table_ = table(*NAME_TABLES["families"])
    families = args.get("families")
    families = list(table_) if families is None and isinstance(table_, dict) else families
    held = args.get("held_out_families", ())
    families, held = ([v] if isinstance(v, str) else v for v in (families, held))
    per_client = args.get("families_per_client", _default("planted_instructions", "families_per_client"))
    if not isinstance(families, list) or not isinstance(held, (list, tuple)) or type(per_client) is not int:
        return None
    active = [name for name in families if name not in held]
    if families and not active:
        return f"data.synthetic_args.held_out_families {list(held)} leaves no family of {families}"
    if active and not 1 <= per_client <= len(active):
        where = f"[1, {len(active)}] (the families in use)"
        return f"data.synthetic_args.families_per_client must be in {where}, got {per_client}"
    return None


def backbone_config_problem(config: Any) -> str | None:
    """``model.backbone.config``: a mapping, its ``model_type`` a string, its sizes integers."""
    option = "model.backbone.config"
    if config is None:
        return None
    if not isinstance(config, Mapping):
        return (
            f"{option} must be a transformers config as a mapping (model_type: gpt2, n_layer: 2, ...), got {config!r}"
        )
    config = {key: any_value(value) for key, value in config.items()}
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        return f"{option}.model_type must be a transformers model type (a string such as 'gpt2'), got {model_type!r}"
    for key in INTEGER_SIZES:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"{option}.{key} must be an integer, got {value!r}"
        if value is not None and value < 1:  # n_head: 0 was a ZeroDivisionError after the imports
            return f"{option}.{key} must be >= 1, got {value}"
    weights = config_weights(config)
    if weights > MAX_CONFIG_PARAMETERS and BUILDS_WEIGHTS.get():
        return (
            f"{option}: about {weights:.3g} weights, more than {MAX_CONFIG_PARAMETERS:.0e} (lightning_fed/limits.py):"
            " a model built from a config has random weights; load a pretrained one with backbone.name_or_path"
        )
    return None


def config_weights(config: Mapping[str, Any]) -> int:
    """The weights a transformers config builds, estimated from its sizes (:data:`MAX_CONFIG_PARAMETERS`'s
    formula; GPT-2's names or the common ones, a missing size left out)."""

    def size(*names: str) -> int:
        return next((config[n] for n in names if isinstance(config.get(n), int)), 0)

    hidden = size("n_embd", "hidden_size")
    layers = size("n_layer", "num_hidden_layers")
    inner = size("intermediate_size") or 4 * hidden
    return (
        layers * (4 * hidden**2 + 2 * hidden * inner)
        + (size("vocab_size") + size("n_positions", "max_position_embeddings")) * hidden
    )


def partition_problem(partition: Any) -> str | None:
    """``data.partition`` as ``{class_path, init_args}`` (or a class name) of the package's
    partitioners (module docstring)."""
    if isinstance(partition, str):  # a class name alone (`partition: Dirichlet`): its defaults only
        partition = {"class_path": partition}
    if not isinstance(partition, Mapping) or not isinstance(class_path := partition.get("class_path"), str):
        return None
    if problem := partition_class_problem("data.partition", class_path):
        return problem
    module, _, name = class_path.rpartition(".")
    if module not in ("", "lightning_fed.datamodules", PARTITIONS) or name not in subclasses(PARTITIONS, "Partitioner"):
        return None
    found = dataclass_fields(PARTITIONS, name)
    init_args = partition.get("init_args") or {}
    if found is None or not isinstance(init_args, Mapping):
        return None
    for key, value in init_args.items():
        if str(key) not in found:
            return unknown_key("data.partition", name, str(key), list(found))
        if problem := _plain_problem(f"data.partition.{key}", _kind(found[str(key)][0]), value):
            return problem
    rules = PARTITION_RULES.get(name, ())
    parsed = {k: rule.parsed(init_args[k]) for rule in rules if (k := rule.name) in init_args}
    found_problems = problems(rules, parsed)
    missing = [key for key, (_, has_default) in found.items() if not has_default and key not in init_args]
    found_problems += [f"data.partition.{key} is required by {name} but missing" for key in missing]
    return "; ".join(found_problems) or None


def partition_class_problem(option: str, class_path: str) -> str | None:
    """The line refusing ``class_path`` of ``option`` (``data.partition``, or the ``--data.partition.help``
    asking about it) that certainly names no partitioner, with the closest, or ``None``."""
    module, _, name = class_path.rpartition(".")
    if module:  # `lightning_fed.datamodules.partition.Dirichlett`: the closest class of the module
        return dotted_path_problem(option, class_path)
    # `{class_path: Dirichlett}`, as `partition: Dirichlett` is refused (class_options)
    return short_name_problem(option, name, subclasses(PARTITIONS, "Partitioner"))


def generator_columns(dataset: str) -> list[str] | None:
    """The columns of the planted set ``dataset`` (``synthetic:<name>``): the keys of the ``rows``
    mapping its generator fills (a literal, or a comprehension over a tuple of names), read from its
    source; ``None`` if not found there."""
    generator = (table_names(SYNTHETIC_MODULE, "SYNTHETIC") or {}).get(dataset[len(SYNTHETIC_PREFIX) :])
    function = function_definition(SYNTHETIC_MODULE, generator) if generator else None
    for node in ast.walk(function) if function is not None else []:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(target, ast.Name) or target.id != "rows":
            continue
        keys: list[ast.expr] = []
        if isinstance(node.value, ast.Dict):
            keys = [k for k in node.value.keys if k is not None]
        elif isinstance(node.value, ast.DictComp) and isinstance(node.value.generators[0].iter, ast.Tuple):
            keys = node.value.generators[0].iter.elts
        if keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys):
            return [k.value for k in keys]
    return None


def partition_columns_problem(class_path: str, init_args: Mapping[str, Any]) -> str | None:
    """``data.partition``'s column (``key``, ``score``, ``column``) that ``data.dataset`` lacks, for a
    data module that partitions the source as read (:data:`~lightning_fed.data_cross_rules.READS_ITS_SOURCE`)
    and a set whose columns are known here: a planted set's (:func:`generator_columns`), a local
    file's (:func:`~lightning_fed.data_cross_rules.local_columns`), renamed by ``data.field_map``."""
    partition, dataset = init_args.get("partition"), init_args.get("dataset")
    if isinstance(partition, str):
        partition = {"class_path": partition}
    if (
        class_path.rpartition(".")[2] not in READS_ITS_SOURCE
        or not isinstance(dataset, str)
        or not isinstance(partition, Mapping)
        or not isinstance(partition.get("class_path"), str)
    ):
        return None
    module, _, name = partition["class_path"].rpartition(".")
    given = partition.get("init_args") or {}
    if module not in ("", "lightning_fed.datamodules", PARTITIONS) or not isinstance(given, Mapping):
        return None
    source = generator_columns(dataset) if dataset.startswith(SYNTHETIC_PREFIX) else local_columns(dataset)
    field_map = init_args.get("field_map")
    columns = field_mapped(source, field_map) if source is not None else None
    if columns is not None and (problem := partition_column_problem(name, given, dataset, columns, source, field_map)):
        return problem
    return _planted_groups_problem(name, given, init_args) if columns is not None else None


def _planted_groups_problem(partition: str, given: Mapping[str, Any], init_args: Mapping[str, Any]) -> str | None:
    """``ByKey(key: group)`` over a planted set with fewer distinct groups than ``data.num_clients``:
    client ``k`` is of ``groups[k % len(groups)]`` (:func:`~lightning_fed.datamodules.synthetic.planted_preferences`),
    so its ``group`` column holds those values only (``ByKey``'s ``cannot fill`` after the imports)."""
    dataset, args, clients = (
        init_args.get("dataset"),
        init_args.get("synthetic_args") or {},
        init_args.get("num_clients"),
    )
    if partition != "ByKey" or given.get("key") != "group" or type(clients) is not int or not isinstance(args, Mapping):
        return None
    generator = (table_names(SYNTHETIC_MODULE, "SYNTHETIC") or {}).get(str(dataset)[len(SYNTHETIC_PREFIX) :])
    function = function_definition(SYNTHETIC_MODULE, generator) if generator else None
    if function is None or "groups" not in (names := [a.arg for a in function.args.args]):
        return None
    groups = args.get("groups")
    if "groups" not in args:  # the generator's default
        default = function.args.defaults[names.index("groups") - len(names)]
        groups = ast.literal_eval(default) if isinstance(default, (ast.Tuple, ast.List, ast.Constant)) else None
    groups = [groups] if isinstance(groups, str) else groups
    if not isinstance(groups, (list, tuple)) or not groups:
        return None
    synthetic_clients = args.get("num_clients", clients)  # == clients (data_cross_rules.synthetic_clients_problem)
    if type(synthetic_clients) is not int:
        return None
    distinct = len({str(g) for g in groups[: min(synthetic_clients, len(groups))]})  # client k: groups[k % len]
    if distinct >= clients:
        return None
    return (
        f"data.partition.key 'group': data.dataset {dataset!r} has {distinct} distinct 'group' value(s)"
        f" (data.synthetic_args.groups: {list(groups)}), which cannot fill data.num_clients={clients} clients;"
        f" use num_clients <= {distinct}"
    )


def nested_option_problem(section: str, value: Any) -> str | None:
    """The line refusing a value nested in the package's ``model:`` / ``data:`` class
    (``{"class_path", "init_args"}``), or ``None``."""
    if not isinstance(value, dict) or not isinstance(init_args := value.get("init_args"), dict):
        return None
    if class_rules(section, value.get("class_path", "")) is None:
        return None  # not one of the package's classes
    if section == "data":
        return (
            synthetic_args_problem(init_args)
            or partition_problem(init_args.get("partition"))
            or partition_columns_problem(value["class_path"], init_args)
        )
    backbone = init_args.get("backbone")
    if section == "model" and isinstance(backbone, Mapping):
        return backbone_config_problem(backbone.get("config"))
    return None


CLASS_KEYS = ("class_path", "init_args", "dict_kwargs")
"""The keys of a class-valued option itself (jsonargparse's), not of its class."""
CLASS_VALUED = ("partition",)
"""Options of a class's ``init_args`` that take a class themselves (``data.partition``): an option
below one (``partition.alpha``) is one of that class's ``init_args``, as jsonargparse reads it."""


def class_option_target(init_args: dict[str, Any], parts: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Where ``--<section>.init_args.<parts>`` goes when ``parts[0]`` takes a class (:data:`CLASS_VALUED`):
    its ``init_args`` (a class name given alone becomes ``{class_path: name}``), ``parts`` below it."""
    option, rest = parts[0], parts[1:]
    given = init_args.get(option)
    if isinstance(given, str):
        given = {"class_path": given}
    if not isinstance(given, dict):
        given = {}
    given = init_args[option] = dict(given)
    if rest[0] in CLASS_KEYS:
        return given, rest
    inner = given.get("init_args")
    given["init_args"] = inner = dict(inner) if isinstance(inner, dict) else {}
    return inner, rest
