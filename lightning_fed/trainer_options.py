"""Lightning's own ``trainer.*`` options, checked with the run's config before anything is built.

The ``Trainer`` checks most of these itself, but only when it is constructed, once torch and
Lightning are imported (~10 s of CPU; its ``MisconfigurationException`` then is exit 2, its own
message, :meth:`~lightning_fed.federated_cli.FederatedCLI._instantiate_trainer`). Here
each bound is the Trainer's own (``lightning/pytorch/trainer/connectors``), stated once, checked
in :meth:`~lightning_fed.federated_cli.FederatedCLI.before_instantiate_classes`: one line naming
``trainer.<option>`` and its value, exit 2, before the backbone loads or a folder is made; the
precheck applies the same before torch is imported (:mod:`lightning_fed.config_values`). Besides
the bounds and types: Lightning's strategy and profiler names (:data:`STRATEGIES`,
:data:`PROFILERS`, with the closest), its ``DD:HH:MM:SS`` durations (``max_time``,
``val_check_interval``), device indices that are integers, a ``devices`` value the CPU cannot take
where the CPU certainly runs it (:func:`cpu_only_torch`), and ``nan`` written for a number.
Class-valued options (``logger``, ``callbacks``, ``plugins``): :mod:`lightning_fed.trainer_classes`.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.value_rules import plain_value_problem

COUNTS_OR_UNLIMITED = ("max_epochs", "max_steps")
"""``-1`` means no limit (``None`` the default); any other negative is refused."""
COUNTS = (
    "min_epochs",
    "min_steps",
    "check_val_every_n_epoch",
    "log_every_n_steps",
    "accumulate_grad_batches",
    "fast_dev_run",
    "reload_dataloaders_every_n_epochs",
    "num_nodes",
)
"""Integers ``>= 0`` (``check_val_every_n_epoch``, ``accumulate_grad_batches``, ``num_nodes``: ``>= 1``;
``fast_dev_run`` may be a bool instead)."""
AT_LEAST_ONE = ("check_val_every_n_epoch", "accumulate_grad_batches", "num_nodes")
BATCH_LIMITS = ("val_check_interval", "overfit_batches")
"""Lightning's ``_determine_batch_limits`` (``trainer/setup.py``): a number in ``[0, 1]`` (a
fraction) or a whole number ``> 1`` of batches (``2.0`` reads as 2); a time for ``val_check_interval``
(a string, left to the Trainer)."""
FRACTION_OR_COUNT = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
"""A float in ``[0, 1]`` (a fraction of the batches) or an integer ``>= 0`` (a number of batches)."""
NON_NEGATIVE = ("gradient_clip_val",)
PRECISIONS = (
    64,
    32,
    16,
    "64",
    "32",
    "16",
    "bf16",
    "16-true",
    "16-mixed",
    "bf16-true",
    "bf16-mixed",
    "32-true",
    "64-true",
)
"""``trainer.precision``: Lightning's ``_PRECISION_INPUT`` (``lightning.fabric.connector``; the
Transformer Engine ones, which need that library, left to the Trainer); ``tests`` compare the two."""
ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps", "tpu")
"""``trainer.accelerator`` by name: Lightning's ``AcceleratorRegistry`` (``cpu``, ``cuda``, ``mps``,
``tpu``) and the two names its connector takes besides (``auto``, ``gpu``); exact, as it compares."""
GRADIENT_CLIP_ALGORITHMS = ("norm", "value")
"""``trainer.gradient_clip_algorithm``: Lightning's ``GradClipAlgorithmType`` (any case)."""
STRATEGIES = (
    "auto",
    "ddp",
    "ddp_find_unused_parameters_false",
    "ddp_find_unused_parameters_true",
    "ddp_fork",
    "ddp_fork_find_unused_parameters_false",
    "ddp_fork_find_unused_parameters_true",
    "ddp_notebook",
    "ddp_notebook_find_unused_parameters_false",
    "ddp_notebook_find_unused_parameters_true",
    "ddp_spawn",
    "ddp_spawn_find_unused_parameters_false",
    "ddp_spawn_find_unused_parameters_true",
    "deepspeed",
    "deepspeed_stage_1",
    "deepspeed_stage_2",
    "deepspeed_stage_2_offload",
    "deepspeed_stage_3",
    "deepspeed_stage_3_offload",
    "deepspeed_stage_3_offload_nvme",
    "fsdp",
    "fsdp_cpu_offload",
    "single_device",
    "single_tpu",
    "single_xla",
    "xla",
    "xla_debug",
)
"""``trainer.strategy`` by name (any case): ``auto`` and Lightning's ``StrategyRegistry``
(``tests/test_trainer_options.py`` compares the two); a ``Strategy`` class is given as a mapping."""
PROFILERS = ("simple", "advanced", "pytorch", "xla")
"""``trainer.profiler`` by name (any case): the names of Lightning's ``_init_profiler``."""
DURATION = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")
"""``trainer.max_time`` as a string: the ``Timer`` callback's ``DD:HH:MM:SS`` (stripped, exact)."""
TRAINER_TYPES: dict[str, tuple[str, ...]] = {
    "num_nodes": ("int",),
    "fast_dev_run": ("int", "bool"),
    "max_epochs": ("int", "null"),
    "min_epochs": ("int", "null"),
    "max_steps": ("int",),
    "min_steps": ("int", "null"),
    "limit_train_batches": ("int", "float", "null"),
    "limit_val_batches": ("int", "float", "null"),
    "limit_test_batches": ("int", "float", "null"),
    "limit_predict_batches": ("int", "float", "null"),
    "overfit_batches": ("int", "float"),
    "check_val_every_n_epoch": ("int", "null"),
    "num_sanity_val_steps": ("int", "null"),
    "log_every_n_steps": ("int", "null"),
    "enable_checkpointing": ("bool", "null"),
    "enable_progress_bar": ("bool", "null"),
    "enable_model_summary": ("bool", "null"),
    "accumulate_grad_batches": ("int",),
    "gradient_clip_val": ("int", "float", "null"),
    "gradient_clip_algorithm": ("str", "null"),
    "deterministic": ("bool", "'warn'", "null"),
    "benchmark": ("bool", "null"),
    "inference_mode": ("bool",),
    "use_distributed_sampler": ("bool",),
    "detect_anomaly": ("bool",),
    "barebones": ("bool",),
    "sync_batchnorm": ("bool",),
    "reload_dataloaders_every_n_epochs": ("int",),
    "enable_autolog_hparams": ("bool",),
    "devices": ("list[int]", "str", "int"),
    "default_root_dir": ("str", "null"),
    "model_registry": ("str", "null"),
}
"""The ``Trainer.__init__`` options whose annotation is made of plain values only, by its parts
(``int``, ``float``, ``bool``, ``str``, ``null``, ``list[int]``, a ``Literal`` string): what the
parser type-checks them against (``Expected a <class 'int'>``, no value named), checked here
without importing Lightning (which imports torch). ``tests/test_trainer_options.py`` derives the
same table from ``inspect.signature(lightning.Trainer.__init__)``."""


def _devices_word(text: str) -> bool:
    """Whether Lightning reads a ``trainer.devices`` string: ``auto``, ``-1``, a count (``2``) or
    device indices (``0,1``), as ``_normalize_parse_gpu_string_input`` reads them (the CPU's
    ``_parse_cpu_cores`` takes fewer: a word neither takes fails on every accelerator)."""
    if text in ("auto", "-1"):
        return True
    parts = [part for part in text.split(",") if part] if "," in text else [text]
    try:
        [int(part) for part in parts]
    except ValueError:
        return False
    return True


PLUGIN_ACCELERATORS = {"tpu": "torch_xla"}
"""An accelerator Lightning names but needs another library for (``ModuleNotFoundError`` otherwise)."""


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def trainer_type_problem(trainer: Mapping[str, Any]) -> str | None:
    """The first ``trainer.*`` option of :data:`TRAINER_TYPES` given a value of no type its
    annotation has (a word for an integer, a list for a bool), as one line naming it and the value."""
    for name, kinds in TRAINER_TYPES.items():
        if name in trainer and (problem := plain_value_problem(f"trainer.{name}", kinds, trainer[name])):
            return problem
    return None


@functools.cache
def cpu_only_torch() -> str | None:
    """The installed torch's version when Lightning's ``accelerator: auto`` can only pick the CPU with
    it, else ``None``: a build for the CPU alone (``torch/version.py``: ``cuda`` and ``hip`` None,
    found from the distribution's metadata and read as text: nothing is imported or even looked up
    on the import path), not on macOS (whose MPS that build has), without ``torch_xla``
    (``_select_auto_accelerator`` tries TPU, MPS, CUDA, then the CPU)."""
    from importlib import metadata

    try:
        torch = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    if sys.platform == "darwin" or importlib.util.find_spec("torch_xla") is not None:
        return None
    try:
        tree = ast.parse(Path(str(torch.locate_file("torch/version.py"))).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    values: dict[str, Any] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            values[target.id] = node.value.value
    if not {"__version__", "cuda", "hip"} <= values.keys() or values["cuda"] is not None or values["hip"] is not None:
        return None
    return str(values["__version__"])


def _cpu_devices_problem(devices: Any, accelerator: Any) -> str | None:
    """``trainer.devices`` on the CPU, which takes a number of processes >= 1 or ``auto`` (Lightning's
    ``_parse_cpu_cores``: a list or ``-1`` is a ``TypeError`` after the imports), where the CPU
    certainly runs it: ``accelerator: cpu``, or ``auto`` with :func:`cpu_only_torch`."""
    if devices is None or devices == "auto":
        return None
    if (_int(devices) and devices > 0) or (isinstance(devices, str) and devices.strip().isdigit() and int(devices) > 0):
        return None
    build = cpu_only_torch() if accelerator in (None, "auto") else None
    if accelerator != "cpu" and build is None:
        return None  # a GPU (or another accelerator) may run it: the live Trainer decides
    where = "accelerator: cpu" if accelerator == "cpu" else f"the installed torch {build} runs on the CPU alone"
    return f"trainer.devices on the CPU must be a number of processes >= 1 or 'auto' ({where}), got {devices!r}"


def _device_problem(trainer: Mapping[str, Any]) -> str | None:
    """``trainer.devices``, ``trainer.precision`` and ``trainer.accelerator`` the Trainer would refuse."""
    devices = trainer.get("devices")
    if isinstance(devices, list) and not all(_int(d) for d in devices):
        return f"trainer.devices must be a number of devices, -1, 'auto' or a list of device indices, got {devices!r}"
    count = int(devices) if isinstance(devices, str) and devices.strip().lstrip("-").isdigit() else devices
    bad_word = isinstance(devices, str) and not _devices_word(devices)
    if (_int(count) and count < 1 and count != -1) or devices == [] or bad_word:
        return (
            "trainer.devices must be a number of devices >= 1, -1 (all of them), 'auto' or a list of device"
            f" indices, got {devices!r}"
        )
    accelerator = trainer.get("accelerator")
    if problem := _cpu_devices_problem(devices, accelerator.lower() if isinstance(accelerator, str) else accelerator):
        return problem
    precision = trainer.get("precision")
    if precision is not None and precision not in PRECISIONS:
        if not (isinstance(precision, str) and precision.startswith("transformer-engine")):
            accepted = ", ".join(str(p) for p in PRECISIONS if isinstance(p, str))
            return f"trainer.precision must be one of {accepted}, got {precision!r}"
    accelerator = trainer.get("accelerator")
    if isinstance(accelerator, str) and "." not in accelerator and accelerator not in ACCELERATORS:
        return (
            f"trainer.accelerator must be one of {', '.join(ACCELERATORS)} or an Accelerator's class path,"
            f" got {accelerator!r}"
        )
    algorithm = trainer.get("gradient_clip_algorithm")
    if isinstance(algorithm, str) and algorithm.lower() not in GRADIENT_CLIP_ALGORITHMS:
        choices = ", ".join(GRADIENT_CLIP_ALGORITHMS)
        return f"trainer.gradient_clip_algorithm must be one of {choices}, got {algorithm!r}"
    if isinstance(accelerator, str) and (library := PLUGIN_ACCELERATORS.get(accelerator.lower())):
        import importlib.util

        if importlib.util.find_spec(library) is None:
            return f"trainer.accelerator {accelerator!r} needs the {library} package, which is not installed"
    return None


def trainer_option_problem(trainer: Mapping[str, Any]) -> str | None:
    """The first ``trainer.*`` option outside the Trainer's bounds, as one line, or ``None``."""
    for name, kinds in TRAINER_TYPES.items():  # `--trainer.gradient_clip_val=nan`: the word, as the parser reads it
        value = trainer.get(name)
        if "float" in kinds and isinstance(value, str) and _float_word(value) and not math.isfinite(float(value)):
            return f"trainer.{name} must be a finite number, got {float(value)}"
    trainer = {name: _typed_number(value, TRAINER_TYPES.get(name, ())) for name, value in trainer.items()}
    interval = trainer.get("val_check_interval")  # `nan` stays a string to the parser: a duration it is not
    if isinstance(interval, str) and _float_word(interval) and not math.isfinite(float(interval)):
        return f"trainer.val_check_interval must be a finite number, got {float(interval)}"
    for name in COUNTS_OR_UNLIMITED:
        value = trainer.get(name)
        if _int(value) and value < -1:
            return f"trainer.{name} must be >= 0, or -1 for no limit, got {value}"
    for name in COUNTS:
        value = trainer.get(name)
        low = 1 if name in AT_LEAST_ONE else 0
        if _int(value) and value < low:
            return f"trainer.{name} must be an integer >= {low}, got {value}"
    sanity = trainer.get("num_sanity_val_steps")
    if _int(sanity) and sanity < -1:
        return f"trainer.num_sanity_val_steps must be >= 0, or -1 for all batches, got {sanity}"
    for name in BATCH_LIMITS:
        value = number_word(trainer.get(name)) if name == "val_check_interval" else trainer.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not (0 <= value <= 1 or (value > 1 and value % 1.0 == 0)):
                return f"trainer.{name} must be a fraction in [0, 1] or a whole number of batches, got {value}"
    for name in FRACTION_OR_COUNT:
        value = trainer.get(name)
        if isinstance(value, float) and not 0.0 <= value <= 1.0:
            return f"trainer.{name} must be a fraction in [0, 1] or a number of batches >= 0, got {value}"
        if _int(value) and value < 0:
            return f"trainer.{name} must be a fraction in [0, 1] or a number of batches >= 0, got {value}"
    if problem := _device_problem(trainer):
        return problem
    if problem := _name_problem(trainer):
        return problem
    if problem := _time_problem(trainer):
        return problem

    for name in NON_NEGATIVE:
        value = trainer.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value >= 0:
            return f"trainer.{name} must be >= 0, got {value}"
    return None


def _choice(option: str, value: str, names: tuple[str, ...], other: str) -> str:
    near = difflib.get_close_matches(value.lower(), names, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]}?" if near else f"; one of {', '.join(names)}{other}"
    return f"trainer.{option} {value!r} is not one of Lightning's {option} names{hint}"


def _name_problem(trainer: Mapping[str, Any]) -> str | None:
    """``trainer.strategy`` / ``trainer.profiler`` given as a name Lightning has no entry for."""
    strategy = trainer.get("strategy")
    if isinstance(strategy, str) and "." not in strategy and strategy.lower() not in STRATEGIES:
        return _choice("strategy", strategy, STRATEGIES, ", or a Strategy's class_path")
    profiler = trainer.get("profiler")
    if isinstance(profiler, str) and "." not in profiler and profiler.lower() not in PROFILERS:
        return _choice("profiler", profiler, PROFILERS, ", or a Profiler's class_path")
    for option in ("strategy", "profiler"):
        if problem := _dotted_name_problem(option, trainer.get(option)):
            return problem
    return None


def _dotted_name_problem(option: str, value: Any) -> str | None:
    """``trainer.strategy`` / ``trainer.profiler`` given as a dotted string. Lightning reads a string
    as one of its names (none has a dot; the parser keeps ``str`` before the class), so every one is
    refused, after the imports, as an invalid name. Here: a path that names no class with the closest
    (:func:`~lightning_fed.class_paths.dotted_path_problem`), a class's path with how to give it."""
    if not isinstance(value, str) or "." not in value or _float_word(value):
        return None
    from lightning_fed.class_paths import dotted_path_problem, missing_module_problem

    key, path = f"trainer.{option}", value.strip()
    names = STRATEGIES if option == "strategy" else PROFILERS
    top = path.split(".", 1)[0]
    if missing_module_problem(key, f"{top}.X") and difflib.get_close_matches(path.lower(), names, n=1, cutoff=0.6):
        return _choice(option, value, names, "")  # `ddp.spawn`: a name mistyped, not a class path
    if problem := dotted_path_problem(key, path) or missing_module_problem(key, path):
        return problem
    return (
        f"trainer.{option} {value!r} is a class path given as a name: Lightning takes a string only as one of its"
        f" {option} names; give the class as {{class_path: {value.strip()}}}"
    )


def _typed_number(value: Any, kinds: tuple[str, ...]) -> Any:
    """A number written as a string (``gradient_clip_val: "-1"``) for an option typed ``int`` or
    ``float`` and not ``str`` (:data:`TRAINER_TYPES`), as jsonargparse casts it (YAML, then the type);
    anything else as given (the parser refuses it, or reads it as the string)."""
    if not isinstance(value, str) or "str" in kinds:
        return value
    from lightning_fed.yaml_reading import value_of  # PyYAML only

    loaded = value_of(value)
    if isinstance(loaded, bool) or not isinstance(loaded, (int, float)):
        return value
    return loaded if (type(loaded).__name__ in kinds or ("float" in kinds and isinstance(loaded, int))) else value


def number_word(value: Any) -> Any:
    """``value`` as the parser reads a number written as a string for an option whose type also takes
    a string (``trainer.val_check_interval: "1.0"`` in a YAML file: jsonargparse tries ``int``, then
    ``float``, before ``str``, and holds ``1.0``); a word for no finite number (``nan``, ``abc``) stays
    the string. Red team 12 row 7: ``"1.0"`` was told it "would validate inside a round"."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        return number if math.isfinite(number) else value
    return value


def _float_word(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _time_problem(trainer: Mapping[str, Any]) -> str | None:
    """``trainer.max_time`` / ``trainer.val_check_interval`` given as a string that is no
    ``DD:HH:MM:SS`` duration (the ``Timer``'s and ``_parse_time_interval_seconds``' formats)."""
    max_time = trainer.get("max_time")
    if isinstance(max_time, str) and not DURATION.fullmatch(max_time.strip()):
        return (
            "trainer.max_time must be a duration DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping such as"
            f" {{hours: 12}}, got {max_time!r}"
        )
    interval = trainer.get("val_check_interval")
    if isinstance(interval, str) and not _float_word(interval):
        parts = interval.split(":")
        try:
            ok = len(parts) == 4 and all(isinstance(int(part), int) for part in parts)
        except ValueError:
            ok = False
        if not ok:
            return (
                "trainer.val_check_interval must be a fraction of the epoch, a number of batches or a duration"
                f" DD:HH:MM:SS, got {interval!r}"
            )
    return None
