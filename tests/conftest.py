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
