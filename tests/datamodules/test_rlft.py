"""The RLFT stage (Wu et al., 2024, Sec. 4): selectors saved by one CLI run, loaded by path,
label the policy's sampled pairs, and the policy is DPO-trained on them by a second CLI run."""

import json
import math
from pathlib import Path

import pytest
import torch

from lightning_fed.cli import main
from lightning_fed.datamodules.rlft import RLFTDataModule
from lightning_fed.modules.rlft import label_pairs
from lightning_fed.modules.selector_source import SelectorSource, load_selector
from tests.helpers.selector_data import one_thread

QUIET = ["--trainer.enable_progress_bar=false"]


def run_dir(root: Path) -> Path:
    (path,) = (root / "lightning_logs").iterdir()
    return path


@pytest.fixture(scope="module")
def fedbiscuit_run(tmp_path_factory):
    """A tiny FedBiscuit run (U = 3, past its first grouping), saved like any CLI run."""
    root = tmp_path_factory.mktemp("fedbiscuit")
    with one_thread():
        cli = main(
            [
                "fit",
                "--config",
                "configs/fedbiscuit_tiny.yaml",
                f"--trainer.default_root_dir={root}",
                "--federation.rounds=4",
                *QUIET,
            ]
        )
    return cli.model, run_dir(root)


def decisive_copy(selector, run: Path) -> Path:
    """The selectors with random, large LoRA B (three strong, different opinions), saved beside
    the run's own adapter: a selector trained for seconds is too close to 0.5 for labels that
    do not depend on float noise (batch shapes)."""
    folder = run / "adapter_decisive"
    if not folder.exists():
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for name, p in selector.named_parameters():
                if "lora_B" in name:
                    p.add_(torch.randn(p.shape, generator=g))
        selector.save_adapter(folder)
    return folder


def test_selectors_load_by_adapter_folder_and_by_checkpoint(fedbiscuit_run):
    trained, run = fedbiscuit_run
    expected = {k: v.detach() for k, v in trained.shared_parameters().items()}
    for path in (run / "adapter", run / "checkpoints" / "last.ckpt"):
        loaded = load_selector(str(path))  # backbone from config.yaml / the checkpoint
        got = loaded.shared_parameters()
        assert loaded.num_selectors == 3 and got.keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, rtol=0, atol=0)
        # The random tiny backbone is rebuilt with the run's seed: the same frozen weights.
        wte = "model.base_model.model.transformer.wte.weight"
        assert torch.equal(dict(loaded.named_parameters())[wte], dict(trained.named_parameters())[wte])
    # The three selectors differ, so FedBiscuit's majority vote is not one selector's answer.
    keys = [trained.selector_keys(u, expected)[0] for u in range(3)]
    assert not torch.equal(expected[keys[0]], expected[keys[1]])


def test_selector_source_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="set selector.path .* or selector.train_config .*, got neither"):
        SelectorSource()
    with pytest.raises(FileNotFoundError, match=r"selector.path '.*nope': no such file or folder"):
        load_selector(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a PEFT adapter folder"):
        load_selector(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="data.num_completions must be >= 2 to form pairs, got 1"):
        RLFTDataModule(selector=SelectorSource(path="x"), num_completions=1)


def test_rlft_stage_from_a_saved_selector_trains_the_policy(fedbiscuit_run, tmp_path):
    """Stage 2 of the pipeline, as a user runs it: the RLFT config with selector.path."""
    adapter = decisive_copy(*fedbiscuit_run)
    records = tmp_path / "d_gen.jsonl"
    args = [
        "fit",
        "--config",
        "configs/fedbiscuit_rlft.yaml",
        f"--trainer.default_root_dir={tmp_path / 'rlft'}",
        *QUIET,
        f"--data.init_args.selector.path={adapter}",  # takes precedence over train_config
        f"--data.init_args.records_path={records}",
        "--federation.rounds=3",
    ]
    with one_thread():
        cli = main(args)
    dm = cli.datamodule
    generated = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(dm.prompts) == 8 and 0 < len(generated) <= dm.expected_pairs == 8 * math.comb(4, 2)
    assert all(r["chosen"] != r["rejected"] and r["prompt"] in dm.prompts for r in generated)
    # Every label is the majority vote of the three selectors loaded from the folder.
    selector = load_selector(str(adapter))
    relabelled = label_pairs(
        selector, [r["prompt"] for r in generated], [[r["rejected"], r["chosen"]] for r in generated], template="short"
    )
    assert [r["chosen"] for r in relabelled] == [r["chosen"] for r in generated]
    # The policy learned D_gen: DPO loss and implicit-reward accuracy on its held-out pairs moved.
    summary = json.loads((run_dir(tmp_path / "rlft") / "summary.json").read_text())
    initial, final = summary["initial"]["val"], summary["final"]["val"]
    assert summary["clients"]["num_clients"] == 1 and len(summary["rounds"]) == 3
    assert final["loss"] < initial["loss"] - 0.02 and final["reward_margin"] > initial["reward_margin"]


def test_one_config_trains_the_selector_then_the_policy(tmp_path):
    args = [
        "fit",
        "--config",
        "configs/fedbis_rlft.yaml",
        f"--trainer.default_root_dir={tmp_path / 'rlft'}",
        *QUIET,
        "--data.init_args.selector.train_args="
        f"[--trainer.default_root_dir={tmp_path / 'selector'}, --federation.rounds=2]",
        "--federation.rounds=1",
    ]
    with one_thread():
        cli = main(args)
    selector_summary = json.loads((run_dir(tmp_path / "selector") / "summary.json").read_text())
    assert len(selector_summary["rounds"]) == 2 and (run_dir(tmp_path / "selector") / "adapter").is_dir()
    assert cli.datamodule.client_sizes[0] > 0 and (run_dir(tmp_path / "rlft") / "adapter").is_dir()


def test_bad_selector_path_fails_before_training(tmp_path):
    args = [
        "fit",
        "--config",
        "configs/fedbis_rlft.yaml",
        f"--trainer.default_root_dir={tmp_path}",
        *QUIET,
        f"--data.init_args.selector.path={tmp_path / 'missing'}",
    ]
    with pytest.raises(FileNotFoundError, match="no such file or folder") as err:
        main(args)
    assert "\n" not in str(err.value) and not any(tmp_path.iterdir())
