"""Whether ``model.backbone.name_or_path`` / ``tokenizer`` names something that can be loaded,
decided from its text and the disk alone, before torch is imported.

:func:`lightning_fed.modules.backbone._resolve_model_path` takes a value that starts like a path
(``/``, ``./``, ``../``, ``~``) for a local folder and anything else for a hub id, which
``from_pretrained`` looks up in the hub cache, and, offline (``HF_HUB_OFFLINE=1``), only there:
``tokenizer: abc`` offline was refused 12 s of CPU later, in words naming neither the option nor
the value (issue 41), and ``name_or_path: nobody/nomodel`` 11 s later in transformers' words
(``Cannot find the requested files in the disk cache``). What is certain from here is refused
with the option's name: a path that does not exist, and, offline, a hub id with no folder in the
hub cache. Online, a hub id is left to the hub. Imports nothing but the standard library and
``huggingface_hub``'s constants.
"""

from __future__ import annotations

from pathlib import Path

LOCAL_STARTS = ("/", "./", "../", "~", ".\\")
"""How a local path starts, as :func:`~lightning_fed.modules.backbone._resolve_model_path` tells it from a hub id."""


def missing_source_problem(option: str, spec: str, hub: bool = True) -> str | None:
    """The line refusing ``spec`` given to ``option`` (``model.backbone.tokenizer``) when it certainly
    names nothing loadable (module docstring), or ``None``; ``hub=False``: a hub id is not looked
    up. ``gguf:`` names and the built-in tokenizers are the caller's to leave out."""
    if not spec.strip() or Path(spec).expanduser().exists():
        return None
    if spec.startswith(LOCAL_STARTS) or spec in (".", ".."):
        return f"{option}: local path {spec!r} does not exist"
    from huggingface_hub import constants  # no torch; the hub cache and the offline switch as transformers reads them

    if not hub or not constants.HF_HUB_OFFLINE:
        return None
    cache = Path(constants.HF_HUB_CACHE)
    if (cache / f"models--{spec.replace('/', '--')}").is_dir():
        return None
    return (
        f"{option} {spec!r}: no such local folder, and not in the hub cache ({cache}) while offline"
        " (HF_HUB_OFFLINE=1: nothing is downloaded)"
    )
