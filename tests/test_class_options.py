"""What lightning_fed/class_options.py reads from the source (no import) is what the imported
classes and tables are, so nothing drifts; and the precheck never refuses a value the live parser
and the classes accept (a property test against the live CLI, in-process)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_fed import class_options
from lightning_fed.class_parameters import fields, registered, signature, subclasses, table, takes_any_keyword
from lightning_fed.option_rules import DATA_RULES, MODEL_RULES, PACKAGES

CLASSES = [("model", name) for name in MODEL_RULES] + [("data", name) for name in DATA_RULES]


def _keyword_parameters(cls: type) -> dict[str, inspect.Parameter]:
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


@pytest.mark.parametrize(("section", "name"), CLASSES, ids=[c[1] for c in CLASSES])
def test_the_signature_read_from_the_source_is_the_class_s(section, name):
    import ast

    cls = getattr(importlib.import_module(PACKAGES[section]), name)
    read = signature(PACKAGES[section], name)
    live = _keyword_parameters(cls)
    assert read is not None and set(read) == set(live)
    for key, (annotation, _) in read.items():
        assert (ast.unparse(annotation) if annotation is not None else inspect.Parameter.empty) == live[key].annotation


@pytest.mark.parametrize(
    ("module", "name"),
    [("lightning_fed.modules.backbone", "BackboneConfig"), ("lightning_fed.modules.lora", "LoraSettings")],
)
def test_the_nested_dataclass_fields_are_the_dataclass_s(module, name):
    import dataclasses

    cls = getattr(importlib.import_module(module), name)
    read = fields(module, name)
    assert read is not None and list(read) == [f.name for f in dataclasses.fields(cls)]


def test_the_name_tables_read_from_the_source_are_the_imported_ones():
    from lightning.pytorch import loggers

    from lightning_fed.datamodules import human_feedback, partition, selector, synthetic, templates
    from lightning_fed.modules import backbone, dpo_losses
    from lightning_fed.trainer_classes import lightning_exports

    assert table("lightning_fed.datamodules.templates", "TEMPLATE_CHOICES") == templates.TEMPLATE_CHOICES
    assert class_options.template_choices("SelectorDataModule") == selector.SELECTOR_TEMPLATE_CHOICES
    data = importlib.import_module(PACKAGES["data"])
    for name in DATA_RULES:  # through every base class (FeedbackSelectorDataModule: the selector's)
        assert class_options.template_choices(name) == getattr(data, name).template_choices(), name
    assert list(table(*class_options.SYNTHETIC)) == list(synthetic.SYNTHETIC)
    assert list(table(*class_options.FEEDBACK_PRESETS)) == list(human_feedback.FEEDBACK_PRESETS)
    assert registered(*class_options.LOSSES) == tuple(dpo_losses.DPO_LOSSES)
    assert list(table(*class_options.BACKBONE_TABLES["dtype"])) == list(backbone.DTYPES)
    assert table(*class_options.BACKBONE_TABLES["quantization"]) == backbone.QUANTIZATIONS
    live = {n for n, c in vars(partition).items() if isinstance(c, type) and issubclass(c, partition.Partitioner)}
    assert set(subclasses(*class_options.PARTITIONERS)) == live - {"Partitioner"}
    assert lightning_exports("pytorch", "loggers") == tuple(loggers.__all__)


def test_lightning_s_callbacks_options_read_from_the_source_are_the_classes_s():
    """``trainer.callbacks``' ``init_args`` keys are checked against Lightning's source
    (:func:`lightning_fed.trainer_classes.callback_options_problem`): each exported callback whose
    parameters are read there has the imported class's keyword parameters, no more and no fewer."""
    from lightning.pytorch import callbacks

    from lightning_fed.trainer_classes import lightning_exports

    read_any = False
    for name in lightning_exports("pytorch", "callbacks") or ():
        cls = getattr(callbacks, name)
        read = signature("lightning.pytorch.callbacks", name)
        params = inspect.signature(cls.__init__).parameters.values()
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params) and "__init__" in vars(cls)
        assert takes_any_keyword("lightning.pytorch.callbacks", name) == takes_any, name
        if read is None or takes_any:
            continue  # not checked here: left to the live parser
        read_any = True
        live = {p.name for p in params if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        assert set(read) == live, name
    assert read_any


# ------------------------------------------------------------------------------- the boundary
OPTIONS = {
    "model.init_args.backbone.dtype": ("bfloat16", "float16", "float32"),
    "model.init_args.backbone.activation_checkpointing": ("true", "false"),
    "model.init_args.loss": ("sigmoid", "ipo", "hinge", "conservative"),
    "model.init_args.disable_dropout": ("true", "false"),
    "model.init_args.cache_reference": ("true", "false", "null"),
    "model.init_args.weight_decay": ("0.0", "0.01"),
    "data.init_args.template": ("alpaca", "plain", "chat"),
    "data.init_args.eval_batch_size": ("2", "null"),
    "data.init_args.seed": ("0", "7", "null"),
    "data.init_args.partition": ("IID",),
    "data.init_args.dataset": ("synthetic:preferences",),
    "seed_everything": ("0", "true", "false", "123"),
    "trainer.logger": ("false", "CSVLogger"),
}
values = st.one_of(
    st.integers(-3, 300).map(str),
    st.floats(-10, 10, allow_nan=False).map(str),
    st.text(alphabet="abcdefgxyz_:", min_size=1, max_size=8),
    st.sampled_from(["true", "false", "null", "1e3", "[1, 2]", "{a: 1}", "nan", "synthetic:nope", "Nope"]),
)


def _refused_live(args: list[str], name: str) -> bool:
    """Whether the live CLI refuses ``args``: its parser, the classes (built in-process with
    ``run=False``), then the data module's ``load_records``, which reads ``data.dataset`` (a run's
    ``setup`` does it before the first round), with a line naming the option (``name``: its last part)."""
    from lightning_fed.cli import main

    with contextlib.redirect_stderr(io.StringIO()):
        try:
            cli = main(args, run=False)
            cli.datamodule.load_records()
        except SystemExit as exit_:
            return exit_.code == 2
        except Exception as err:  # noqa: BLE001 - a class's refusal (ValueError...), reported as exit 2 by the CLI
            return name in str(err)
    return False


@pytest.mark.slow  # ~0.3 s per refused example (a tiny model is built), plus the imports: over 30 s
@settings(max_examples=300, deadline=None)
@given(
    option=st.sampled_from(sorted(OPTIONS)),
    value=st.one_of(values, st.sampled_from(sorted({v for vs in OPTIONS.values() for v in vs}))),
)
def test_the_precheck_never_refuses_what_the_live_cli_accepts(option, value):
    from lightning_fed.config_values import option_problem
    from lightning_fed.shipped_configs import resolve_config_args

    with tempfile.TemporaryDirectory() as folder:
        args = resolve_config_args(["--config", "tiny", f"--trainer.default_root_dir={Path(folder) / 'run'}"])
        args.append(f"--{option}={value}")
        if option_problem(args) is not None:
            assert _refused_live(args, option.rpartition(".")[2]), (option, value)


def test_the_precheck_accepts_each_option_s_good_values():
    """The other side of the boundary, cheaply: every value the live CLI takes (the shipped
    choices) passes the precheck."""
    from lightning_fed.config_values import option_problem
    from lightning_fed.shipped_configs import resolve_config_args

    for option, good in OPTIONS.items():
        for value in good:
            args = resolve_config_args(["--config", "tiny", f"--{option}={value}"])
            assert option_problem(args) is None, (option, value)


def test_annotations_checked_are_the_simple_ones():
    import ast

    from lightning_fed.option_types import kind

    assert kind(ast.parse("int | None", mode="eval").body) == ("int", None, True)
    assert kind(ast.parse("dict[str, typing.Any]", mode="eval").body) == ("dict", None, False)
    assert kind(ast.parse("dict[str, str] | None", mode="eval").body) == ("dict", "str", True)
    assert kind(ast.parse("list[str]", mode="eval").body) == ("list", "str", False)
    assert kind(ast.parse("LoraSettings | None", mode="eval").body) == (None, None, True)
