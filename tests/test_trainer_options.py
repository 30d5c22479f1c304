"""Lightning's ``trainer.*`` options checked before torch (:mod:`lightning_fed.trainer_options`)
against Lightning itself: the table of types is its ``Trainer.__init__`` signature, and no value
its parser and Trainer take is refused (issue 41: "a config error <= 3 s of CPU").

The precheck's table is written down (reading it from Lightning would import torch); here it is
derived again from ``inspect.signature(lightning.Trainer.__init__)`` and compared, so a Lightning
that adds or retypes an option fails this test instead of the precheck going wrong silently.
"""

from __future__ import annotations

import inspect
import re
import types
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_fed.config_values import merged_config
from lightning_fed.trainer_options import (
    ACCELERATORS,
    GRADIENT_CLIP_ALGORITHMS,
    PROFILERS,
    STRATEGIES,
    TRAINER_TYPES,
    trainer_option_problem,
    trainer_type_problem,
)

PLAIN = {int: "int", float: "float", bool: "bool", str: "str", type(None): "null"}


def _kinds(annotation: typing.Any) -> set[str] | None:
    """The parts of an annotation as :data:`TRAINER_TYPES` writes them, or ``None`` if one part is
    no plain value (a class, a ``timedelta``, a ``Path``...)."""
    parts = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    found: set[str] = set()
    for part in parts or (annotation,):
        if typing.get_origin(part) is typing.Literal:
            for value in typing.get_args(part):
                found.add(PLAIN[type(value)] if not isinstance(value, str) else repr(value))
        elif typing.get_origin(part) is list and typing.get_args(part) == (int,):
            found.add("list[int]")
        elif part in PLAIN:
            found.add(PLAIN[part])
        else:
            return None
    return found


@pytest.fixture(scope="module")
def trainer_parser():
    """``trainer:`` as the LightningCLI parses it (a parser of Trainer's arguments alone)."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.cli import LightningArgumentParser

    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(Trainer, "trainer")
    return parser


def test_the_table_is_the_trainer_signature():
    """Every ``Trainer.__init__`` option whose annotation is plain values is in the table, with
    those parts (``precision``'s literals are :data:`~lightning_fed.trainer_options.PRECISIONS`,
    checked by ``tests/test_refused_before_anything_written.py``; ``default_root_dir`` also takes a
    ``Path``, which a config writes as a string)."""
    from lightning.pytorch import Trainer

    derived = {}
    for name, parameter in inspect.signature(Trainer.__init__).parameters.items():
        kinds = _kinds(parameter.annotation)
        if kinds is not None and name != "precision":
            derived[name] = kinds
    table = {name: set(kinds) for name, kinds in TRAINER_TYPES.items() if name != "default_root_dir"}
    assert table == derived


def test_the_accelerators_and_clip_algorithms_are_lightning_s():
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.utilities.enums import GradClipAlgorithmType

    assert set(ACCELERATORS) == {*AcceleratorRegistry.available_accelerators(), "auto", "gpu"}
    assert set(GRADIENT_CLIP_ALGORITHMS) == set(GradClipAlgorithmType.supported_types())


ACCEPTED = {
    "devices": ["auto", "1", "-1", "[0]", "[0, 1]", "0,1", "0,", "2"],
    "accelerator": [a for a in ACCELERATORS if a != "tpu"],  # tpu: refused without torch_xla (its own test)
    "precision": ["bf16-mixed", "16-mixed", "32", "64-true", "bf16"],
    "max_epochs": ["-1", "0", "3", "null"],
    "max_steps": ["-1", "10"],
    "limit_val_batches": ["0.5", "1.0", "3", "0", "null"],
    "deterministic": ["true", "false", "warn", "null"],
    "gradient_clip_val": ["0", "0.5", "1", "null"],
    "gradient_clip_algorithm": ["norm", "value", "NORM"],
    "val_check_interval": ["0.25", "10", "00:00:05:00", "0", "1", "1.0", "2.0"],
    "overfit_batches": ["0", "0.0", "0.5", "3", "2.0"],
    "reload_dataloaders_every_n_epochs": ["0", "2"],
    "num_nodes": ["1"],
    "num_sanity_val_steps": ["-1", "0", "2"],
    "enable_checkpointing": ["true", "false", "null"],
    "fast_dev_run": ["true", "false", "3", "0"],
    "default_root_dir": ["runs", "/tmp/x", "5"],
}


@pytest.mark.parametrize(
    ("name", "text"), [(n, t) for n, texts in ACCEPTED.items() for t in texts], ids=lambda v: str(v)
)
def test_what_lightning_accepts_is_not_refused(trainer_parser, name, text):
    """The values the docs and Lightning's own examples use pass the precheck and the parser."""
    trainer_parser.parse_args([f"--trainer.{name}={text}"])  # Lightning's parser takes it
    on_gpu = ["--trainer.accelerator=gpu"] if name == "devices" else []  # a list or -1: not on the CPU (below)
    trainer = merged_config([f"--trainer.{name}={text}", *on_gpu]).sections["trainer"]
    assert (trainer_type_problem(trainer), trainer_option_problem(trainer)) == (None, None)


TEXTS = st.one_of(
    st.integers(-3, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        ["true", "false", "null", "on", "off", "yes", "warn", "auto", "abc", "1.5", "2.0", "[0]", "[0, 1]"]
        + ["[]", "{}", "{a: 1}", "'5'", "[true]", "[a]", "0,1", "1e3", "-1", ".inf", "~", "None"]
    ),
    st.text(alphabet="ab01.,-[]e ", min_size=1, max_size=6),
)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(TRAINER_TYPES)), text=TEXTS)
def test_a_value_refused_for_its_type_is_refused_by_lightning_s_parser(trainer_parser, name, text):
    """The precheck refuses a type only where the LightningCLI's parser refuses it too."""
    from jsonargparse import ArgumentError

    trainer = merged_config([f"--trainer.{name}={text}"]).sections["trainer"]
    if trainer_type_problem(trainer) is not None:
        with pytest.raises(ArgumentError):
            trainer_parser.parse_args([f"--trainer.{name}={text}"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(alphabet="0123456789, -autoxg", min_size=1, max_size=8))
def test_a_devices_word_refused_is_refused_by_every_accelerator(text):
    """``trainer.devices`` as a string: refused only if Lightning's GPU parser and its CPU parser
    (``_normalize_parse_gpu_string_input``, ``_parse_cpu_cores``) both refuse it."""
    from lightning.fabric.accelerators.cpu import _parse_cpu_cores
    from lightning.fabric.utilities.device_parser import _normalize_parse_gpu_string_input

    if trainer_option_problem({"devices": text, "accelerator": "gpu"}) is None or re.fullmatch(r"\s*-?[0-9]+\s*", text):
        return  # a count < 1 but -1: refused for another reason (tests/test_refused_before_anything_written.py)
    for parse in (_normalize_parse_gpu_string_input, _parse_cpu_cores):
        with pytest.raises((ValueError, TypeError)):
            parse(text)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    devices=st.one_of(
        st.text(alphabet="0123456789, -auto", min_size=1, max_size=6),
        st.integers(-3, 64),
        st.lists(st.integers(0, 7), max_size=3),
    )
)
def test_devices_on_the_cpu_are_refused_as_lightning_s_cpu_parser_refuses_them(devices):
    """With ``accelerator: cpu`` a ``trainer.devices`` the word check passes is refused exactly when
    Lightning's ``_parse_cpu_cores`` raises (a list, ``-1``, ``'0,1'``: a ``TypeError`` after the
    imports on the second outside run, 12.6 s of CPU); ``auto`` is resolved to a count before it."""
    from lightning.fabric.accelerators.cpu import _parse_cpu_cores

    if trainer_option_problem({"devices": devices, "accelerator": "gpu"}) is not None or devices == "auto":
        return  # refused on every accelerator (above), or resolved before the parser
    refused = trainer_option_problem({"devices": devices, "accelerator": "cpu"}) is not None
    try:
        _parse_cpu_cores(devices)
    except TypeError:
        assert refused, devices
    else:
        assert not refused, devices


def test_cpu_only_torch_reads_the_installed_build():
    """:func:`~lightning_fed.trainer_options.cpu_only_torch`, read from ``torch/version.py`` without
    importing torch, says what torch itself says (on a CUDA build it is ``None``)."""
    import sys

    import torch

    from lightning_fed.trainer_options import cpu_only_torch

    cpu_only = torch.version.cuda is None and torch.version.hip is None and sys.platform != "darwin"
    assert cpu_only_torch() == (torch.__version__ if cpu_only else None)


BOUNDED = ("val_check_interval", "overfit_batches", "fast_dev_run", "reload_dataloaders_every_n_epochs", "num_nodes")
"""The bounds added from outside testing (issue 41); ``num_sanity_val_steps < -1``, which
Lightning takes (and treats as 0 sanity steps), is refused on purpose: its docs give only -1 and
counts >= 0."""
NUMBERS = st.one_of(
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 2.0, 2.5, -0.0, 1e-300, 1.0000001, 10**9]),
)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(BOUNDED), value=NUMBERS)
def test_a_bound_the_precheck_refuses_the_trainer_refuses(name, value):
    """Anything the precheck refuses, the Trainer refuses when it is built (so what Lightning takes is
    never refused); a float for an integer option is the parser's to refuse (the test above)."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    if isinstance(value, float) and name not in ("val_check_interval", "overfit_batches"):
        return
    if trainer_option_problem({name: value}) is None:
        return
    with pytest.raises((MisconfigurationException, ValueError)):
        Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, **{name: value})


def test_sanity_steps_below_minus_one_are_refused():
    assert trainer_option_problem({"num_sanity_val_steps": -1}) is None
    assert trainer_option_problem({"num_sanity_val_steps": -2}) == (
        "trainer.num_sanity_val_steps must be >= 0, or -1 for all batches, got -2"
    )


# ------------------------------------------------------------------------------- Lightning's names and durations
def test_the_strategy_and_profiler_names_are_lightning_s():
    import inspect

    from lightning.pytorch.strategies import StrategyRegistry
    from lightning.pytorch.trainer import setup

    assert set(STRATEGIES) == {"auto", *StrategyRegistry.available_strategies()}
    source = inspect.getsource(setup._init_profiler)
    assert set(re.findall(r'"(\w+)": \w+Profiler', source)) == set(PROFILERS)


WORDS = st.one_of(
    st.text(alphabet="abdefimnoprstuxyz_0123456789:.", min_size=1, max_size=12),
    st.sampled_from(["ddp", "DDP", "ddpp", "fsdp", "deepspeed_stage_3", "xla", "auto", "simple", "Advanced"]),
)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(word=WORDS)
def test_a_strategy_or_profiler_name_refused_is_refused_by_lightning(word):
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
    from lightning.pytorch.trainer.setup import _init_profiler
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    if trainer_option_problem({"strategy": word}) is not None:
        with pytest.raises(ValueError, match="invalid strategy name"):
            _AcceleratorConnector(strategy=word, accelerator="cpu")
    if trainer_option_problem({"profiler": word}) is not None:
        with pytest.raises(MisconfigurationException):
            _init_profiler(type("T", (), {})(), word)


DURATIONS = st.one_of(
    st.text(alphabet="0123456789: ab.-", min_size=0, max_size=14),
    st.sampled_from(["00:12:00:00", "1:02:03:04", " 00:00:01:00 ", "00:00:05:0", "abc", "0:0:0:0", "-1:00:00:00"]),
)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=DURATIONS)
def test_a_duration_refused_is_refused_by_lightning(text):
    """A string ``max_time`` / ``val_check_interval`` refused here is refused by the ``Timer`` /
    ``_parse_time_interval_seconds``; the word as the command line gives it (a number stays one)."""
    from lightning.pytorch.callbacks import Timer
    from lightning.pytorch.trainer.setup import _parse_time_interval_seconds
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    if trainer_option_problem({"max_time": text}) is not None:
        with pytest.raises(MisconfigurationException):
            Timer(duration=text)
    if trainer_option_problem({"val_check_interval": text}) is not None:
        with pytest.raises(MisconfigurationException):
            _parse_time_interval_seconds(text)


def test_a_devices_list_of_words_is_refused_by_lightning_s_parser():
    from jsonargparse import ArgumentError
    from lightning.pytorch import Trainer
    from lightning.pytorch.cli import LightningArgumentParser

    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(Trainer, "trainer")
    config = {"trainer": {"devices": [0, "x"]}}
    assert trainer_option_problem(config["trainer"]) is not None
    with pytest.raises(ArgumentError):
        parser.parse_object(config)
