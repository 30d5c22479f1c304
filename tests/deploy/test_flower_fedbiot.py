"""FedBiOT under Flower: the server-aligned emulator reaches the clients in their train
instruction, and the run reaches the in-process run's global state."""

from __future__ import annotations

import pytest
import torch
import yaml

from lightning_fed.deploy.records import CONFIG, record_to_instructions
from tests.helpers.flower_sim import assert_same_state, run_in_process, run_on_grid


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """configs/fedbiot.yaml, small: 2 rounds of 2 local steps, a short distillation and alignment."""
    cfg = yaml.safe_load(open("configs/fedbiot.yaml"))
    cfg["model"]["init_args"]["backbone"]["config"].update(n_embd=32, n_positions=128)
    cfg["data"]["init_args"].update(
        synthetic_args={**cfg["data"]["init_args"]["synthetic_args"], "examples_per_client": 16}
    )
    cfg["federation"].update(rounds=2, local_steps=2)
    cfg["federation"]["hooks"][0]["init_args"].update(
        distill_steps=3, steps_per_round=2, max_examples=32, max_length=96
    )
    path = tmp_path_factory.mktemp("fedbiot") / "fedbiot.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_flower_clients_receive_the_aligned_emulator(config, tmp_path):
    local = run_in_process(config, tmp_path / "local", [])
    server, grid = run_on_grid(config, tmp_path / "flower", [])
    hook = server.server.hooks[0]
    aligned = {k: v.detach().clone() for k, v in server.module.emulator_parameters().items()}
    trains = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert len(trains) == 4  # 2 rounds x 2 clients
    for msg in trains:
        round_idx = int(msg.content.config_records[CONFIG]["round"])
        instruction = record_to_instructions(msg.content)[0]
        assert instruction["emulator_version"] == 2 + round_idx  # distilled, then aligned each round
        sent = {k.split("/", 1)[1]: v for k, v in instruction.items() if k.startswith("emulator/")}
        assert sent.keys() == aligned.keys()  # every round changes the emulator: every client gets it
        if round_idx == 1:  # the last alignment is the emulator the server ends with
            for k, v in aligned.items():
                torch.testing.assert_close(sent[k], v, rtol=0, atol=0, msg=k)
    # The clients trained on it: the adapters (and the traffic) are the in-process run's.
    assert_same_state(local.server.global_state, server.server.global_state)
    assert [r["down_bytes"] for r in server.server.report.history] == [
        r["down_bytes"] for r in local.server.report.history
    ]
    assert hook.summary()["received_per_round"] == local.server.hooks[0].summary()["received_per_round"]
