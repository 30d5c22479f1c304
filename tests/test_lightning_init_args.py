"""What :mod:`lightning_fed.lightning_init_args` reads of Lightning's callbacks and loggers without
importing them is what the live parser (jsonargparse) reads of the imported classes: the same
``init_args`` names (a ``TensorBoardLogger``'s ``SummaryWriter`` options among them), and where a
class's ``**kwargs`` are not followed here, nothing is refused."""

from __future__ import annotations

import ast

import pytest

from lightning_fed.lightning_init_args import PACKAGES, accepted, kinds
from lightning_fed.trainer_classes import EXPORTS, lightning_exports


@pytest.mark.parametrize("option", sorted(PACKAGES))
def test_the_init_args_read_from_source_are_the_live_parser_s(option):
    import importlib

    from jsonargparse._parameter_resolvers import get_signature_parameters

    module = importlib.import_module(PACKAGES[option])
    exported = lightning_exports(*EXPORTS[option][0]) or ()
    read_any = False
    for name in exported:
        cls = getattr(module, name)
        read = accepted(option, name, exported)
        if read is None or not isinstance(cls, type):
            continue  # left to the live parser
        read_any = True
        live = {p.name for p in get_signature_parameters(cls, None)}
        assert set(read) == live, name
    assert read_any
    assert accepted("logger", "TensorBoardLogger", exported) is not None or option != "logger"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ("int", ("int",)),
        ("Optional[float]", ("float", "null")),
        ("Optional[Union[int, str]]", ("int", "str", "null")),
        ("bool | None", ("bool", "null")),
        ('Optional[Literal["step", "epoch"]]', ("'step'", "'epoch'", "null")),
        ("Optional[timedelta]", None),
        ("_PATH", None),
    ],
)
def test_annotations_are_read_as_the_kinds_of_values_they_take(annotation, expected):
    assert kinds(ast.parse(annotation, mode="eval").body) == expected
