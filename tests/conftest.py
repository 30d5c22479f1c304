"""Shared test fixtures: offline, tiny models built from a config, fast."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two xdist workers on a 2-core machine: one intra-op thread each (set before
    # torch is imported, and inherited by the CLI subprocesses) instead of 2 x 2 threads fighting.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402

TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}


@pytest.fixture
def tiny_backbone():
    from lightning_fed.modules import BackboneConfig

    return BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes")


@pytest.fixture(autouse=True)
def key_store(tmp_path_factory, monkeypatch):
    """Private runs keep their key files in a temporary key store, never in the real home
    (``LIGHTNING_FED_KEY_DIR``, inherited by the CLI subprocesses a test starts)."""
    folder = tmp_path_factory.mktemp("keys") / "lightning-fed-keys"
    monkeypatch.setenv("LIGHTNING_FED_KEY_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def same_global_state(monkeypatch):
    """Every test starts from the same global state, whatever ran before it in its worker.

    ``seed_everything`` exports ``PL_GLOBAL_SEED``, and ``data.seed`` / ``federation.seed`` left
    unset read it: without this, a test's partition and client sampling depended on the seed of
    the test that ran before it (test order under xdist). The global RNGs and the intra-op
    thread count are reset for the same reason.
    """
    import random

    import numpy as np
    import torch

    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
