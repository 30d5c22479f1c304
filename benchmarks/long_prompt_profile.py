"""One warm long-prompt DPO step (the new path, K = 1) under torch.profiler: where its CPU time goes.

SmolLM2-135M-Instruct with ``configs/feddpo.yaml``'s settings (``step_flops.py``'s module), 4 pairs of a
256-token prompt and 64-token responses, the reference cache filled by an untimed step, 1 intra-op thread;
prints the step's process CPU time, the profiler's 25 largest operators by self CPU time, and the
optimizer's settings::

    nice -n 15 .venv/bin/python benchmarks/long_prompt_profile.py
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import step_flops  # noqa: E402 (benchmarks/ on the path first)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    module = step_flops.build_module(step_flops.feddpo_settings())
    vocab = module.model.get_base_model().config.vocab_size
    batches, _ = step_flops.long_prompt_batches(4, vocab, 1)
    start = {k: v.clone() for k, v in module.shared_parameters().items()}
    step = step_flops.Sequential(module, True, True, True, batches, start)  # scored head, prompt once, packed
    for name in ("untimed (fills the reference cache)", "warm step"):
        t = time.process_time()
        step.round()
        print(f"{name}: {time.process_time() - t:.2f} CPU s", flush=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step.round()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=40))
    opt = step.optimizer
    settings = {k: v for k, v in opt.defaults.items() if k in ("foreach", "fused")}
    print(type(opt).__name__, settings, "tensors", sum(len(g["params"]) for g in opt.param_groups))


if __name__ == "__main__":
    main()
