"""A resume (``fit --ckpt_path <run>/checkpoints/<file>``) with a changed config, refused before torch
(issue 41, item 2).

The live CLI compares the config stored in the checkpoint with the new one
(:func:`lightning_fed.federation.resume_check.check_resume`) once the model and the run are built:
10-15 s of CPU before a changed ``federation.strategy`` or ``model.lora.r`` is named. The run folder
holds the same config as text beside ``checkpoints/``: ``config.yaml`` (and ``summary.json``'s
``config``; docs/get-started/outputs.md). :func:`resume_problem` compares it with the merged new
config (:func:`lightning_fed.config_values.merged_config`) by the same rules
(:mod:`lightning_fed.config_changes`) and refuses a change to a key that decides the result with
the live CLI's line, naming the key, both values and the checkpoint.

Only what is certain is refused: a checkpoint not in a ``checkpoints/`` folder, a run folder
without a readable ``config.yaml``, or a ``summary.json`` whose config says otherwise for a key is
left to the live check (the checkpoint's own config decides); so is a value the parser would
still convert (a word for a number, a list, a mapping given as a whole). Class paths are compared
by their class name (``FedAvg`` and ``lightning_fed.strategies.FedAvg`` are one class). Nothing is
written: the files are only read.

Imports nothing heavy: :mod:`lightning_fed.config_changes`, :mod:`lightning_fed.config_values`, PyYAML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_fed.config_changes import (
    DERIVED_SEEDS,
    LISTS_OF_CLASSES,
    NOT_COMPARED,
    class_keys,
    class_list_changes,
    decides_result,
    evaluation_refusal,
    flatten_config,
    resume_refusal,
    unset_to_mapping,
    weight_changes,
)

_SKIP = object()
"""A pair of values this module cannot compare (left to the live check)."""


def run_config(ckpt_path: str) -> dict[str, Any] | None:
    """``config.yaml`` of the run folder holding ``ckpt_path`` (``<run>/checkpoints/<file>``), or ``None``."""
    path = Path(ckpt_path)
    if path.parent.name != "checkpoints":
        return None
    import yaml

    try:
        loaded = yaml.safe_load((path.parent.parent / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _summary_config(ckpt_path: str) -> dict[str, Any] | None:
    try:
        summary = json.loads((Path(ckpt_path).parent.parent / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    config = summary.get("config") if isinstance(summary, dict) else None
    return config if isinstance(config, dict) else None


def new_config(sections: dict[str, Any]) -> dict[str, Any]:
    """The merged sections (:attr:`lightning_fed.config_values.Merged.sections`) as the parser's dump
    nests them (``federation.strategy`` inside ``federation``); sections not followed are left out."""
    out: dict[str, Any] = {}
    for key, value in sections.items():
        if "." in key or not isinstance(value, (dict, str, int, float, bool, type(None))):
            continue
        out[key] = value
    federation = sections.get("federation")
    federation = dict(federation) if isinstance(federation, dict) else {}
    strategy = sections.get("federation.strategy")
    if isinstance(strategy, dict):
        federation["strategy"] = strategy
    hooks = sections.get("federation.hooks")
    if isinstance(hooks, list) and all(isinstance(h, dict) for h in hooks):  # a list of class sections
        federation["hooks"] = hooks
    elif "federation.hooks" not in sections and isinstance(sections.get("federation", {}), dict):
        # Given nowhere: the parser's default, no hook (issue 41 row 1: a resume dropping the run's hooks
        # went on to torch). A `federation:` given as something else than a mapping may hold them: unknown.
        federation["hooks"] = None
    if federation:
        out["federation"] = federation
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _words(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(_number(v) for v in value)


def _classes_changes(key: str, old: Any, new: Any) -> list[str] | object:
    """The changes of the list of class sections ``key`` (``federation.hooks``) from ``old`` (as dumped,
    every argument resolved) to ``new`` (as given, :class:`~lightning_fed.config_values.Merged`) this module
    is certain of, by the live check's rule (:func:`~lightning_fed.config_changes.class_list_changes`), or
    :data:`_SKIP` if none. Certain: another count of classes, another class at a place, another value of an
    argument both give, or of one ``new`` leaves out whose class's ``__init__`` gives a literal default
    (:func:`_with_defaults`); another default is not known here: left to the live check."""
    changes = class_list_changes(
        key, old, new, lambda a, b, is_class: _same(a, b, is_class) is False, _with_defaults, _as_number
    )
    return changes or _SKIP


def _with_defaults(hook: dict[str, Any]) -> dict[str, Any]:
    """The class section ``hook`` (as given) with the literal defaults of its class's ``__init__`` for the
    arguments it leaves out, read from the source (:func:`~lightning_fed.class_parameters.init_defaults`):
    ``[RoundLRSchedule]`` is ``schedule: cosine`` (issue 41 row 1: a resume changing a hook by leaving
    its argument out went on to torch)."""
    from lightning_fed.class_parameters import init_defaults
    from lightning_fed.option_rules import PACKAGES

    given = hook.get("init_args", {})
    if not isinstance(given, dict):
        return hook
    return {**hook, "init_args": {**init_defaults(PACKAGES["federation.hooks"], hook["class_path"]), **given}}


def _same(old: Any, new: Any, is_class: bool) -> bool | object:
    """Whether ``new`` (as given) is the parser's ``old`` (as dumped), or :data:`_SKIP`."""
    if isinstance(old, str) and isinstance(new, str) and is_class:
        return old.rpartition(".")[2] == new.rpartition(".")[2]
    if old is None and new is None:
        return True
    if isinstance(old, bool) or isinstance(new, bool):
        if old is None or new is None:  # `trainer.deterministic: null -> true`
            return False
        return old == new if isinstance(old, bool) and isinstance(new, bool) else _SKIP
    if _number(old) and _number(new):
        return float(old) == float(new)
    if _number(old) and isinstance(new, str):
        try:
            return float(old) == float(new.replace("_", ""))
        except ValueError:
            return _SKIP  # the parser refuses it
    if isinstance(old, str) and isinstance(new, str):
        return old == new
    if _words(old) and _words(new) and not is_class:  # a list of words (`groups: [negative]`) is kept as it is
        return old == new
    if _numbers(old) and _numbers(new):  # `per_client: [2, 2, 4]`
        return len(old) == len(new) and all(float(o) == float(n) for o, n in zip(old, new, strict=False))
    if (old is None) != (new is None) and all(v is None or _number(v) or isinstance(v, str) for v in (old, new)):
        return False
    if (old is None) != (new is None) and any(
        (_words(v) or _numbers(v) or isinstance(v, dict)) and v for v in (old, new)
    ):
        return False  # `lora.target_modules: null -> [c_attn]`, `federation.privacy: null -> {...}`
    return _SKIP


def _as_number(old: Any, new: Any) -> Any:
    """``new`` as the line shows it against the run's number ``old``: a number given quoted (``lr: "0.006"``,
    compared by :func:`_same` as the number) as the number the parser reads (``0.006``, of ``old``'s type
    where it is one), as the live check and an unquoted value show it (red team 15 L3: ``'0.006'``);
    anything else as given."""
    if not (_number(old) and isinstance(new, str)):
        return new
    text = new.replace("_", "")
    for kind in (type(old), float):
        try:
            return kind(text)
        except ValueError:
            continue
    return new


def _shown(key: str, value: Any, is_class: bool) -> Any:
    """``value`` as the parser's dump writes it: a short name of the package's class in full."""
    from lightning_fed.option_rules import PACKAGES, class_rules

    if is_class and isinstance(value, str) and "." not in value and key in ("model", "data", "federation.strategy"):
        return f"{PACKAGES[key]}.{value}" if class_rules(key, value) is not None else value
    return value


def _changes(old: dict[str, Any], new: dict[str, Any], summary: dict[str, Any] | None) -> list[str]:
    """The result-deciding changes (``"key: old -> new"``, sorted) this module is certain of."""
    before, after = flatten_config(old), flatten_config(new)
    unset_to_mapping(before, after)  # `federation.privacy: null` -> a mapping
    checked = flatten_config(summary) if summary is not None else None
    classes = class_keys(old) | class_keys(new)
    for flat in (before, after, checked if checked is not None else {}):
        for key in DERIVED_SEEDS:
            if key in flat and flat[key] is None and "seed_everything" in flat:
                flat[key] = flat["seed_everything"]
    out = []
    for key in sorted(before.keys() & after.keys()):
        if key in NOT_COMPARED or not decides_result(key):
            continue
        if key in DERIVED_SEEDS and (after[key] is None or before[key] is None):
            continue  # the value seed_everything gives it, not known here (seed_everything: true, PL_GLOBAL_SEED)
        if checked is not None and checked.get(key, before[key]) != before[key]:
            continue  # the run folder's two records disagree: the checkpoint decides
        if key in LISTS_OF_CLASSES:
            if (changes := _classes_changes(key, before[key], after[key])) is not _SKIP:
                out.extend(changes)
        elif _same(before[key], after[key], key in classes) is False:
            out.append(
                f"{key}: {before[key]!r} -> {_shown(key, _as_number(before[key], after[key]), key in classes)!r}"
            )
    return out


def resume_problem(path: str, args: list[str], ckpt: Any = None) -> str | None:
    """The live CLI's line refusing a ``fit`` resumed from the checkpoint file ``path`` with ``args``
    (shipped configs resolved) where the run's ``config.yaml`` differs in a key that decides the
    result, or ``None``. With ``ckpt`` (the file, read) and no ``config.yaml`` beside it (an
    ``hpc_ckpt_<n>.ckpt`` in ``trainer.default_root_dir``, a copied file), the config the checkpoint
    holds (``federation.report.config``, the same dump) is compared instead.

    A new value a ``--config`` file set names that file, as the precheck's lines do
    (``config 'lr.yaml': ckpt_path ...``; :func:`lightning_fed.config_precheck._in_file`)."""
    if not (changes := _resume_changes(path, args, ckpt)):
        return None
    from lightning_fed.config_precheck import _in_file
    from lightning_fed.config_values import merged_config

    first = changes[0]  # the change the line reports: the file (or option) that set its new value
    key = first.split(":", 1)[0]
    if key == "federation.hooks" and key not in getattr(merged_config(args), "sections", {key: None}):
        return resume_refusal(path, changes)  # no hook given anywhere: the parser's default, set by no file

    def change_of_key(given: list[str]) -> str | None:
        return next((c for c in _resume_changes(path, given, ckpt) or [] if c.split(":", 1)[0] == key), None)

    named = _in_file(args, first, change_of_key)
    return named[: len(named) - len(first)] + resume_refusal(path, changes)


def evaluation_problem(path: str, args: list[str], ckpt: Any = None) -> str | None:
    """The live ``validate``/``test`` line refusing the checkpoint file ``path`` when ``args`` build
    another model than the run's config (the module class, backbone, LoRA layout and the class's
    layout options: :func:`~lightning_fed.config_changes.weight_changes`), or ``None``; compared as
    :func:`resume_problem` compares (the run folder's ``config.yaml``, else with ``ckpt`` the
    checkpoint's own config)."""
    old = _old_config(path, ckpt)
    changes = weight_changes(_resume_changes(path, args, ckpt) or [], old)
    return evaluation_refusal(path, changes) if changes else None


def _old_config(path: str, ckpt: Any) -> dict[str, Any] | None:
    """The run's config compared: its folder's ``config.yaml``, or with ``ckpt`` and no ``config.yaml``
    (compared before the file was read) the config the checkpoint holds; else ``None``."""
    old = run_config(path)
    if ckpt is None:
        return old
    fed = ckpt.get("federation") if isinstance(ckpt, dict) else None
    report = fed.get("report") if isinstance(fed, dict) else None
    saved = report.get("config") if isinstance(report, dict) else None
    return saved if old is None and isinstance(saved, dict) else None


def _resume_changes(path: str, args: list[str], ckpt: Any) -> list[str] | None:
    """:func:`resume_problem`'s changes (``"key: old -> new"``), or ``None`` where nothing is compared."""
    from lightning_fed.config_values import merged_config

    old = _old_config(path, ckpt)
    summary = _summary_config(path) if ckpt is None and old is not None else None
    merged = merged_config(args) if old is not None else None
    if old is None or merged is None:
        return None
    return _changes(old, new_config(merged.sections), summary)
