"""A private run's secret randomness (issue 32, items 1 and 2): the client sample, DP-SGD's batches
and every noise draw come from a secret that is in no checkpoint, report or log, only in the
run's 0600 key file; a resume with the key repeats the uninterrupted run, one without it goes on
with fresh randomness and says so."""

import json
import os
import stat

import pytest
import torch

import lightning_fed.federation.run_key_file as run_key_file
from lightning_fed.callbacks import FederatedLoop
from lightning_fed.errors import CheckpointError
from lightning_fed.federation.run_key_file import key_dir, key_file
from lightning_fed.federation.secret_seed import SecretSeed
from lightning_fed.privacy import ClientLevelDP, PrivacyConfig
from lightning_fed.privacy.secret import RunKey, RunSecret
from lightning_fed.strategies import FedAvg
from tests.helpers.flower_sim import assert_same_state
from tests.helpers.runs import fit, preference_data

KEY_A, KEY_B = bytes(range(32)), bytes(range(1, 33))


def test_key_file_is_0600_in_a_0700_key_store_and_reads_back(key_store):
    old = os.umask(0)  # even a permissive umask leaves the file and the store to their owner
    try:
        key = RunKey(RunSecret(KEY_A))
        key.attach()
        key.save()
    finally:
        os.umask(old)
    assert key.path == key_store / f"{key.run_id}.key" == key_file(key.run_id)
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_store.stat().st_mode) == 0o700
    assert RunSecret.read(key.path) == RunSecret(KEY_A)
    assert KEY_A.hex() not in repr(RunSecret(KEY_A)) and KEY_A.hex() not in repr(RunSecret(KEY_A).seed("x"))
    seeds = [RunSecret(KEY_A).seed(label, r) for label in ("client sampling", "dp-sgd noise") for r in range(3)]
    assert len(set(seeds)) == 6 and all(isinstance(s, SecretSeed) for s in seeds)
    assert RunSecret(KEY_A).seed("x") != RunSecret(KEY_B).seed("x")
    # the checkpoint keeps the run id and a fingerprint, nothing of the key
    state = key.state_dict()
    assert state == {"id": key.run_id, "fingerprint": RunSecret(KEY_A).fingerprint()}
    assert RunSecret(KEY_A).fingerprint() != RunSecret(KEY_B).fingerprint()


def test_key_store_location_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTNING_FED_KEY_DIR", str(tmp_path / "k"))
    assert key_dir() == tmp_path / "k"
    monkeypatch.delenv("LIGHTNING_FED_KEY_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert key_dir() == tmp_path / "data" / "lightning-fed" / "keys"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert key_dir() == tmp_path / "home" / ".local" / "share" / "lightning-fed" / "keys"


def _module():
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, LoraSettings
    from lightning_fed.privacy import DPDPOModule, DPSGDSettings
    from tests.helpers.runs import TINY_GPT2

    pl.seed_everything(0, verbose=False)
    return DPDPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=0.1,
        optimizer="sgd",
        dp_sgd=DPSGDSettings(clip_norm=0.1, noise_multiplier=1.0),  # seed=None: from the run's secret
    )


def _loop(rounds):
    """Client-level DP (Poisson, q = 0.5) around FedAvg, DP-SGD inside: every secret draw in one run."""
    dp = ClientLevelDP(FedAvg(), clip_norm=0.5)
    privacy = PrivacyConfig(noise_multiplier=1.0, delta=1e-5)
    return FederatedLoop(
        rounds=rounds, local_steps=2, sampling="poisson", sampling_rate=0.5, strategy=dp, privacy=privacy, seed=0
    )


def _run(tmp_path, name, rounds, key, monkeypatch, ckpt=None):
    monkeypatch.setattr(run_key_file.secrets, "token_bytes", lambda n: key)  # the process's OS entropy
    loop = _loop(rounds)
    fit(_module(), preference_data(), loop, str(tmp_path / name), ckpt_path=ckpt)
    return loop


def _leaves(obj):
    if isinstance(obj, dict):
        return [v for x in list(obj.keys()) + list(obj.values()) for v in _leaves(x)]
    if isinstance(obj, (list, tuple)):
        return [v for x in obj for v in _leaves(x)]
    return [obj]


def _key_of(loop):
    return loop.server.privacy.key


def test_resume_with_the_key_is_the_uninterrupted_run_and_the_folder_holds_no_secret(tmp_path, monkeypatch, key_store):
    straight = _run(tmp_path, "straight", 3, KEY_A, monkeypatch)
    first = _run(tmp_path, "first", 2, KEY_A, monkeypatch)
    key = _key_of(first).path
    assert key.parent == key_store and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert RunSecret.read(key) == RunSecret(KEY_A)
    assert not [p for p in tmp_path.rglob("*.key")]  # no key file in or next to any run folder
    # nothing in the run folder (checkpoint, rounds.jsonl, summary) holds the key or a seed derived from it
    privacy = first.server.privacy
    dp, module = first.server.strategy, privacy._module
    seeds = [privacy.sampling_seed, dp.seed, module.noise_seed, module.poisson_batch_seed(0)]
    needles = [KEY_A.hex().encode(), KEY_A] + [m for s in seeds for m in (s._material, s._material.hex().encode())]
    for path in (tmp_path / "first").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [n for n in needles if n in data], path
    ckpt = tmp_path / "first" / "ckpt" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)["federation"]["privacy"]["run_key"]
    assert state == {"id": _key_of(first).run_id, "fingerprint": RunSecret(KEY_A).fingerprint()}
    # a new process (another OS secret) resumed from the checkpoint finds the key in the key store
    resumed = _run(tmp_path, "resumed", 3, KEY_B, monkeypatch, ckpt=str(ckpt))
    assert _key_of(resumed).path == key and _key_of(resumed).secret == RunSecret(KEY_A)
    assert_same_state(resumed.server.global_state, straight.server.global_state)
    assert [resumed.server.sample(r) for r in range(3)] == [straight.server.sample(r) for r in range(3)]


def test_resume_without_the_key_warns_once_and_draws_fresh_randomness(tmp_path, monkeypatch):
    straight = _run(tmp_path, "straight", 3, KEY_A, monkeypatch)
    first = _run(tmp_path, "first", 2, KEY_A, monkeypatch)
    lost = _key_of(first).path
    lost.unlink()
    ckpt = str(tmp_path / "first" / "ckpt" / "last.ckpt")
    with pytest.warns(UserWarning, match="resuming a private run without its key file") as caught:
        resumed = _run(tmp_path, "lost", 3, KEY_B, monkeypatch, ckpt=ckpt)
    messages = [str(w.message) for w in caught if "key file" in str(w.message)]
    assert len(messages) == 1 and str(lost) in messages[0]
    assert len(resumed.server.report.history) == 3
    with pytest.raises(AssertionError):  # round 3 drew other noise (and sample, and batches)
        assert_same_state(resumed.server.global_state, straight.server.global_state)
    new = _key_of(resumed)
    assert new.run_id != _key_of(first).run_id and str(new.path) in messages[0]
    assert RunSecret.read(new.path) == RunSecret(KEY_B)  # its own key, for a later resume


def test_resume_with_another_runs_key_is_refused_naming_the_key_file(tmp_path, monkeypatch):
    first = _run(tmp_path, "first", 2, KEY_A, monkeypatch)
    key = _key_of(first).path
    RunSecret(KEY_B).write(key)  # a valid key, but not this run's
    with pytest.raises(CheckpointError, match=f"^{key}: not the key of the run that wrote this checkpoint"):
        _run(tmp_path, "swapped", 3, KEY_B, monkeypatch, ckpt=str(tmp_path / "first" / "ckpt" / "last.ckpt"))


def test_a_private_run_writes_no_client_list(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import TensorBoardLogger

    monkeypatch.setattr(run_key_file.secrets, "token_bytes", lambda n: KEY_A)
    loop = _loop(2)
    logger = TensorBoardLogger(str(tmp_path), name="tb", version=0)
    fit(_module(), preference_data(), loop, str(tmp_path / "run"), logger=logger)
    run = tmp_path / "tb" / "version_0"
    lines = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    for record in lines + summary["rounds"]:
        assert record["sample"] == "withheld"
        assert not {"clients", "aggregated", "failed", "rejected"} & record.keys()


@pytest.mark.parametrize("private", [False, True])
def test_the_progress_bar_names_the_client_only_outside_a_private_run(private, monkeypatch):
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import TQDMProgressBar

    from lightning_fed.callbacks.progress import FederatedProgressBar

    monkeypatch.setattr(TQDMProgressBar, "get_metrics", lambda self, trainer, module: {})
    bar = FederatedProgressBar()
    loop = SimpleNamespace(turn=SimpleNamespace(client_id=5, private=private), turn_progress=lambda i: (i, 4))
    monkeypatch.setattr(bar, "_loop", lambda trainer: loop)
    trainer = SimpleNamespace(
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_idx=2)), accumulate_grad_batches=1
    )
    metrics = bar.get_metrics(trainer, SimpleNamespace(accumulate_grad_batches=1))
    assert ("client" in metrics) is not private and metrics["local_step"] == 3
