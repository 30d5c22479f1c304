"""Rebuilding a run's model for evaluation: the evaluated model is the trained one."""

import pytest
import torch

from lightning_fed.evaluation.run_model import ModelSource, load_model
from tests.evaluation.eval_runs import make_run

IDS = torch.tensor([[72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run") / "version_0"
    module = make_run(root, seed=3)
    with torch.no_grad():
        expected = module.model(IDS).logits
    return root, expected


@pytest.mark.parametrize("where", ["run folder", "adapter folder", "checkpoint", "checkpoint, no config.yaml"])
def test_same_logits_as_the_trained_module(run, where, tmp_path):
    root, expected = run
    if where == "checkpoint, no config.yaml":  # seed and backbone from the checkpoint alone
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "last.ckpt").write_bytes((root / "checkpoints" / "last.ckpt").read_bytes())
        path = tmp_path / "checkpoints" / "last.ckpt"
    else:
        path = {
            "run folder": root,
            "adapter folder": root / "adapter",
            "checkpoint": root / "checkpoints" / "last.ckpt",
        }[where]
    loaded = load_model(ModelSource(run=str(path)))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(IDS).logits, expected, rtol=0, atol=1e-6)
    assert loaded.output_dir == (path.parent.parent if path.suffix == ".ckpt" else root)
    assert loaded.description["seed"] == 3


def test_the_seed_decides_a_config_built_backbone(run):
    root, expected = run
    loaded = load_model(ModelSource(run=str(root), seed=4))
    with torch.no_grad():
        assert (loaded.model(IDS).logits - expected).abs().max() > 1e-2


def test_bad_sources_are_one_line_errors(run, tmp_path):
    root, _ = run
    cases = [
        ({}, "exactly one of --run and --model must be set, got neither"),
        ({"run": str(root), "model": "distilgpt2"}, "got both"),
        ({"run": str(root), "adapter": str(root / "adapter")}, "--adapter goes with --model"),
        ({"model": "distilgpt2", "adapter": str(tmp_path)}, "not a PEFT adapter folder"),
        ({"run": "/no/such/run"}, "--run '/no/such/run': no such file or folder"),
        ({"model": "x", "dtype": "int8"}, "--dtype must be one of"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            ModelSource(**kwargs)
    garbage = tmp_path / "last.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a safe, complete checkpoint") as err:
        load_model(ModelSource(run=str(garbage)))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="neither a run folder"):
        load_model(ModelSource(run=str(tmp_path)))
