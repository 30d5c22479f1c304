"""One reader of a config: ``plan``, ``fit``'s parser and the Flower apps build the same run.

Issue 42 item 1: the planner read the raw YAML with its own defaults (batch 4, length 512
against the data module's 8 and 256) and re-read ``federation.batch_clients``; the Flower apps
missed checks only the CLI made. Now every reader parses through ``lightning_fed.run_parser``;
this test builds the :class:`FederatedRun` of every shipped config three ways and compares them
field by field, objects (strategy, hooks, privacy) by type and attributes. Parse only: no
model is built, no weight is loaded (the Flower path's module and data are left out at
:func:`lightning_fed.run_parser.build_objects`, the one place that loads them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

import lightning_fed
from lightning_fed import federated_cli, run_parser
from lightning_fed.errors import UserError
from lightning_fed.federated_cli import FederatedCLI, run_cli
from lightning_fed.plan_cli import main as plan_main
from lightning_fed.plan_cli import plan_config

CONFIGS = sorted(p.stem for p in (Path(lightning_fed.__file__).parent / "configs").glob("*.yaml"))


def _value(obj: Any, depth: int = 0) -> Any:
    """A comparable picture of a field's value: plain data as is, an object as its type and attributes."""
    if depth > 6:
        return repr(type(obj))
    if isinstance(obj, (str, int, float, bool, type(None))):
        return obj
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.tolist())
    if isinstance(obj, (list, tuple)):
        return [_value(v, depth + 1) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _value(v, depth + 1) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj):
        return (
            type(obj).__qualname__,
            {f.name: _value(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj)},
        )
    attrs = (
        {k: _value(v, depth + 1) for k, v in vars(obj).items() if not k.startswith("__")}
        if hasattr(obj, "__dict__")
        else {}
    )
    return (f"{type(obj).__module__}.{type(obj).__qualname__}", attrs)


def _fields(run: Any) -> dict[str, Any]:
    return {f.name: _value(getattr(run, f.name)) for f in dataclasses.fields(run)}


class _FitParseOnly(FederatedCLI):
    """``lightning-fed fit``'s CLI up to its checks; then the federation section alone, nothing run."""

    def instantiate_classes(self) -> None:
        self.run = run_parser.build_run(self.config[self.subcommand].get("federation"))

    def after_instantiate_classes(self) -> None:
        pass

    def _run_subcommand(self, subcommand: str) -> None:
        pass


def _fit_run(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        m.setattr(federated_cli, "FederatedCLI", _FitParseOnly)
        return run_cli(["fit", "--config", name], run=True).run


def _flower_run(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from lightning_fed.deploy.apps import load_run

    with monkeypatch.context() as m:
        m.setattr(run_parser, "build_objects", lambda config: (None, None))  # no backbone, no data
        return load_run(name)[2]


@pytest.mark.parametrize("name", CONFIGS)
def test_plan_fit_and_flower_build_the_same_run(name, monkeypatch):
    planned = _fields(plan_config(name)[1])
    assert planned == _fields(_fit_run(name, monkeypatch))
    assert planned == _fields(_flower_run(name, monkeypatch))


def test_plan_applies_the_data_modules_defaults(tmp_path, capsys):
    """A config without ``data.batch_size``/``max_length`` is planned at the data module's 8 x 256
    (the planner used to assume its own 4 x 512)."""
    text = (Path(lightning_fed.__file__).parent / "configs" / "tiny.yaml").read_text()
    config = tmp_path / "run.yaml"
    config.write_text(text.replace("    batch_size: 4\n", "").replace("    max_length: 160\n", ""))
    assert plan_main(["--config", str(config)]) == 0
    assert "local step: dpo, batch 8 x 256 tokens" in capsys.readouterr().out


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("rounds: 3", "rounds: 3\n  max_update_norm: .nan"),
            "federation.max_update_norm must be a finite number, got nan",
        ),
        (
            ("enable_model_summary: false", "enable_model_summary: false\n  use_distributed_sampler: true"),
            "trainer.use_distributed_sampler must be false",
        ),
        (("seed_everything: 0", "seed_everything: -1"), "seed_everything must be in [0, 4294967295], got -1"),
    ],
    ids=["non_finite", "distributed_sampler", "seed"],
)
def test_plan_refuses_what_fit_refuses(tmp_path, capsys, edit, message):
    """Checks ``fit`` made before it built anything were the CLI's alone; ``plan`` planned these."""
    text = (Path(lightning_fed.__file__).parent / "configs" / "tiny.yaml").read_text()
    assert edit[0] in text
    config = tmp_path / "bad.yaml"
    config.write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(UserError) as refused:
        plan_main(["--config", str(config)])
    assert str(refused.value).removeprefix(f"config {str(config)!r}: ").startswith(message)
