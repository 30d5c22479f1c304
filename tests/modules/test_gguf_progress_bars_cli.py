"""A GGUF cache build follows the run's progress bar (red team 15 L7): on f6ad729 transformers'
"Converting and de-quantizing GGUF tensors..." bar was drawn on stderr even with
``--trainer.enable_progress_bar=false`` (a plain ``tqdm`` that ``HF_HUB_DISABLE_PROGRESS_BARS`` and
``transformers.utils.logging.disable_progress_bar()`` do not reach). The model is a tiny GGUF written
for the test (tests/helpers/tiny_gguf.py), cached under its own ``LIGHTNING_FED_CACHE``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.cli import ENV, lightning_fed
from tests.helpers.tiny_gguf import write_tiny_gguf_package

BAR = "Converting and de-quantizing GGUF tensors..."


@pytest.mark.parametrize("shown", [False, True])
def test_a_gguf_build_draws_transformers_bar_only_with_the_progress_bar(tmp_path, shown):
    name = write_tiny_gguf_package(tmp_path / "packages")
    (tmp_path / "gguf.yaml").write_text(
        f"model:\n  init_args:\n    backbone: {{name_or_path: '{name}', config: null, tokenizer: null}}\n"
    )
    env = {**ENV, "PYTHONPATH": f"{tmp_path / 'packages'}{os.pathsep}{ENV['PYTHONPATH']}"}
    env["LIGHTNING_FED_CACHE"] = str(tmp_path / "cache")
    proc = lightning_fed(
        "validate",
        "--config",
        "tiny",
        "--config",
        "gguf.yaml",
        f"--trainer.enable_progress_bar={str(shown).lower()}",
        f"--trainer.default_root_dir={tmp_path / 'runs'}",
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (BAR in proc.stderr) is shown, proc.stderr[-3000:]
    assert Path(tmp_path / "cache" / "gguf" / "tiny_gguf_pkg" / "tiny" / "SHA256SUMS").is_file()
