"""``batch_clients: auto`` on a CPU: K stops where a group step's widest activation passes glibc's
largest ``mmap`` threshold (32 MiB), above which its pages fault in on every step (issue 43: at the
long prompt K = 4 took 12 s of system time and was slower than the clients one after another)."""

import pytest
import yaml

from lightning_fed.planning.estimate import ModelShape, PlanInputs
from lightning_fed.planning.group import (
    CPU_GROUP_CAP,
    MMAP_THRESHOLD_MAX,
    cpu_group_cap,
    inputs_from_module,
    run_group_size,
)
from tests.planning.tiny_llama import TINY_RUNNABLE


def shape(hidden: int, intermediate: int) -> ModelShape:
    return ModelShape("llama", 49152, hidden, intermediate, 30, {}, 0, 0, 0)


SMOLLM2 = shape(576, 1536)  # SmolLM2-135M: hidden 576, MLP 1536


def test_the_cap_by_hand():
    assert MMAP_THRESHOLD_MAX == 32 * 2**20 and CPU_GROUP_CAP == 4
    # feddpo.yaml: 4 pairs x 128 tokens x 2 rows x 1536 x 4 B = 6 MiB a client: 32 // 6 = 5, then the cap's 4
    assert cpu_group_cap(SMOLLM2, PlanInputs(batch_size=4, max_length=128)) == 4
    # the long prompt (rows of 320): 4 x 320 x 2 x 1536 x 4 B = 15 MiB a client: 2 (30 MiB), not 3 (45 MiB)
    assert cpu_group_cap(SMOLLM2, PlanInputs(batch_size=4, max_length=320)) == 2
    # the same in bfloat16 (7.5 MiB), or as SFT (one row copy: 7.5 MiB): 4
    assert cpu_group_cap(SMOLLM2, PlanInputs(batch_size=4, max_length=320, dtype="bfloat16")) == 4
    assert cpu_group_cap(SMOLLM2, PlanInputs(batch_size=4, max_length=320, objective="sft")) == 4
    # at the threshold exactly: 4 x 256 x 2 x 2048 x 4 B = 16 MiB a client: 2 clients fill 32 MiB
    assert cpu_group_cap(shape(576, 2048), PlanInputs(batch_size=4, max_length=256)) == 2
    assert cpu_group_cap(shape(576, 2048), PlanInputs(batch_size=4, max_length=257)) == 1  # 16.06 MiB
    # the wider of hidden and MLP: a model whose hidden is the wider (8192 > 1024) is counted on it
    assert cpu_group_cap(shape(8192, 1024), PlanInputs(batch_size=1, max_length=256)) == 2  # 16 MiB
    # one client over the threshold (fedbis_tldr.yaml: Qwen2-0.5B's MLP 4864, 32 pairs x 1024): 1
    assert cpu_group_cap(shape(896, 4864), PlanInputs(batch_size=32, max_length=1024)) == 1


def test_auto_of_a_built_run_stops_at_the_activation_cap(monkeypatch):
    """A built run with plenty of memory: 4 clients at 160 tokens, 3 when each client's step holds 64
    pairs (tiny GPT-2's MLP 128 wide: 64 x 160 x 2 x 128 x 4 B = 10 MiB a client, 3 in 32 MiB)."""
    from tests.helpers.runs import preference_data, tiny_dpo

    monkeypatch.setattr("lightning_fed.planning.group.memory_budget", lambda device: 1 << 50)
    module = tiny_dpo(r=4)
    shape_, p = inputs_from_module(module, preference_data(batch_size=64))
    assert (shape_.hidden, shape_.intermediate, p.batch_size, p.max_length) == (32, 128, 64, 160)
    assert run_group_size(module, preference_data(batch_size=4), None, clients_per_round=16) == 4
    assert run_group_size(module, preference_data(batch_size=64), None, clients_per_round=16) == 3


CAPPED = "the largest that fits this machine's memory, at most {} on a CPU (planning.group.cpu_group_cap)"


@pytest.mark.parametrize(
    ("clients", "batch", "length", "line"),
    [
        (3, 4, 128, "K = 3 (the largest that fits this machine's memory)"),
        (8, 4, 128, f"K = 4 ({CAPPED.format(4)})"),  # 64 KiB a client: CPU_GROUP_CAP decides
        (8, 64, 2048, f"K = 2 ({CAPPED.format(2)})"),  # 16 MiB a client: the activation decides
    ],
)
def test_plan_prints_the_k_fit_takes(tmp_path, capsys, monkeypatch, clients, batch, length, line):
    """``lightning-fed plan`` says the K that ``fit`` takes on a CPU, with as much memory as asked:
    TINY's MLP is 16 wide, float32, so a client's widest activation is ``batch x length x 2 x 16 x 4``
    bytes (4 x 128: 64 KiB; 64 x 2048: 16 MiB, 2 clients fill the 32 MiB). Before, it printed the
    memory's K (8) where fit takes at most 4."""
    from lightning_fed.plan_cli import main

    monkeypatch.setattr("lightning_fed.planning.group.memory_budget", lambda device: 1 << 50)
    cfg = {
        "model": {
            "class_path": "lightning_fed.modules.DPOModule",
            "init_args": {"backbone": {"config": TINY_RUNNABLE}},
        },
        "data": {
            "class_path": "lightning_fed.datamodules.PreferenceDataModule",
            "init_args": {"dataset": "synthetic:preferences", "batch_size": batch, "max_length": length},
        },
        "federation": {"clients_per_round": clients, "batch_clients": "auto"},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["--config", str(path)]) == 0
    assert f"clients trained together (federation.batch_clients: auto): {line}\n" in capsys.readouterr().out
