"""A private run's checks of config values alone, refused before torch (lightning_fed/private_run_rules.py):
exit 2, one ``error:`` line naming the option and, where a ``--config`` file set it, the file.

SEEN FAILING on c9c04d9 (red team 11 rows 15 and 16): ``model.cache_reference=true`` under ClientLevelDP
was refused after the model was built, in two lines; a client-level ``federation.privacy`` without
ClientLevelDP got its line after torch, Lightning and transformers were imported (the child here cannot
import torch: on c9c04d9 its stderr was ``REACHED_TORCH``)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers.cli import lightning_fed_without_torch

CLIENT_DP = {
    "class_path": "lightning_fed.privacy.ClientLevelDP",
    "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}, "clip_norm": 0.05},
}
DP_TINY = {"federation": {"rounds": 2, "privacy": {"target_epsilon": 8.0}, "strategy": CLIENT_DP}}
CACHE = (
    "model.cache_reference=true in a private run{why}: the cache would record which examples were trained on in"
    " the checkpoint; set model.cache_reference=false (or leave it unset)"
)
NEEDS_DP = (
    "federation.privacy sets a client-level budget: it needs federation.strategy ="
    " lightning_fed.privacy.ClientLevelDP (around the server strategy), got {name}"
)
VIA_DP = " (federation.strategy has lightning_fed.privacy.ClientLevelDP)"


@pytest.mark.parametrize(
    ("files", "args", "line"),
    [
        # red team 11 row 15 (dp_cache): the value on the command line, ClientLevelDP from the file (named beside
        # it, issue 41)
        (
            [DP_TINY],
            ["--model.init_args.cache_reference=true"],
            CACHE.format(why=VIA_DP.replace(")", ", config '{0}')")),
        ),
        # the value in the file: the file named
        (
            [{**DP_TINY, "model": {"init_args": {"cache_reference": True}}}],
            [],
            "config '{0}': " + CACHE.format(why=VIA_DP),
        ),
        # an example-level DP module
        (
            [{"model": {"class_path": "lightning_fed.privacy.DPDPOModule", "init_args": {"cache_reference": True}}}],
            [],
            "config '{0}': " + CACHE.format(why=" (model DPDPOModule: example-level DP)"),
        ),
        # red team 11 row 16 (dp_nostrat): a budget on the command line, no ClientLevelDP
        ([], ["--federation.privacy={target_epsilon: 4.0}"], NEEDS_DP.format(name="FedAvg")),
        (
            [{"federation": {"privacy": {"noise_multiplier": 1.0}}}],
            [],
            "config '{0}': " + NEEDS_DP.format(name="FedAvg"),
        ),
        # a wrapper without ClientLevelDP inside it
        (
            [
                {
                    "federation": {
                        "privacy": {"target_epsilon": 4.0},
                        "strategy": {
                            "class_path": "lightning_fed.deploy.SecureAggregation",
                            "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}},
                        },
                    }
                }
            ],
            [],
            "config '{0}': " + NEEDS_DP.format(name="SecureAggregation"),
        ),
    ],
    ids=["cache_cli", "cache_file", "cache_dp_sgd", "budget_cli", "noise_file", "budget_secagg"],
)
def test_a_private_run_refuses_before_torch(tmp_path, files, args, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    configs = []
    for i, content in enumerate(files):
        path = tmp_path / f"change{i}.yaml"
        path.write_text(yaml.safe_dump(content))
        configs += ["--config", str(path)]
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        *configs,
        *args,
        f"--trainer.default_root_dir={cwd / 'run'}",
        cwd=cwd,
        hook=tmp_path / "hook",
    )
    expected = line.format(*(str(tmp_path / f"change{i}.yaml") for i in range(len(files))))
    assert (proc.returncode, proc.stderr) == (2, f"error: {expected}\n")
    assert list(cwd.iterdir()) == []
