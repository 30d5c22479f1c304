"""What ``evaluate --run`` and ``selector.path`` load is checked like what ``fit`` resumes from
(issue 34 items 2 and 3): a checkpoint's LoRA weights, an adapter folder's and a selector's must
be exactly the model's (no key missing, none unknown, each of its shape and dtype, finite), else
exit 2 with one line naming the file and the key, before anything is written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from tests.evaluation.eval_runs import make_run
from tests.helpers.cli import lightning_fed

ROOT = Path(__file__).resolve().parents[2]

PROG = "error:"
BENCH = ["--benchmarks", "[lm_eval]", "--lm_eval.tasks", "[lf_arithmetic_mc]", "--lm_eval.limit", "1"]
HINT = "; evaluate a checkpoint of the run whose config.yaml is beside it"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return lightning_fed(*args)


def _errors(proc: subprocess.CompletedProcess, prefix: str) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith(prefix)]


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evaluate") / "version_0"
    make_run(root)
    return root


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "version_0"
    shutil.copytree(run, copy)
    return copy


def _evaluate_refuses(copy: Path, target: Path, line: str) -> None:
    before = _listing(copy)
    proc = _cli("evaluate", "--run", str(target), *BENCH)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc, PROG) == [f"{PROG} {line}"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert _listing(copy) == before  # no eval_results.json, no events file


def _global_key(ckpt: dict, part: str = "lora_B") -> str:
    return next(k for k in ckpt["federation"]["global_state"] if f"{part}.default.weight" in k)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda g, k: g.pop(k), "{key!r} is missing"),  # was exit 0, the tensor at its random start
        (lambda g, k: g.__setitem__(k, torch.zeros(99, 4)), "{key!r} has shape (99, 4), the model's is (96, 4)"),
        (lambda g, k: g.__setitem__(k, g[k].half()), "{key!r} is float16, the model's is float32"),
    ],
    ids=["missing", "wrong_shape", "retyped"],
)
def test_evaluate_refuses_a_global_state_that_is_not_the_models(run, tmp_path, change, problem):
    copy = _copy(run, tmp_path)
    path = copy / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    key = _global_key(ckpt)
    change(ckpt["federation"]["global_state"], key)
    torch.save(ckpt, path)
    _evaluate_refuses(copy, path, f"--run {str(path)!r}: federation.global_state {problem.format(key=key)}{HINT}")


def test_evaluate_refuses_a_state_dict_of_another_lora_layout(run, tmp_path):
    """Only ``state_dict`` (no hyper-parameters, no federation) and a config.yaml with another
    LoRA r: was exit 1, "size mismatch", naming no file."""
    copy = _copy(run, tmp_path)
    path = copy / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    torch.save({"state_dict": ckpt["federation"]["global_state"]}, path)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["model"]["init_args"]["lora"]["r"] = 8
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    key = _global_key(ckpt, "lora_A")
    _evaluate_refuses(
        copy,
        path,
        f"--run {str(path)!r}: state_dict {key!r} has shape (4, 32), the model's is (8, 32) (and 15 more problems)"
        + HINT,
    )


def test_a_checkpoint_with_only_its_state_dict_gives_the_same_model(run, tmp_path):
    """The LoRA layout and seed of a checkpoint without hyper-parameters come from the run's
    config.yaml (they fell back to the default r): the model equals the full checkpoint's."""
    from lightning_fed.evaluation.run_model import ModelSource, load_model

    copy = _copy(run, tmp_path)
    path = copy / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    torch.save({"state_dict": ckpt["federation"]["global_state"]}, path)
    full = load_model(ModelSource(run=str(run / "checkpoints" / "last.ckpt"))).model.state_dict()
    bare = load_model(ModelSource(run=str(path))).model.state_dict()
    assert full.keys() == bare.keys() and all(torch.equal(full[k], bare[k]) for k in full)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda t, k: t.pop(k), "{key!r} is missing"),
        (
            lambda t, k: t.__setitem__("base_model.model.transformer.h.7.attn.c_attn.lora_A.weight", t[k][:4].clone()),
            "'base_model.model.transformer.h.7.attn.c_attn.lora_A.weight' is not a weight of this model's adapter",
        ),
    ],
    ids=["missing", "no_such_layer"],
)
def test_evaluate_refuses_an_adapter_with_a_tensor_missing_or_extra(run, tmp_path, change, problem):
    """Both were exit 0: PEFT warns about a missing tensor (left at its start) and ignores one for a
    layer the model does not have."""
    copy = _copy(run, tmp_path)
    weights = copy / "adapter" / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    key = next(k for k in sorted(tensors) if ".lora_B." in k)
    change(tensors, key)
    save_file(tensors, str(weights))
    _evaluate_refuses(copy, copy, f"--run {str(weights)!r}: {problem.format(key=key)}")


@pytest.fixture(scope="module")
def selector_adapter(tmp_path_factory) -> Path:
    """A selector adapter folder as a selector run leaves it (config.yaml beside it)."""
    from lightning_fed.modules.backbone import BackboneConfig
    from lightning_fed.modules.lora import LoraSettings
    from lightning_fed.modules.selector import BinarySelectorModule
    from tests.helpers.runs import TINY_GPT2

    run = tmp_path_factory.mktemp("selector_run")
    backbone = {"config": dict(TINY_GPT2), "tokenizer": "bytes"}
    BinarySelectorModule(BackboneConfig(**backbone), lora=LoraSettings(r=4, alpha=8, dropout=0.0)).save_adapter(
        run / "adapter"
    )
    (run / "config.yaml").write_text(
        yaml.safe_dump({"seed_everything": 0, "model": {"init_args": {"backbone": backbone}}})
    )
    return run / "adapter"


def test_a_selector_adapter_with_a_tensor_missing_is_refused_before_the_run_folder(selector_adapter, tmp_path):
    """Was exit 0 although docs/trust_boundary.md promised keys and shapes are checked."""
    folder = tmp_path / "selector" / "adapter"
    shutil.copytree(selector_adapter.parent, folder.parent)
    weights = folder / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    key = next(k for k in sorted(tensors) if ".lora_A." in k)
    del tensors[key]
    save_file(tensors, str(weights))
    root = tmp_path / "run"
    proc = _cli(
        "fit",
        "--config",
        "configs/fedbis_rlft.yaml",
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        f"--data.init_args.selector.path={folder}",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc, "error:") == [f"error: selector.path {str(weights)!r}: {key!r} is missing"], proc.stderr[
        -3000:
    ]
    assert not root.exists()
