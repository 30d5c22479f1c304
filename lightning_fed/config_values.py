"""The values of ``fit``/``validate``/``test``'s options, merged and checked before torch is imported.

Building the LightningCLI's parser imports torch, Lightning, transformers and PEFT (10-20 s of
CPU), so a value a config class refuses (``--model.init_args.lr=-1``) used to be reported only
after all of that. :func:`value_problem` merges what the command line gives the way jsonargparse
does (each ``--config`` file and each ``--section.option`` override in the order given, later
ones winning; a class's options, a dataclass's fields and a list of classes merged, another value
replaced: :mod:`lightning_fed.config_merging`) and applies the rules of
:mod:`lightning_fed.option_rules`, the ones the classes themselves raise with, and Lightning's ``trainer.*`` bounds
(:func:`lightning_fed.trainer_options.trainer_option_problem`).

What a class's source says (its keys, annotated types and name tables) is checked by
:meth:`Merged.option_problem` (:mod:`lightning_fed.class_options`); the class-valued sections'
rules are applied by :mod:`lightning_fed.class_sections`.

It stays silent where it cannot know: a class that is not the package's (its own rules), a
section given as a file or in a form not read here, a string where a number is expected (the
parser's type check says it), a value another option decides. The live parser checks those
after the imports, as before.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightning_fed.accelerator_builds import accelerator_build_problem
from lightning_fed.class_kinds import package_class
from lightning_fed.class_options import class_option_problem, class_path_problem, lora_targets_problem, size_problem
from lightning_fed.class_path_shapes import classes_shape_problem, section_shape_problem
from lightning_fed.class_sections import (
    class_problem,
    clients_per_round_of,
    hub_model_problem,
    parsed,
    string_problem,
    unknown_option_in,
    unknown_option_of,
)
from lightning_fed.config_merging import merge_class, merge_value
from lightning_fed.data_columns import data_columns_problem
from lightning_fed.dp_sgd_rules import dp_sgd_problem
from lightning_fed.errors import unwritable
from lightning_fed.federation_rules import (
    FEDERATION_MORE,
    PRIVACY,
    federation_problems,
    privacy_problems,
    privacy_shape_problem,
    privacy_values,
)
from lightning_fed.hook_cross_rules import hook_cross_problem
from lightning_fed.loop_conflicts import loop_conflict_problem, run_length_problem
from lightning_fed.loss_options import loss_options_problem
from lightning_fed.nested_options import CLASS_VALUED, class_option_target, nested_option_problem
from lightning_fed.noise_calibration import count_split_problem
from lightning_fed.option_rules import (
    FEDERATION_ALL,
    PACKAGES,
    SECTIONS,
    WORD_OPTIONS,
    seed_problem,
    seed_type_problem,
)
from lightning_fed.option_types import sections_type_problem, takes_text
from lightning_fed.partition_values import partition_values_problem
from lightning_fed.private_run_rules import privacy_strategy_problem, private_cache_problem
from lightning_fed.strategy_modules import config_module_problem
from lightning_fed.trainer_classes import (
    APPENDED,
    CLASS_OPTIONS,
    append_class,
    set_class_option,
    trainer_classes_problem,
)
from lightning_fed.trainer_options import trainer_option_problem, trainer_type_problem
from lightning_fed.wrapper_rules import adaptive_key_problem, compression_problem, wrapped_sections, wrapper_problem
from lightning_fed.yaml_reading import load, load_errors, value_of

_UNKNOWN = object()
"""A section whose value this module cannot follow (nothing is checked in it)."""
UNSET = object()
"""What :meth:`Merged.value_at` answers for an option nothing sets."""
_CLASS_KEYS = ("class_path", "init_args", "dict_kwargs")
NESTED_CLASSES = ("strategy", "hooks")
"""``federation:``'s class-valued options: ``strategy`` a class, ``hooks`` a list of them."""


MAPPINGS = {"trainer": "max_epochs: 3", "federation": "rounds: 3"}
"""The sections the code reads as mappings of options, with an example option."""


def mapping_problem(name: str, value: Any) -> str:
    """The line refusing ``value`` for the section ``name`` (:data:`MAPPINGS`), which is no mapping."""
    return f"{name} must be a mapping of its options ({name}: {{{MAPPINGS[name]}, ...}}), got {value!r}"


def _class_section(value: Any) -> Any:
    """A class-valued section (``model``, ``data``) as ``{"class_path", "init_args"}``, or unknown."""
    if isinstance(value, str) and not value.endswith((".yaml", ".yml", ".json")):
        return {"class_path": value, "init_args": {}}
    if isinstance(value, dict) and isinstance(value.get("class_path"), str):
        init = value.get("init_args", {})
        out = {"class_path": value["class_path"], "init_args": dict(init) if isinstance(init, dict) else {}}
        if isinstance(value.get("dict_kwargs"), dict):
            out["dict_kwargs"] = dict(value["dict_kwargs"])  # keywords handed to __init__ (class_sections.py)
        return out
    return _UNKNOWN


def non_finite(value: Any, key: str = "") -> list[tuple[str, float]]:
    """(key, value) of every NaN or infinite float in a config, keys as on the command line."""
    if type(value).__name__ == "Namespace":  # jsonargparse's, parsed (the live CLI's check)
        value = vars(value)
    if isinstance(value, dict):
        found = []
        for k, v in value.items():
            name = key if k == "init_args" else (f"{key}.{k}" if key else str(k))
            found += non_finite(v, name)
        return found
    if isinstance(value, (list, tuple)):
        return [hit for i, v in enumerate(value) for hit in non_finite(v, f"{key}[{i}]")]
    if isinstance(value, float) and not math.isfinite(value):
        return [(key, value)]
    return []


def non_finite_problem(config: Any) -> str | None:
    """One check for every float option (lr, beta, mu, alpha, max_update_norm...), before any
    class's own: NaN passes ``lr <= 0`` and inf passes most bounds. The live CLI applies it to the
    parsed config (:meth:`~lightning_fed.federated_cli.FederatedCLI.before_instantiate_classes`),
    the precheck to the merged one."""
    if bad := non_finite(config):
        key, value = bad[0]
        return f"{key} must be a finite number, got {value}"
    return None


def _init_args_only(value: Any) -> bool:
    """A class-valued section given as ``{init_args: {...}}`` alone (a file layered over another)."""
    return isinstance(value, dict) and set(value) == {"init_args"} and isinstance(value["init_args"], dict)


def _merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in new.items():
        old = out.get(key)
        out[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


class Merged:
    """The config as jsonargparse would hold it after each ``--config`` and override, as far as followed."""

    def __init__(self) -> None:
        self.sections: dict[str, Any] = {}
        self.shape: str | None = None
        """The first class-valued section of a wrong shape (:func:`section_shape_problem`,
        :func:`classes_shape_problem`)."""
        self.from_command_line: set[str] = set()
        """The options given as ``--key value`` (``model.lr``: without ``init_args``): the parser
        keeps such a value as its text where a string is expected."""

    def apply_file(self, loaded: Any) -> None:
        if not isinstance(loaded, dict):
            return
        for section, value in loaded.items():
            self.set_section(str(section), value)

    def set_section(self, section: str, value: Any) -> None:
        if section == "federation" and isinstance(value, dict):
            # its class-valued options (strategy, hooks) are followed as model: and data: are
            value = dict(value)
            for option in NESTED_CLASSES:
                if option in value:
                    self.set_section(f"federation.{option}", value.pop(option))
        if section == "federation.hooks":
            if self.shape is None:
                self.shape = classes_shape_problem(section, value)
            items = [] if value is None else value
            hooks = [_class_section(item) for item in items] if isinstance(items, list) else _UNKNOWN
            old = self.sections.get(section)
            if isinstance(old, list) and isinstance(hooks, list) and len(old) == len(hooks):
                # as long as the earlier list: item by item, each class merged (lightning_fed/config_merging.py)
                hooks = [merge_value(None, "", PACKAGES[section], o, n) for o, n in zip(old, hooks, strict=True)]
            self.sections[section] = hooks  # a list of another length replaces the earlier one
        elif section in SECTIONS:
            new = _class_section(value)
            old = self.sections.get(section)
            if self.shape is None:
                self.shape = section_shape_problem(section, value, isinstance(old, dict))
            if _init_args_only(value) and isinstance(old, dict):
                # `model: {init_args: {...}}` over an earlier class: the same class, its values merged
                self.sections[section] = merge_class(PACKAGES[section], old, value)
            elif new is _UNKNOWN or old is _UNKNOWN or old is None:
                self.sections[section] = new
            elif isinstance(value, dict) and "class_path" not in value:
                self.sections[section] = _UNKNOWN  # init_args alone: only with a class_path before
            else:  # the same class's options merged, or another class's (lightning_fed/config_merging.py)
                self.sections[section] = merge_class(PACKAGES[section], old, new)
        elif isinstance(value, dict):
            old = self.sections.get(section)
            self.sections[section] = _merge(old if isinstance(old, dict) else {}, value)
        else:
            if self.shape is None and section in MAPPINGS and not isinstance(value, (str, type(None))):
                self.shape = mapping_problem(section, value)  # `--federation=5 --config tiny.yaml`: refused
            self.sections[section] = value

    def apply_option(self, key: str, value: Any) -> None:
        """``--key value`` (``key`` dotted, without the dashes)."""
        section, _, rest = key.partition(".")
        if section == "federation" and (option := rest.partition(".")[0]) in NESTED_CLASSES:
            section, rest = f"federation.{option}", rest.partition(".")[2]
            if rest and section == "federation.hooks":
                self._set_last_hook(rest.split("."), value)
                return
        if not rest:
            self.set_section(section, value)
            return
        parts = rest.split(".")
        if section in SECTIONS:
            current = self.sections.get(section)
            if parts == ["class_path"]:
                self.set_section(section, {"class_path": value})  # not a string: refused by its shape
                return
            if parts == ["init_args"] and not isinstance(value, dict):
                # `--model.init_args=[1]`: a class's options are a mapping (a mapping is merged below)
                self.shape = self.shape or section_shape_problem(section, {"init_args": value}, True)
                return
            if not isinstance(current, dict):
                return  # no class yet (or not followed): the live parser decides
            if parts[0] == "init_args":
                parts = parts[1:]
            elif parts[0] in _CLASS_KEYS:
                return
            if not parts:  # `--data.init_args={"num_clients": -1}`: merged over the class's options
                self.sections[section] = merge_class(PACKAGES[section], current, {"init_args": value})
                return
            target = current["init_args"]
            if parts[0] in CLASS_VALUED and len(parts) > 1:  # `--data.init_args.partition.alpha=-1`
                target, parts = class_option_target(target, parts)
        else:
            current = self.sections.get(section)
            if not isinstance(current, dict):
                current = self.sections[section] = {}
            if section == "trainer" and len(parts) > 1 and parts[0] in CLASS_OPTIONS:
                set_class_option(current, parts[0], parts[1:], value)  # `--trainer.callbacks.patience=5`
                return
            target = current
        for part in parts[:-1]:
            nxt = target.get(part)
            if not isinstance(nxt, dict):
                nxt = target[part] = {}
            target = nxt
        if parts:
            target[parts[-1]] = value

    def apply_arguments(self, args: list[str]) -> bool:
        """Merge ``args`` (``--config`` files and ``--key value`` overrides, in order) into this config;
        ``False`` if a file cannot be read (what was merged before it stays). Called again with the
        arguments that follow, it goes on merging them (:func:`lightning_fed.config_precheck._in_file`)."""
        for key, raw in _arguments(args):
            if key == "config":
                path = Path(raw)
                if path.is_file():
                    try:
                        self.apply_file(load(path.read_text(encoding="utf-8")))
                    except (OSError, *load_errors()):  # refused (or not) by the file checks before
                        return False
            elif key.endswith("+"):  # `--trainer.callbacks+=EarlyStopping`
                self.append_option(key[:-1], value_of(raw))
            elif key != "print_config":
                value = raw if not raw.strip() and self._takes_text(key) else value_of(raw)
                self.from_command_line.add(key.replace(".init_args.", "."))
                self.apply_option(key, raw if key in WORD_OPTIONS and isinstance(value, bool) else value)
        return True

    def _takes_text(self, key: str) -> bool:
        """Whether ``--key`` (dotted) is an option of the package's class in its section (the last hook
        of ``federation.hooks``) annotated ``str``: an empty value stays ``''`` there, as the parser keeps it."""
        section, _, rest = key.partition(".")
        if section == "federation" and (option := rest.partition(".")[0]) in NESTED_CLASSES:
            section, rest = f"federation.{option}", rest.partition(".")[2]
        parts = [part for part in rest.split(".") if part != "init_args"]
        current = self.sections.get(section)
        if section == "federation.hooks":
            current = current[-1] if isinstance(current, list) and current else None
        if len(parts) != 1 or section not in PACKAGES or not isinstance(current, dict):
            return False
        class_path = current.get("class_path")
        if not isinstance(class_path, str) or not package_class(section, class_path):
            return False
        return takes_text(PACKAGES[section], class_path, parts[0])

    def value_at(self, option: str) -> Any:
        """The merged value of ``option`` (``federation.hooks[0].concurrency``, named as the precheck's
        lines name options: without ``init_args``), or :data:`UNSET` where nothing sets it."""
        tokens: list[Any] = [int(t[1:-1]) if t.startswith("[") else t for t in re.findall(r"\[\d+\]|[^.\[]+", option)]
        for n in range(len(tokens), 0, -1):  # the longest dotted key the sections hold (`federation.hooks`)
            if all(isinstance(t, str) for t in tokens[:n]) and ".".join(tokens[:n]) in self.sections:
                value: Any = self.sections[".".join(tokens[:n])]
                break
        else:
            return UNSET
        for token in tokens[n:]:
            if isinstance(value, dict) and token not in value and isinstance(value.get("init_args"), dict):
                value = value["init_args"]
            if isinstance(token, int) and isinstance(value, list) and token < len(value):
                value = value[token]
            elif isinstance(token, str) and isinstance(value, dict) and token in value:
                value = value[token]
            else:
                return UNSET
        return value

    def _set_last_hook(self, keys: list[str], value: Any) -> None:
        """``--federation.hooks.noise_multiplier=-1``: an option of the last hook of the list (as
        jsonargparse applies it after ``--federation.hooks+=ClientGrouping``); another form is not followed."""
        keys = keys[1:] if keys[:1] == ["init_args"] else keys
        hooks = self.sections.get("federation.hooks")
        if len(keys) != 1 or not isinstance(hooks, list) or not hooks or not isinstance(hooks[-1], dict):
            self.sections["federation.hooks"] = _UNKNOWN
            return
        hooks[-1] = {**hooks[-1], "init_args": {**hooks[-1]["init_args"], keys[0]: value}}

    def append_option(self, key: str, value: Any) -> None:
        """``--key+=value`` (``key`` dotted, without the dashes and the ``+``): one more class in a list
        option (``trainer.callbacks``, ``federation.hooks``); another ``+=`` is not followed."""
        section, _, option = key.partition(".")
        if key == "federation.hooks":
            hooks = self.sections.get(key, [])
            followed = isinstance(hooks, list) and all(isinstance(h, dict) for h in hooks)
            if followed:
                self.set_section(key, [*hooks, value])
            else:
                self.sections[key] = _UNKNOWN
        elif section == "trainer" and option in APPENDED:
            trainer = self.sections.get("trainer")
            if not isinstance(trainer, dict):
                trainer = self.sections["trainer"] = {}
            append_class(trainer, option, value)

    def _followed(self) -> dict[str, Any]:
        """The merged config as the parser holds it, ``init_args`` left out (the keys as messages name them)."""
        out = {
            k: (v["init_args"] if k in SECTIONS else v)
            for k, v in self.sections.items()
            if isinstance(v, dict) and "." not in k
        }
        federation = out["federation"] = dict(out.get("federation", {}))
        strategy = self.sections.get("federation.strategy")
        if isinstance(strategy, dict):
            federation["strategy"] = strategy["init_args"]
        hooks = self.sections.get("federation.hooks")
        if isinstance(hooks, list):
            federation["hooks"] = [h["init_args"] if isinstance(h, dict) else None for h in hooks]
        return out

    def unknown_option(self) -> str | None:
        """An ``init_args`` key the package's class does not take (:func:`unknown_option_of`), also in a
        strategy a wrapper wraps (``federation.strategy.strategy.beta1``) and ClientLevelDP's ``adaptive``."""
        strategy = self.sections.get("federation.strategy")
        if problem := unknown_option_of(self.sections):
            return problem
        for key, inner in wrapped_sections(strategy):  # lightning_fed/wrapper_rules.py
            if problem := unknown_option_in("federation.strategy", inner, key):
                return problem
        return adaptive_key_problem(strategy)

    def option_problem(self) -> str | None:
        """A key or value of the package's ``model:`` / ``data:`` class its source says is wrong
        (:mod:`lightning_fed.class_options`), as the live parser refuses it while parsing."""
        seed_given = "seed_everything" in self.from_command_line
        if problem := seed_type_problem(self.sections.get("seed_everything"), seed_given):
            return problem
        for name in MAPPINGS:
            value = self.sections.get(name)  # the code reads them as mappings (trainer: 5 was an AttributeError)
            if value is not None and not isinstance(value, dict):
                return mapping_problem(name, value)
        federation = self.sections.get("federation")
        if isinstance(federation, dict) and (problem := privacy_shape_problem(federation.get("privacy"))):
            return problem
        trainer = self.sections.get("trainer")
        if isinstance(trainer, dict) and (
            problem := classes_shape_problem("trainer.callbacks", trainer.get("callbacks"))
        ):
            return problem
        if isinstance(trainer, dict) and (problem := trainer_classes_problem(trainer)):
            return problem
        if isinstance(trainer, dict) and (problem := trainer_type_problem(trainer) or self._root_type_problem(trainer)):
            return problem
        if self.shape is not None:
            return self.shape
        if problem := sections_type_problem(self.sections, self.from_command_line):  # lightning_fed/option_types.py
            return problem
        for section in ("model", "data", "federation.strategy"):
            if problem := class_path_problem(section, self.sections.get(section)):
                return problem
        for key, inner in wrapped_sections(self.sections.get("federation.strategy")):  # ClientLevelDP(FedAdm)
            if problem := class_path_problem("federation.strategy", inner, key):
                return problem
        hooks = self.sections.get("federation.hooks")
        for index, hook in enumerate(hooks if isinstance(hooks, list) else []):
            if problem := class_path_problem("federation.hooks", hook, f"federation.hooks[{index}]"):
                return problem
        for section in ("model", "data"):
            if problem := class_option_problem(section, self.sections.get(section), self.from_command_line):
                return problem
            if problem := nested_option_problem(section, self.sections.get(section)):
                return problem
        if problem := data_columns_problem(self.sections.get("data")):  # lightning_fed/data_columns.py
            return problem
        if problem := partition_values_problem(self.sections.get("data")):  # lightning_fed/partition_values.py
            return problem
        if problem := lora_targets_problem(self.sections.get("model")):  # before the rank, as lora_config
            return problem
        return size_problem(self.sections.get("model"), self.sections.get("data"))

    def _root_type_problem(self, trainer: dict[str, Any]) -> str | None:
        """``trainer.default_root_dir`` given a value in a config file that is no path (``5``, ``[]``),
        or ``None``: not in :data:`~lightning_fed.trainer_options.TRAINER_TYPES`, where a ``str``
        option takes anything, as the parser keeps a command-line value as its text (``--trainer.
        default_root_dir=5`` is the folder ``5``)."""
        root = trainer.get("default_root_dir")
        if isinstance(root, str) and "\0" in root:  # `"runs/ti\0ny"`: os calls raise `embedded null byte`
            return f"trainer.default_root_dir must be a folder's path, got {root!r} (a path holds no NUL character)"
        if root is None or isinstance(root, str) or "trainer.default_root_dir" in self.from_command_line:
            return None
        return f"trainer.default_root_dir must be a folder's path (a string) or null, got {root!r}"

    def problem(self) -> str | None:
        """The first refused value's line(s), or ``None``: in the live CLI's order, ``seed_everything``, a
        non-finite number anywhere, then ``trainer.*``, then the classes' rules section by section
        (``federation:``'s own options before its strategy's and hooks')."""
        if problem := seed_problem(self.sections.get("seed_everything")):
            return problem  # the CLI's _set_seed, before every other check
        if problem := non_finite_problem(self._followed()):
            return problem
        trainer = self.sections.get("trainer")
        if isinstance(trainer, dict) and (
            problem := trainer_option_problem(trainer)
            or accelerator_build_problem(trainer)
            or loop_conflict_problem(trainer)
        ):
            return problem
        for section in ("model", "data"):
            if problem := class_problem(section, self.sections.get(section)):
                return problem
        if problem := dp_sgd_problem(self.sections.get("model")) or loss_options_problem(self.sections.get("model")):
            return problem  # lightning_fed/dp_sgd_rules.py, loss_options.py
        federation = self.sections.get("federation")
        if isinstance(federation, dict) and (problem := federation_section_problem(federation)):
            return problem
        if isinstance(trainer, dict) and (problem := run_length_problem(trainer)):
            return problem  # what federation: sets instead (lightning_fed/loop_conflicts.py)
        if problem := class_problem("federation.strategy", self.sections.get("federation.strategy")):
            return problem
        if problem := wrapper_problem(self.sections.get("federation.strategy")):  # ClientLevelDP, SecureAggregation
            return problem
        if problem := privacy_strategy_problem(self.sections) or private_cache_problem(self.sections):
            return problem  # a run's checks of config values alone (lightning_fed/private_run_rules.py)
        if problem := compression_problem(federation, self.sections.get("federation.strategy")):
            return problem  # a run_check (lightning_fed/run_checks.py), said before the imports
        if problem := config_module_problem(self.sections.get("model"), self.sections.get("federation.strategy")):
            return problem  # FedBiscuit over another module (lightning_fed/strategy_modules.py)
        hooks = self.sections.get("federation.hooks")
        for index, hook in enumerate(hooks if isinstance(hooks, list) else []):
            if problem := class_problem("federation.hooks", hook, index):
                return problem
        if problem := clients_per_round_of(self.sections):  # two sections' options (the round sampler's line)
            return problem
        if problem := hook_cross_problem(self.sections):  # what a hook needs of the rest (hook_cross_rules.py)
            return problem
        if problem := count_split_problem(self.sections, calibrate=False):  # a given z (noise_calibration.py)
            return problem
        return hub_model_problem(self.sections)  # offline, a model not in the hub cache


def federation_section_problem(federation: dict[str, Any]) -> str | None:
    """The line(s) :class:`~lightning_fed.run_config.FederationConfig` (and ``federation.privacy``'s
    :class:`~lightning_fed.privacy.config.PrivacyConfig`) refuse the merged ``federation:`` section
    with, from the same functions (:mod:`lightning_fed.federation_rules`), or ``None``."""
    from dataclasses import fields

    from lightning_fed.run_config import FederationConfig  # no torch

    rules = FEDERATION_ALL + FEDERATION_MORE
    if problem := string_problem(rules, federation):
        return problem
    values = {f.name: federation.get(f.name, f.default) for f in fields(FederationConfig)}
    if found := federation_problems(parsed(rules, values)):
        return "; ".join(found)
    privacy = privacy_values(federation.get("privacy"))
    if privacy is not None:
        if problem := string_problem(PRIVACY, privacy):
            return problem
        if found := privacy_problems(parsed(PRIVACY, privacy)):
            return "; ".join(found)
    return None


def _arguments(args: list[str]) -> Iterator[tuple[str, str]]:
    """``(key, raw value)`` of each ``--key=value`` / ``--key value`` and ``("config", path)``, in order."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--config", "-c") and i + 1 < len(args):
            yield "config", args[i + 1]
            i += 2
            continue
        if arg.startswith("--") and "=" in arg:
            key, raw = arg[2:].split("=", 1)
            yield key, raw
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            yield arg[2:], args[i + 1]
            i += 1
        i += 1


def unknown_option(args: list[str]) -> str | None:
    """The line refusing an option the package's strategy or round hook in ``args`` does not take
    (:meth:`Merged.unknown_option`), or ``None``."""
    merged = merged_config(args)
    return merged.unknown_option() if merged is not None else None


def option_problem(args: list[str]) -> str | None:
    """The line refusing a key or value of the package's ``model:`` / ``data:`` class that its
    source says is wrong (:meth:`Merged.option_problem`), or ``None``."""
    merged = merged_config(args)
    return merged.option_problem() if merged is not None else None


def value_problem(args: list[str]) -> str | None:
    """The line refusing a value in ``args`` (a subcommand's arguments, shipped configs resolved),
    or ``None``. Files that are not readable YAML mappings were refused before this is called;
    any other file is skipped."""
    merged = merged_config(args)
    if merged is None:
        return None
    return (
        merged.problem()
        or _root_problem(merged.sections.get("trainer"))
        or _logger_problem(merged.sections.get("trainer"))
        or _offload_problem(merged.sections.get("federation"))
    )


def test_set_problem(args: list[str]) -> str | None:
    """The line refusing ``test`` without a test set for the package's data module
    (:func:`lightning_fed.stage_sets.test_set_problem`), or ``None``."""
    from lightning_fed.stage_sets import test_set_problem as problem

    merged = merged_config(args)
    return problem(merged.sections.get("data")) if merged is not None else None


def validation_set_problem(args: list[str]) -> str | None:
    """The line refusing ``validate`` whose package data module holds out no validation row
    (:func:`lightning_fed.stage_sets.validation_set_problem`), or ``None``."""
    from lightning_fed.stage_sets import validation_set_problem as problem

    merged = merged_config(args)
    return problem(merged.sections.get("data")) if merged is not None else None


def evaluation_limit_of(args: list[str], stage: str) -> str | None:
    """The line refusing ``validate``/``test`` that ``args`` limit to no batch
    (:func:`lightning_fed.loop_conflicts.evaluation_limit_problem`), or ``None``."""
    from lightning_fed.loop_conflicts import evaluation_limit_problem

    merged = merged_config(args)
    return evaluation_limit_problem(merged.sections.get("trainer"), stage) if merged is not None else None


def merged_config(args: list[str]) -> Merged | None:
    """``args``' files and overrides merged (:class:`Merged`), or ``None`` if a file cannot be read."""
    merged = Merged()
    return merged if merged.apply_arguments(args) else None


def _root_problem(trainer: Any) -> str | None:
    """``trainer.default_root_dir`` (the working folder when unset) where no file can be written:
    the line :meth:`~lightning_fed.federated_cli.FederatedCLI._check_writable` says after the
    imports and the model's build, said before them."""
    root = trainer.get("default_root_dir") if isinstance(trainer, dict) else None
    if root is None:
        root = os.getcwd()
    if not isinstance(root, str) or "://" in root:
        return None
    why = unwritable(root)
    return f"trainer.default_root_dir {root!r}: {why}" if why else None


def _logger_problem(trainer: Any) -> str | None:
    """A ``trainer.logger``'s ``init_args.save_dir`` (TensorBoardLogger's, CSVLogger's) where no file can be
    written, the line :func:`_root_problem` says of ``default_root_dir`` (red team 17 B21: a ``save_dir``
    that was a file was a bare ``NotADirectoryError`` after torch, naming no option), or ``None``."""
    loggers = trainer.get("logger") if isinstance(trainer, dict) else None
    listed = isinstance(loggers, list)
    for index, logger in enumerate(loggers if listed else [loggers]):
        init_args = logger.get("init_args") if isinstance(logger, dict) else None
        folder = init_args.get("save_dir") if isinstance(init_args, dict) else None
        if not isinstance(folder, str) or not folder or "://" in folder:
            continue
        if why := unwritable(folder):
            option = f"trainer.logger[{index}]" if listed else "trainer.logger"
            return f"{option}.init_args.save_dir {folder!r}: {why}"
    return None


def _offload_problem(federation: Any) -> str | None:
    """``federation.state_offload_dir`` where no client state file can be written (an existing file:
    a run without offloading ignored it, exit 0, and one that offloads failed mid-run), or ``None``."""
    folder = federation.get("state_offload_dir") if isinstance(federation, dict) else None
    if not isinstance(folder, str) or not folder or "://" in folder:
        return None
    why = unwritable(folder)
    return f"federation.state_offload_dir {folder!r}: {why}" if why else None
