"""Checkpoints handed to ``fit``/``validate``/``test`` as a process: a malformed file, another
model's weights or a missing test set is exit 2 with one ``error:`` line naming what to fix,
before anything is written (issue 22, items 6 and 8)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers.cli import lightning_fed
from tests.helpers.tiny_run import CHECKPOINT, tiny_run

ROOT = Path(__file__).resolve().parents[1]

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _cli(sub: str, root: Path, *extra: str) -> subprocess.CompletedProcess:
    return lightning_fed(sub, "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", *QUIET, *extra)


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A checkpoint of configs/tiny.yaml after one round of one step (trained once per session; read only)."""
    return tiny_run(tmp_path_factory) / CHECKPOINT


def _crafted(tmp_path: Path, ckpt: dict) -> Path:
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    return path


def test_a_checkpoint_with_only_a_state_dict_is_refused_before_the_run_folder(tmp_path):
    path = _crafted(tmp_path, {"state_dict": {}})
    proc = _cli("fit", tmp_path / "run", f"--ckpt_path={path}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [
        f"error: ckpt_path {str(path)!r}: not a Lightning checkpoint this run can load:"
        " 'pytorch-lightning_version' is None, expected a version string"
    ]
    assert not (tmp_path / "run").exists()


def _no_loops(ckpt: dict) -> dict:
    del ckpt["loops"]
    return {}


def _another_shape(ckpt: dict) -> dict:
    ckpt.pop("federation")  # no stored config: the weights themselves are compared
    key = next(k for k in ckpt["state_dict"] if k.endswith("lora_A.default.weight"))
    ckpt["state_dict"][key] = torch.zeros(8, 32)
    return {"key": key}


def _float32_reference_cache(ckpt: dict) -> dict:
    ckpt["reference_cache"]["values"] = ckpt["reference_cache"]["values"].float()  # served as if exact doubles
    return {"n": ckpt["reference_cache"]["keys"].shape[0]}


def _global_state_a_string(ckpt: dict) -> dict:
    ckpt["federation"]["global_state"] = "x"  # was AttributeError, exit 1
    return {}


def _edited_seed(ckpt: dict) -> dict:
    """The loop restores its seed from the checkpoint and samples every round's clients with it: an
    edited one used to be accepted (exit 0, round 2 sampled other clients) (issue 41, red team)."""
    ckpt["callbacks"]["FederatedLoop"]["seed"] = 12345
    return {}


RESUME = ("fit", "--federation.rounds=2")
CRAFTED_CASES = {
    "no_loops": (
        _no_loops,
        RESUME,
        "not a Lightning checkpoint this run can load: no 'loops' (a fit resumes from what Lightning saved with it)",
    ),
    "weights_of_another_shape": (
        _another_shape,
        ("validate",),
        "state_dict {key!r} has shape (8, 32), the model's is (4, 32); use a checkpoint of this config's model",
    ),
    "float32_reference_cache": (
        _float32_reference_cache,
        RESUME,
        "reference_cache.values must be a float64 tensor of shape ({n}, 2), got float32 of shape ({n}, 2)",
    ),
    "global_state_not_a_mapping": (
        _global_state_a_string,
        ("validate",),
        "federation.global_state is a str, expected a mapping of names to tensors; use a checkpoint of this"
        " config's model",
    ),
    "edited_seed": (
        _edited_seed,
        (*RESUME, "--federation.local_steps=1"),
        "callbacks.FederatedLoop.seed is 12345, but this run's federation seed is 0 (it samples every round's clients)",
    ),
}


@pytest.mark.parametrize("case", list(CRAFTED_CASES))
def test_a_crafted_checkpoint_is_refused_before_the_run_folder(tmp_path, trained, case):
    edit, (sub, *extra), problem = CRAFTED_CASES[case]
    ckpt = torch.load(trained, weights_only=True)
    fields = edit(ckpt)
    path = _crafted(tmp_path, ckpt)
    proc = _cli(sub, tmp_path / "run", f"--ckpt_path={path}", *extra)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: ckpt_path {str(path)!r}: {problem.format(**fields)}"]
    assert not (tmp_path / "run").exists()


def test_validate_compares_the_model_config_with_the_checkpoints(tmp_path, trained):
    proc = _cli("validate", tmp_path / "run", f"--ckpt_path={trained}", "--model.init_args.lora.r=8")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [
        f"error: ckpt_path {str(trained)!r} holds the weights of another model: model.lora.r: 4 -> 8;"
        " evaluate it with the config it was trained with"
    ]
    assert not (tmp_path / "run").exists()


def test_validate_at_another_beta_scores_the_checkpoint(tmp_path, trained):
    """Red team 11 row 9 (val_hpc_beta): DPO's ``beta`` is a loss setting, no weight; trust_boundary.md holds
    ``validate``/``test`` to the module class, backbone and LoRA layout only. On 628d0d2 refused: ``holds the
    weights of another model: model.beta: 0.5 -> 5.0`` (exit 2). The run folder is a copy: validate writes
    its results there."""
    root = tmp_path / "copy"
    shutil.copytree(trained.parents[3], root)
    ckpt = root / trained.relative_to(trained.parents[3])
    proc = _cli("validate", root, f"--ckpt_path={ckpt}", "--model.init_args.beta=5.0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _errors(proc) == []


def test_validate_with_another_lora_layout_is_refused_before_torch(tmp_path, trained):
    """The layout keys stay compared (lightning_fed/config_changes.py weight_changes), before torch."""
    from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

    (tmp_path / "cwd").mkdir()
    proc = lightning_fed_without_torch(
        "validate",
        "--config",
        "tiny",
        f"--ckpt_path={trained}",
        "--model.init_args.beta=5.0",
        "--model.init_args.lora.r=2",
        cwd=tmp_path / "cwd",
        hook=tmp_path / "hook",
    )
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: ckpt_path {str(trained)!r} holds the weights of another model: model.lora.r: 4 -> 2;"
        " evaluate it with the config it was trained with\n",
    )
    assert list((tmp_path / "cwd").iterdir()) == []


def test_test_without_a_test_set_writes_nothing(tmp_path, trained):
    proc = _cli("test", tmp_path / "run", f"--ckpt_path={trained}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [
        "error: data.test_dataset is not set: `test` scores a separate test set;"
        " pass --data.init_args.test_dataset=<file>"
    ]
    assert not (tmp_path / "run").exists()


def _lora_key(state: dict, part: str = "lora_B") -> str:
    return next(k for k in state if f"{part}.default.weight" in k)


GLOBAL_STATE_CASES = {  # issue 34 item 1: each was exit 0 (off by 0.0141), or exit 1 after a round was written
    "deleted": (lambda g, k: g.pop(k), "{key!r} is missing"),
    "nan": (lambda g, k: g[k].fill_(float("nan")), "{key!r} has NaN or infinite values"),
    "reshaped": (lambda g, k: g.__setitem__(k, torch.zeros(4, 4)), "{key!r} has shape (4, 4), the model's is (96, 4)"),
    "retyped": (lambda g, k: g.__setitem__(k, g[k].double()), "{key!r} is float64, the model's is float32"),
    "added": (lambda g, k: g.__setitem__("model.x.lora_A.default.weight", torch.zeros(1)), ""),
}


@pytest.mark.parametrize("case", list(GLOBAL_STATE_CASES))
def test_a_corrupt_global_state_is_refused_before_the_run_folder(tmp_path, trained, case):
    change, problem = GLOBAL_STATE_CASES[case]
    ckpt = torch.load(trained, weights_only=True)
    key = _lora_key(ckpt["federation"]["global_state"])
    change(ckpt["federation"]["global_state"], key)
    if case == "added":
        problem = "'model.x.lora_A.default.weight' is not a shared parameter of this model"
    path = _crafted(tmp_path, ckpt)
    proc = _cli("fit", tmp_path / "run", f"--ckpt_path={path}", "--federation.rounds=2", "--federation.local_steps=1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [
        f"error: ckpt_path {str(path)!r}: federation.global_state {problem.format(key=key)};"
        " use a checkpoint of this config's model"
    ]
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ issue 41 item 2: before torch
def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


RESUME_CHANGES = {
    "strategy": (
        ["--federation.strategy=FedProx"],
        "federation.strategy: 'lightning_fed.strategies.FedAvg' -> 'lightning_fed.strategies.FedProx'",
    ),
    "lora_r": (["--model.init_args.lora.r=8"], "model.lora.r: 4 -> 8"),
    # red team 11 row 12's neighbours, late (or never refused) on 628d0d2: an option set where the run had none
    "target_modules": (
        ["--model.init_args.lora.target_modules=[c_attn]"],
        "model.lora.target_modules: None -> ['c_attn']",
    ),
    "field_map": (
        ["--data.init_args.field_map={chosen: rejected, rejected: chosen}"],
        "data.field_map: None -> {'chosen': 'rejected', 'rejected': 'chosen'}",
    ),
    "deterministic": (["--trainer.deterministic=true"], "trainer.deterministic: None -> True"),
    "data_seed": (["--data.init_args.seed=5"], "data.seed: 0 -> 5"),
    "two_keys": (
        ["--model.init_args.lr=1e-2", "--data.init_args.num_clients=5"],
        "data.num_clients: 4 -> 5 (and 1 more: model.lr)",
    ),
}


def _resume_without_torch(tmp_path: Path, trained: Path, *extra: str, rounds: int = 2):
    """``fit --config tiny EXTRA`` resuming ``trained`` in its own ``default_root_dir`` (one local step,
    ``rounds`` rounds), from an empty folder, in a child whose ``import torch`` fails."""
    from tests.helpers.cli import lightning_fed_without_torch

    (tmp_path / "cwd").mkdir()
    return lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        *extra,
        f"--trainer.default_root_dir={trained.parents[3]}",
        "--federation.local_steps=1",
        f"--federation.rounds={rounds}",
        f"--ckpt_path={trained}",
        cwd=tmp_path / "cwd",
        hook=tmp_path / "hook",
    )


def _assert_refused_before_torch(proc, tmp_path: Path, trained: Path, before: dict, change: str, named: str = ""):
    """The live CLI's line for a changed config, printed before torch; the run folder byte for byte as it
    was; nothing written where the command ran."""
    from tests.helpers.cli import REACHED_TORCH

    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: {named}ckpt_path {str(trained)!r} was written by a run with another config: {change}; resume"
        " with the run's own config, or start a new run without --ckpt_path\n",
    )
    assert _files(trained.parents[3]) == before
    assert list((tmp_path / "cwd").iterdir()) == []


@pytest.mark.parametrize("case", list(RESUME_CHANGES))
def test_a_resume_with_a_changed_config_is_refused_before_torch(tmp_path, trained, case):
    """The run folder's config.yaml against the merged new config (lightning_fed/resume_precheck.py):
    the live CLI's line, in a child whose ``import torch`` fails; the run folder byte for byte as it
    was. On baaf8e7: refused only after the imports and the model's build (10-15 s of CPU)."""
    extra, change = RESUME_CHANGES[case]
    before = _files(trained.parents[3])
    proc = _resume_without_torch(tmp_path, trained, *extra)
    _assert_refused_before_torch(proc, tmp_path, trained, before, change)


LR_HOOK = "[{'class_path': 'lightning_fed.callbacks.RoundLRSchedule', 'init_args': {'schedule': 'cosine'}}]"


@pytest.mark.parametrize("given", ["file", "command_line"])
def test_a_resume_adding_a_round_hook_is_refused_before_torch(tmp_path, trained, given):
    """Red team 11 row 12 (res_hook): a resume adding ``federation.hooks`` (a RoundLRSchedule from a second
    YAML) was refused only after torch and the model's build (11 s of CPU), naming no file, while
    ``model.lr`` from the same kind of file was refused before torch naming it. Seen failing on 628d0d2
    (the line came from the live CLI: torch reached)."""
    before = _files(trained.parents[3])
    hooks = tmp_path / "hooks.yaml"
    hooks.write_text(
        "federation:\n  hooks:\n    - class_path: lightning_fed.callbacks.RoundLRSchedule\n"
        "      init_args: {schedule: cosine}\n"
    )
    extra = ["--config", str(hooks)] if given == "file" else [f"--federation.hooks={LR_HOOK}"]
    proc = _resume_without_torch(tmp_path, trained, *extra)
    named = f"config {str(hooks)!r}: " if given == "file" else ""
    change = "federation.hooks: None -> ['lightning_fed.callbacks.RoundLRSchedule']"  # the classes (red team 14 L9)
    _assert_refused_before_torch(proc, tmp_path, trained, before, change, named)


def test_a_resume_with_the_run_s_config_goes_on_to_the_checkpoint(tmp_path, trained):
    """Same values written otherwise (a short class name, 5e-3 for 0.005, more rounds): not refused here."""
    from tests.helpers.cli import REACHED_TORCH

    proc = _resume_without_torch(
        tmp_path, trained, "--federation.strategy=FedAvg", "--model.init_args.lr=5e-3", rounds=3
    )
    assert REACHED_TORCH in proc.stderr, proc.stderr


MID_ROUND = ["--federation.rounds=2", "--federation.local_steps=2", "--federation.batch_clients=2"]


@pytest.fixture(scope="module")
def mid_round(tmp_path_factory) -> Path:
    """A checkpoint a ``ModelCheckpoint`` of the user's saved every step: after the first of round 1's two
    steps (clients trained together, ``batch_clients`` 2: its weights are stacked, one per client)."""
    tmp_path = tmp_path_factory.mktemp("mid_round")
    steps = tmp_path / "steps.yaml"
    checkpoint = {"dirpath": str(tmp_path / "mid"), "every_n_train_steps": 1, "save_top_k": -1, "filename": "s{step}"}
    callback = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": checkpoint}
    steps.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    trained = _cli("fit", tmp_path / "a", "--config", str(steps), *MID_ROUND)
    assert trained.returncode == 0, trained.stderr[-3000:]
    return tmp_path / "mid" / "sstep=1.ckpt"


MID_ROUND_ADVICE = {
    "fit": "a federated run cannot go on from it; resume from",
    "validate": "it holds no model a round ended with; validate",
    "test": "it holds no model a round ended with; test",
}


@pytest.mark.parametrize("stage", list(MID_ROUND_ADVICE))
def test_a_checkpoint_saved_inside_a_round_is_refused_before_torch(tmp_path, mid_round, stage):
    """Issue 41 item 4: a ``ModelCheckpoint`` of the user's saving every step writes checkpoints inside a
    round; with clients trained together (``federation.batch_clients`` 2) resuming one was refused after
    the imports on a stacked Adam moment's shape (a8354b9: ``optimizer_states[0].state[0].exp_avg has
    shape (2, 4, 32), its parameter's is (4, 32)``, 13 s of CPU), and one clients trained one after
    another would go on from part of a round. Refused before torch for what it is, nothing written.
    ``validate`` and ``test`` name the same cause (issue 41, red team; on 3df2116: ``state_dict '...' has
    shape (2, 4, 32), the model's is (4, 32) (and 15 more problems); use a checkpoint of this config's
    model``, and with clients trained one after another, exit 0 on the round's starting state)."""
    from tests.helpers.cli import heavy_blocked_env

    env = heavy_blocked_env(tmp_path / "blocked")  # Lightning and transformers unimportable (torch reads the file)
    shutil.rmtree(tmp_path / "blocked" / "torch")
    rows = tmp_path / "test.jsonl"  # `test` needs a test set (refused before otherwise)
    rows.write_text('{"prompt": "p", "chosen": "a", "rejected": "b", "client_id": 0}\n')
    given = [f"--data.init_args.test_dataset={rows}"] if stage == "test" else []
    before = sorted(p.relative_to(mid_round.parents[1]) for p in mid_round.parents[1].rglob("*"))
    proc = lightning_fed(
        stage,
        "--config",
        "configs/tiny.yaml",
        f"--trainer.default_root_dir={tmp_path / 'b'}",
        *MID_ROUND,
        *given,
        f"--ckpt_path={mid_round}",
        env=env,
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: ckpt_path {str(mid_round)!r}: loops.fit_loop.epoch_loop.batch_progress says it was saved inside"
        " round 1, after 1 of its batches: the updates of an unfinished round are in no checkpoint, so"
        f" {MID_ROUND_ADVICE[stage]} a checkpoint saved at a round's end (a run's checkpoints/last.ckpt)\n",
    )
    assert sorted(p.relative_to(mid_round.parents[1]) for p in mid_round.parents[1].rglob("*")) == before
    assert not (tmp_path / "b").exists()
