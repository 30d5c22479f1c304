"""Issue 32: an attacker holding a private run's folder and its config, but not its key file, cannot
recompute the client sample, DP-SGD's batches or the noise.

The attacker knows the code (every derivation of :mod:`lightning_fed.federation.sampling`,
:mod:`lightning_fed.privacy.secret`, the samplers' tags) and tries every integer it can find as
the seed: those of the config, and every integer in the run folder's checkpoints and JSON files
(``rounds.jsonl``, ``summary.json``), each used directly and as the seed a test run would derive
its secret from. It succeeds when one guess reproduces the run's own draws (known to the test
from the run's objects, never shown to the attacker).

The negative controls break the run on purpose, each as main did before issue 32, and the same
attacker must then succeed: the secret derived from the config's seed, the noise seeds written
into the checkpoint, the client sample drawn from the config's seed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace as Guess

import pytest
import torch
import yaml

from lightning_fed.datamodules.round_sampler import RoundBatchSampler
from lightning_fed.federation.sampling import poisson_sample_clients, sample_clients
from lightning_fed.federation.secret_seed import SecretSeed
from lightning_fed.federation.turn import TurnPlan
from lightning_fed.privacy import ClientLevelDP
from lightning_fed.privacy.dp_sgd import ExampleLevelDP
from lightning_fed.privacy.run import RunPrivacy
from lightning_fed.privacy.secret import RunSecret, seeded_secret
from tests.helpers.flower_sim import ROOT, run_in_process

TINY = {"config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 512}}
LABELS = ("client sampling", "client-level noise", "dp-sgd noise")  # RunPrivacy's uses of the secret
ROUNDS, STEPS = 3, 2


def tiny_private_config(name: str, out: Path) -> Path:
    """``configs/<name>`` on a tiny GPT-2 with 8 clients of 16 examples, 3 rounds of 2 steps."""
    cfg = yaml.safe_load((ROOT / "configs" / name).read_text())
    cfg["model"]["init_args"]["backbone"] = {**TINY, "tokenizer": "bytes"}
    data = cfg["data"]["init_args"]
    data.update(num_clients=8, max_length=512)  # byte tokens
    data["synthetic_args"]["examples_per_client"] = 16
    cfg["federation"].update(rounds=ROUNDS, local_steps=STEPS)
    cfg["trainer"] = {"default_root_dir": str(out), "enable_model_summary": False}
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _ints(obj) -> set[int]:
    if isinstance(obj, dict):
        return {i for x in list(obj.keys()) + list(obj.values()) for i in _ints(x)}
    if isinstance(obj, (list, tuple, set)):
        return {i for x in obj for i in _ints(x)}
    if isinstance(obj, int) and not isinstance(obj, bool):
        return {obj}
    if isinstance(obj, str) and obj.lstrip("-").isdigit():
        return {int(obj)}
    return set()


def _secret_seeds(obj) -> set[SecretSeed]:
    """Every 256-bit hex string in ``obj``, read as a secret seed's material."""
    if isinstance(obj, dict):
        return {i for x in list(obj.keys()) + list(obj.values()) for i in _secret_seeds(x)}
    if isinstance(obj, (list, tuple, set)):
        return {i for x in obj for i in _secret_seeds(x)}
    if isinstance(obj, str) and re.fullmatch(r"[0-9a-f]{64}", obj):
        return {SecretSeed(bytes.fromhex(obj))}
    return set()


def attacker_guesses(run_dir: Path, config: dict) -> dict[str, set]:
    """Every seed the attacker can find or derive: for the sample, the noise and the batches."""
    found, seeds = _ints(config) | {0}, set()
    for path in run_dir.rglob("*"):
        if path.suffix == ".ckpt":
            loaded = torch.load(path, weights_only=True)
            found, seeds = found | _ints(loaded), seeds | _secret_seeds(loaded)
        elif path.suffix == ".json":
            found |= _ints(json.loads(path.read_text()))
        elif path.suffix == ".jsonl":
            found |= {i for line in path.read_text().splitlines() if line.strip() for i in _ints(json.loads(line))}
    derived = {seeded_secret(s).seed(label) for s in found if abs(s) < 2**62 for label in LABELS}
    derived |= {SecretSeed.of_int(s) for s in found} | seeds  # a seed given in the config, or written
    return {"sample": found | derived, "noise": found | derived}


def attack(run_dir: Path, config: dict, truth: dict) -> dict[str, bool]:
    """Which of the sample, the noise and the batches one of the attacker's guesses reproduces."""
    guesses = attacker_guesses(run_dir, config)
    fed, n = config["federation"], config["data"]["init_args"]["num_clients"]

    def sample(seed):
        if fed.get("sampling") == "poisson":
            return [poisson_sample_clients(n, fed["sampling_rate"], seed, r) for r in range(ROUNDS)]
        return [sample_clients(n, fed["clients_per_round"], seed, r) for r in range(ROUNDS)]

    out = {
        "sample": any(sample(s) == truth["sample"] for s in guesses["sample"] if not isinstance(s, int) or s >= 0),
        "noise": bool(guesses["noise"] & truth["noise"]),
    }
    if "batches" in truth:  # round 0, its first client: Poisson from a guessed seed, or shuffled passes
        offsets, sizes, batch, r, client = truth["layout"]
        turn = [TurnPlan(client, STEPS)]
        ints = [s for s in guesses["noise"] if isinstance(s, int) and s >= 0]
        tries = [RoundBatchSampler(turn, offsets, sizes, batch, s, r) for s in ints]
        tries += [  # the module's own derivation of the batches' seed, from each guessed noise seed
            RoundBatchSampler(
                turn,
                offsets,
                sizes,
                batch,
                0,
                r,
                poisson_seed=ExampleLevelDP.poisson_batch_seed(Guess(noise_seed=s), r),
            )
            for s in guesses["noise"]
            if not isinstance(s, int) or s >= 0
        ]
        out["batches"] = any(list(t) == truth["batches"] for t in tries)
    return out


def private_run(name: str, tmp_path: Path) -> tuple[Path, dict, dict]:
    """Run ``name`` small through the CLI; the run folder, the config and the run's own draws."""
    config_path = tiny_private_config(name, tmp_path / name.removesuffix(".yaml"))
    out = tmp_path / name.removesuffix(".yaml")
    loop = run_in_process(str(config_path), out, ["--trainer.logger=true", "--trainer.enable_checkpointing=true"])
    run_dir = out / "lightning_logs" / "version_0"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "rounds.jsonl").is_file()
    truth: dict = {"sample": [loop.server.sample(r) for r in range(ROUNDS)], "noise": set()}
    if isinstance(loop.server.strategy, ClientLevelDP):
        truth["noise"].add(loop.server.strategy.seed)
    module = loop.module
    if isinstance(module, ExampleLevelDP):
        truth["noise"].add(module.noise_seed)
        dm, r = loop.datamodule, 0
        client = truth["sample"][r][0]
        layout = (dm.serving.round_offsets(), dm.client_sizes, dm.batch_size, r, client)
        sampler = RoundBatchSampler(
            [TurnPlan(client, STEPS)], *layout[:3], 0, r, poisson_seed=module.poisson_batch_seed(r)
        )
        truth.update(batches=list(sampler), layout=layout)
    key = loop.server.privacy.key_path
    assert key.is_file() and out not in key.parents  # the key exists, outside the run folder
    return run_dir, yaml.safe_load(config_path.read_text()), truth


@pytest.mark.parametrize("name", ["feddpo_dp.yaml", "fedit_dpsgd.yaml"])
def test_the_run_folder_and_config_give_away_no_sample_batch_or_noise(name, tmp_path):
    run_dir, config, truth = private_run(name, tmp_path)
    found = attack(run_dir, config, truth)
    assert not any(found.values()), found


def _secret_from_the_config(monkeypatch):
    monkeypatch.setattr(RunSecret, "fresh", classmethod(lambda cls: seeded_secret(0)))  # seed_everything: 0


def _noise_seeds_in_the_checkpoint(monkeypatch):
    plain_dp = ClientLevelDP.state_dict
    monkeypatch.setattr(ClientLevelDP, "state_dict", lambda self: {**plain_dp(self), "seed": _written(self.seed)})

    def save(self, checkpoint):
        super(ExampleLevelDP, self).on_save_checkpoint(checkpoint)
        checkpoint["dp_sgd_noise_seed"] = _written(self.noise_seed)

    monkeypatch.setattr(ExampleLevelDP, "on_save_checkpoint", save, raising=False)


def _written(seed):
    """A seed as a broken run would write it into a checkpoint: its material in hex."""
    return seed._material.hex() if isinstance(seed, SecretSeed) else seed


def _sample_from_the_config(monkeypatch):
    monkeypatch.setattr(RunPrivacy, "sampling_seed", property(lambda self: None))


@pytest.mark.parametrize(
    ("name", "broken", "broken_parts"),
    [
        ("fedit_dpsgd.yaml", _secret_from_the_config, {"sample", "noise", "batches"}),
        ("feddpo_dp.yaml", _noise_seeds_in_the_checkpoint, {"noise"}),
        ("fedit_dpsgd.yaml", _noise_seeds_in_the_checkpoint, {"noise", "batches"}),
        ("feddpo_dp.yaml", _sample_from_the_config, {"sample"}),
    ],
    ids=["secret-from-config", "noise-seed-in-checkpoint-client", "noise-seed-in-checkpoint-dpsgd", "public-sample"],
)
def test_the_attacker_breaks_each_deliberately_broken_run(name, broken, broken_parts, tmp_path, monkeypatch):
    """Negative controls: the check above can fail."""
    broken(monkeypatch)
    run_dir, config, truth = private_run(name, tmp_path)
    found = attack(run_dir, config, truth)
    assert {part for part, hit in found.items() if hit} == broken_parts, found
