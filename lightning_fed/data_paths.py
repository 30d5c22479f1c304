"""Whether ``data.dataset`` names a local file or folder or a hub data set, from its text alone.

The data source (:func:`lightning_fed.datamodules.sources.local_files`) and the precheck
(:func:`lightning_fed.class_sections.class_problem`) decide it with the same functions, so a path that does not
exist is refused before torch is imported with the line the data module says after it
(``./nope.jsonl`` was refused 12 s of CPU later, issue 41), as is a file no reader takes or a path
that is no file at all (:func:`path_kind_problem`); so are ``data.val_dataset`` and
``data.test_dataset``, named as themselves (a missing test set was named ``data.dataset``), and an
empty name. Imports nothing but the standard library.
"""

from __future__ import annotations

from pathlib import Path

LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
"""File suffix -> the ``datasets`` builder that reads it."""

FILE_LIKE_SUFFIXES = frozenset(LOCAL_FORMATS) | {
    ".txt",
    ".tsv",
    ".yaml",
    ".yml",
    ".xml",
    ".arrow",
    ".gz",
    ".bz2",
    ".xz",
    ".zst",
    ".zip",
    ".tar",
    ".xlsx",
    ".pkl",
    ".pt",
}
"""Suffixes of files, never of hub data set names: such a name is a path, never sent to the hub."""

SUPPORTED = f"supported: {', '.join(LOCAL_FORMATS)} files or a folder of them"


def looks_like_path(dataset: str) -> bool:
    """Whether ``dataset`` names a local file or folder rather than a hub data set (``owner/name``).

    Absolute, ``./``/``../``/``~`` relative, more than one ``/``, a file suffix, or a parent
    folder that exists here: a hub name is none of these.
    """
    path = Path(dataset).expanduser()
    return (
        path.is_absolute()
        or dataset.startswith((".", "~"))
        or "\\" in dataset
        or dataset.count("/") >= 2
        or path.suffix.lower() in FILE_LIKE_SUFFIXES
        or (len(path.parts) > 1 and path.parent.is_dir())
    )


DATASET_OPTIONS = ("data.dataset", "data.val_dataset", "data.test_dataset")
"""The data module's options that name a data set (``val_dataset`` and ``test_dataset`` in the
forms of ``dataset``); each is refused by its own name."""


def dataset_text_problem(option: str, dataset: object) -> str | None:
    """The line refusing an empty ``option`` (``''``, spaces): no data set has that name, and as a
    path it is the working folder (``folder has no ... files``, 9.6 s of CPU later, issue 41)."""
    if isinstance(dataset, str) and not dataset.strip():
        return f"{option} must be a hub name (owner/name), a local file or folder, or synthetic:<name>, got {dataset!r}"
    return None


def missing_path_problem(dataset: str, option: str = "data.dataset") -> str | None:
    """The line refusing ``option`` (:data:`DATASET_OPTIONS`) given a local path
    (:func:`looks_like_path`) to nothing that exists, or ``None`` (a path that exists, or a hub
    name such as ``org/name``)."""
    if Path(dataset).expanduser().exists() or not looks_like_path(dataset):
        return None
    return f"{option} {dataset!r}: no such file or folder ({SUPPORTED}; a hub name is owner/name)"


def path_kind_problem(dataset: str, option: str = "data.dataset") -> str | None:
    """The line refusing ``option`` given a path that exists but is no data file: a regular file of another
    suffix (``notes.txt``: issue 41 M3, refused after 16 s of imports in two lines), or neither a file nor a
    folder (a FIFO, socket or device: said to be no such file after the imports, M6). Only ``stat`` is
    asked, so a FIFO is never opened (opening one blocks until a writer comes). ``None`` otherwise."""
    path = Path(dataset).expanduser()
    try:
        if path.is_file():
            suffix = path.suffix.lower()
            return (
                None
                if suffix in LOCAL_FORMATS
                else f"{option} {dataset!r}: unsupported file type {suffix or '(no suffix)'!r}; {SUPPORTED}"
            )
        if path.exists() and not path.is_dir():
            return f"{option} {dataset!r} is not a regular file (a device, FIFO or socket); {SUPPORTED}"
    except (OSError, ValueError):  # a name the system cannot stat: the reader's to say
        return None
    return None
