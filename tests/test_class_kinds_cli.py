"""The package's classes and options refused by kind and type before torch is imported (issue 41).

A copy of the shipped ``tiny`` config with one value made wrong, run as ``lightning-fed fit`` in
a child that cannot import torch (:func:`tests.helpers.cli.lightning_fed_without_torch`): each
case ends with exit 2 and the one line naming the file, the option and the value, and the empty
folder it ran in stays empty. On 2599077 each ran into the torch import (the live parser's or the
class's refusal came after 9-13 s of imports; ``synthetic_args.groups: positive`` trained).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import lightning_fed_without_torch

TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
DATA_CLASSES = (
    "FeedbackPreferenceDataModule, FeedbackSFTDataModule, FeedbackSelectorDataModule, InstructionDataModule,"
    " PreferenceDataModule, PresetPreferenceDataModule, RLFTDataModule, SelectorDataModule"
)
STRATEGIES = (
    "ClientLevelDP, CoordinateMedian, FLoRA, FedAMP, FedAdagrad, FedAdam, FedAvg, FedAvgM, FedBiscuit, FedBuff,"
    " FedNova, FedProx, FedYogi, FlexLoRA, HetLoRA, Scaffold, SecureAggregation, TrimmedMean"
)
HOOKS = (
    "AsyncArrivals, CentralizedCoreset, ClientGrouping, ClientRanks, CoresetSelection, EmulatorAlignment,"
    " FLoRAMerge, GlobalSelect, HeldOutRouge, HierarchicalDataSelection, PerplexitySelection, RandomSelection,"
    " RoundLRSchedule, ServerSideCoreset, SystemHeterogeneity"
)
MODELS = (
    "BinarySelectorModule, DPDPOModule, DPOModule, DPSFTModule, FedPerModule, FedRepModule, ORPOModule,"
    " OffsiteModule, PDPOModule, PerFedAvgModule, PersonalHeadDPO, SFTModule, SimPOModule"
)


def _set(config: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config.setdefault(key, {})
    config[last] = value


CASES = {
    "d_classpath_wrong_kind": (
        [("data.class_path", "lightning_fed.strategies.FedAvg")],
        [],
        "data: class_path 'lightning_fed.strategies.FedAvg' is a server strategy (a subclass of Strategy),"
        f" not a data module (a subclass of FederatedDataModule); one of {DATA_CLASSES}",
    ),
    "f_strategy_wrongkind": (
        [("federation.strategy", "lightning_fed.modules.DPOModule")],
        [],
        "federation.strategy: class_path 'lightning_fed.modules.DPOModule' is a model (a subclass of"
        f" FederatedModule), not a server strategy (a subclass of Strategy); one of {STRATEGIES}",
    ),
    "h_hook_wrongkind": (
        [("federation.hooks", ["lightning_fed.strategies.FedAvg"])],
        [],
        "federation.hooks[0]: class_path 'lightning_fed.strategies.FedAvg' is a server strategy (a subclass of"
        f" Strategy), not a round hook (a subclass of RoundHook); one of {HOOKS}",
    ),
    "model_short_data_module": (
        [("model.class_path", "PreferenceDataModule")],
        [],
        "model: class_path 'PreferenceDataModule' is a data module (a subclass of FederatedDataModule),"
        f" not a model (a subclass of FederatedModule); one of {MODELS}",
    ),
    "model_strategy_string": (
        [("model", "FedAvg")],
        [],
        "model: class_path 'FedAvg' is a server strategy (a subclass of Strategy), not a model (a subclass of"
        f" FederatedModule); one of {MODELS}",
    ),
    "f_privacy_str": (
        [("federation.privacy", "yes")],
        [],
        "federation.privacy must be a mapping of its options (federation.privacy: {target_epsilon: 8.0, ...}),"
        " got 'yes'",
    ),
    "f_isolate_bad": (
        [("federation.isolate_failures", "x")],
        [],
        "federation.isolate_failures must be true or false, got 'x'",
    ),
    "m_lora_list": (
        [("model.init_args.lora", [4, 8])],
        [],
        "model.lora must be a mapping with keys r, alpha, dropout, target_modules, got [4, 8]",
    ),
    "m_lora_tm_int": (
        [("model.init_args.lora.target_modules", 5)],
        [],
        "model.lora.target_modules must be a list of strings or null, got 5",
    ),
    "d_field_map_int": (
        [("data.init_args.field_map", {"prompt": 5})],
        [],
        "data.field_map.prompt must be a string, got 5",
    ),
    "strategy_list_item": (
        [("federation.strategy", {"class_path": "FLoRA", "init_args": {"client_ranks": [4, "x"]}})],
        [],
        "federation.strategy.client_ranks[1] must be an integer, got 'x'",
    ),
    "hook_outside_round_hooks": (
        [
            (
                "federation.hooks",
                [{"class_path": "lightning_fed.heterogeneity.ClientRanks", "init_args": {"per_client": 5}}],
            )
        ],
        [],
        "federation.hooks[0].per_client must be a list of integers or null, got 5",
    ),
    "v_hooks_yaml_short_fedbiscuit": (  # a TensorBoard file was written, then exit 2 after 11.7 s
        [("federation.strategy", "FedBiscuit")],
        [],
        "federation.strategy=FedBiscuit needs model: BinarySelectorModule(num_selectors=3)"
        " (FedBiscuit aggregates one LoRA selector per cluster), got DPOModule",
    ),
    "p_cldp_wrap_bad": (
        [
            (
                "federation.strategy",
                {"class_path": "lightning_fed.privacy.ClientLevelDP", "init_args": {"inner": "FedAdm"}},
            )
        ],
        [],
        "federation.strategy.inner is not an option of ClientLevelDP; its options: adaptive, clip_norm, control_scale,"
        " expected_clients, noise_multiplier, seed, strategy",
    ),
    "p_cldp_opt_typo": (
        [
            (
                "federation.strategy",
                {"class_path": "lightning_fed.privacy.ClientLevelDP", "init_args": {"clip_nrm": 1.0}},
            )
        ],
        [],
        "federation.strategy.clip_nrm is not an option of ClientLevelDP; did you mean federation.strategy.clip_norm?",
    ),
    "cli_hooks_plus_opt": (
        [],
        ["--federation.hooks+=ClientGrouping", "--federation.hooks.noise_multiplier=-1"],
        "federation.hooks[0].noise_multiplier must be > 0 or null, got -1.0",
    ),
    "p_dpsgd_typo": (
        [("model.class_path", "lightning_fed.privacy.DPDPOModule"), ("model.init_args.dp_sgd", {"clip_nrm": 1.0})],
        [],
        "model.dp_sgd.clip_nrm is not an option of DPSGDSettings; did you mean model.dp_sgd.clip_norm?",
    ),
    "p_dpsgd_neg": (
        [
            ("model.class_path", "lightning_fed.privacy.DPDPOModule"),
            ("model.init_args.dp_sgd", {"clip_norm": -1.0, "target_epsilon": 8.0}),
        ],
        [],
        "model.dp_sgd.clip_norm must be a number > 0, got -1.0",
    ),
    "m_loss_options_typo": (
        [("model.init_args.loss_options", {"zz": 1})],
        [],
        "model.loss_options: 'sigmoid' takes [], got ['zz']",
    ),
    "loss_options_of_a_named_loss": (
        [("model.init_args.loss", "conservative"), ("model.init_args.loss_options", {"label_smothing": 0.2})],
        [],
        "model.loss_options: 'conservative' takes ['label_smoothing'], got ['label_smothing']",
    ),
}


@pytest.mark.parametrize(("muts", "args", "line"), list(CASES.values()), ids=list(CASES))
def test_a_wrong_kind_or_type_is_refused_before_torch_naming_file_option_and_value(tmp_path, muts, args, line):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    for path, value in muts:
        _set(config, path, value)
    file = tmp_path / "my.yaml"
    file.write_text(yaml.safe_dump(config), encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", str(file), *args, cwd=cwd, hook=tmp_path / "hook")
    prefix = f"config {str(file)!r}: " if muts and not args else ""
    assert (proc.returncode, proc.stderr) == (2, f"error: {prefix}{line}\n")
    assert list(cwd.iterdir()) == []
