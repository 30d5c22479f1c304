"""Where records come from: the built-in synthetic sets, local files, or the Hugging Face hub.

:func:`load_records` returns a :class:`datasets.Dataset` whose columns carry our canonical
field names (:data:`FIELDS`), renamed from the source's names by ``data.field_map``, and
checked by :func:`validate_records` so that bad input fails before training starts with a
one-line error naming the field, value or row.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from lightning_fed.data_cross_rules import (
    RECORD_FIELDS,
    absent_column_line,
    blank_field_line,
    duplicate_column_line,
    mapped_column,
    not_text_line,
    row_line,
)
from lightning_fed.data_files import file_problem, folder_files, folder_problem, said, shape_problem
from lightning_fed.data_paths import LOCAL_FORMATS, missing_path_problem, path_kind_problem
from lightning_fed.datamodules.synthetic import SYNTHETIC
from lightning_fed.errors import UserError
from lightning_fed.limits import synthetic_rows_problem

FIELDS = RECORD_FIELDS
"""kind -> (required fields, optional fields): declared without torch, where the precheck holds a data
set's columns against them (:func:`lightning_fed.data_columns.missing_field_problem`)."""

SYNTHETIC_PREFIX = "synthetic:"


def load_records(
    dataset: str,
    kind: str,
    split: str = "train",
    field_map: Mapping[str, str] | None = None,
    synthetic_args: Mapping | None = None,
) -> datasets.Dataset:
    """Load a data set, rename its columns to our field names, and validate it.

    Args:
        dataset: ``"synthetic:<name>"`` for a built-in set (:data:`SYNTHETIC`); a local
            ``.json``/``.jsonl``/``.csv``/``.parquet`` file or a folder of such files; or
            else a Hugging Face hub data set name.
        kind: ``"instruction"`` or ``"preference"`` (:data:`FIELDS`).
        split: Split to load from the hub; a local file or folder is a single split and
            synthetic sets ignore it.
        field_map: Our field name -> the source's column name, e.g.
            ``{"prompt": "question", "chosen": "response_j", "rejected": "response_k"}``.
        synthetic_args: Keyword arguments of the synthetic set's function.

    Returns:
        The records, with the canonical fields plus any other source columns (such as the
        synthetic sets' ``client`` and ``group``).

    Raises:
        ValueError: On an unknown kind or synthetic name, a bad field map, or invalid records.
        FileNotFoundError: If ``dataset`` looks like a local file that does not exist.
    """
    _check_kind(kind)
    ds = apply_field_map(read_source(dataset, split, synthetic_args), kind, dataset, field_map)
    validate_records(ds, kind, dataset, file_rows=True, field_map=field_map)
    return ds


def load_public_records(
    option: str,
    dataset: str,
    kind: str,
    split: str = "train",
    field_map: Mapping[str, str] | None = None,
    synthetic_args: Mapping | None = None,
) -> datasets.Dataset:
    """:func:`load_records` of a round hook's public set, its failure one line naming the hook's ``option``
    (``federation.hooks: HeldOutRouge.dataset``; its field map as ``<option>``'s ``field_map``) where the
    data source names ``data.dataset`` (red team 15 H4: a HeldOutRouge ``dataset`` no reader takes was
    refused after a round as ``data.dataset``). The precheck says the same lines naming
    ``federation.hooks[i]`` (:func:`lightning_fed.hook_cross_rules.anchors_problem`)."""
    try:
        return load_records(dataset, kind, split=split, field_map=field_map, synthetic_args=synthetic_args)
    except (ValueError, FileNotFoundError) as err:
        field_option = option.rpartition(".")[0] + ".field_map"
        raise UserError(str(err).replace("data.dataset", option, 1).replace("data.field_map", field_option)) from None


def read_source(dataset: str, split: str = "train", synthetic_args: Mapping | None = None) -> datasets.Dataset:
    """The rows of ``dataset`` as the source has them (columns not renamed, not validated).

    Args: as :func:`load_records`.
    """
    if dataset.startswith(SYNTHETIC_PREFIX):
        name = dataset[len(SYNTHETIC_PREFIX) :]
        if name not in SYNTHETIC:
            valid = [SYNTHETIC_PREFIX + key for key in SYNTHETIC]
            raise ValueError(f"data.dataset {dataset!r}: unknown synthetic set; valid: {valid}")
        check_synthetic_size(dict(synthetic_args or {}))
        return SYNTHETIC[name](**dict(synthetic_args or {}))
    if (files := local_files(dataset)) is not None:
        return views_as_text(load_local(dataset, *files))
    return views_as_text(_load_hub(dataset, split))


def views_as_text(ds: datasets.Dataset) -> datasets.Dataset:
    """``ds`` with its columns of Arrow's ``string_view`` (a Parquet file may hold them) cast to plain
    text: the precheck takes them as text (:mod:`lightning_fed.column_types`), Arrow's string kernels
    that :func:`validate_records` uses do not."""
    views = {k: datasets.Value("string") for k, v in ds.features.items() if getattr(v, "dtype", None) == "string_view"}
    return ds.cast(datasets.Features({**ds.features, **views})) if views else ds


def check_synthetic_size(synthetic_args: Mapping) -> None:
    """Refuse a synthetic set of more than :data:`~lightning_fed.limits.MAX_SYNTHETIC_ROWS` rows
    before it is drawn (a billion clients was a 179 GiB ``MemoryError``, exit 1)."""
    clients, per_client = synthetic_args.get("num_clients", 1), synthetic_args.get("examples_per_client", 1)
    if problem := synthetic_rows_problem(clients, per_client):
        raise ValueError(problem)


def local_files(dataset: str) -> tuple[str, list[str]] | None:
    """The ``datasets`` builder and files of a local data set, or ``None`` if not local.

    Args:
        dataset: A path to a ``.json``/``.jsonl``/``.csv``/``.parquet`` file or to a folder
            holding files of one of those formats.

    Raises:
        FileNotFoundError: If ``dataset`` has one of those suffixes but does not exist.
        ValueError: If a folder holds no such file or mixes formats, or ``dataset`` is a file of
            another suffix, or neither a file nor a folder (a FIFO: never opened).
    """
    path = Path(dataset).expanduser()
    suffix = path.suffix.lower()
    if problem := path_kind_problem(dataset):  # the precheck's line (class_sections._dataset_problem)
        raise UserError(problem)
    if problem := missing_path_problem(dataset):
        raise FileNotFoundError(problem)
    if path.is_dir():
        if problem := folder_problem(path):
            raise ValueError(said(f"data.dataset {dataset!r}", problem))
        files = folder_files(path)
        return LOCAL_FORMATS[files[0].suffix.lower()], [str(p) for p in files]
    if suffix in LOCAL_FORMATS:
        if not path.is_file():
            raise FileNotFoundError(f"data.dataset {dataset!r}: no such file")
        return LOCAL_FORMATS[suffix], [str(path)]
    return None


def _load_hub(dataset: str, split: str) -> datasets.Dataset:
    """A hub data set; a failure (unknown name, offline, no such split) is one line naming it."""
    try:
        return datasets.load_dataset(dataset, split=split)
    except Exception as err:  # noqa: BLE001 - the user must fix the name, the split or the network
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(
            f"data.dataset {dataset!r}: not a local file or folder, and the hub could not provide it"
            f" (split {split!r}): {type(err).__name__}: {reason[:300]}"
        ) from None


def load_local(dataset: str, builder: str, data_files: list[str]) -> datasets.Dataset:
    """Read local files with the ``datasets`` builder; a file it cannot read is a one-line error.

    ``datasets`` reports a malformed line as a multi-line ``DatasetGenerationError`` (or a
    bare ``StopIteration`` for an empty file); the root cause is what the user needs.

    Args:
        dataset: ``data.dataset`` as given, for error messages.
        builder: The ``datasets`` builder (:data:`LOCAL_FORMATS`).
        data_files: The files to read.

    Raises:
        UserError: Naming the file and, where it can be found, the line: an empty file, a line
            that is not UTF-8, a row the reader cannot take (:mod:`lightning_fed.data_files`).
        ValueError: The root cause the reader gave, where no such problem is found.
    """
    for file in data_files:  # the precheck's lines (lightning_fed/data_files.py); a larger file's rows below
        if problem := file_problem(Path(file)):
            raise UserError(_file_line(dataset, file, problem))
    try:
        with _datasets_log_silenced():
            return datasets.load_dataset(builder, data_files=data_files, split="train")
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one line naming the file
        cause = err
        while cause.__cause__ is not None:
            cause = cause.__cause__
        reason = " ".join(str(cause).split()) or type(cause).__name__
        where = data_files[0] if len(data_files) == 1 else f"one of {len(data_files)} files"
        for file in data_files:  # pyarrow and pandas name the row of their block, not of the file: find it
            if (problem := shape_problem(Path(file))) is not None:
                raise UserError(_file_line(dataset, file, problem)) from None
        raise ValueError(f"data.dataset {dataset!r}: cannot read {where!r} as {builder}: {reason}") from None


def _file_line(dataset: str, file: str, problem: str) -> str:
    """``problem`` of ``file``, of ``data.dataset`` (the file given is named once)."""
    subject = "data.dataset " + (repr(dataset) if file == dataset else f"{dataset!r}: {file!r}")
    return said(subject, problem)


@contextlib.contextmanager
def _datasets_log_silenced() -> Iterator[None]:
    """The ``datasets`` loggers quiet while it reads: a malformed line made it log "Failed to load
    JSON from file ..." twice (once timestamped) before the package's own one-line error, which
    names the file and the line (issue 34 item 11)."""
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def apply_field_map(
    ds: datasets.Dataset, kind: str, source: str, field_map: Mapping[str, str] | None
) -> datasets.Dataset:
    """Rename the source's columns to our field names.

    A source column already named like a mapped field (and not itself renamed) is dropped,
    so the mapped column wins.

    Args:
        ds: The records as loaded.
        kind: ``"instruction"`` or ``"preference"``.
        source: The data set's name, for error messages.
        file_rows: ``ds`` holds the rows of the file ``source`` in its order: a blank field of a JSON
            Lines file names its line too (:func:`~lightning_fed.data_cross_rules.row_line`).
        field_map: Our field name -> the source's column name.

    Raises:
        ValueError: If a key is not one of the kind's fields, a value is not a column, or two
            fields map to the same column.
    """
    _check_kind(kind)
    if not field_map:
        return ds
    required, optional = FIELDS[kind]
    fields = required + optional
    seen: dict[str, str] = {}
    for field, column in field_map.items():
        if field not in fields:
            raise ValueError(f"data.field_map: {field!r} is not a {kind} field; valid: {list(fields)}")
        if column not in ds.column_names:  # the precheck's line (data_columns.missing_field_problem)
            raise UserError(
                absent_column_line("data.field_map", field, column, "data.dataset", source, ds.column_names)
            )
        if column in seen:  # the precheck's line too (data_columns.missing_field_problem)
            raise UserError(duplicate_column_line("data.field_map", seen[column], field, column))
        seen[column] = field
    renames = {column: field for column, field in seen.items() if column != field}
    shadowed = [f for f in renames.values() if f in ds.column_names and f not in renames]
    if shadowed:
        ds = ds.remove_columns(shadowed)
    return ds.rename_columns(renames) if renames else ds


def validate_records(
    ds: datasets.Dataset,
    kind: str,
    source: str,
    file_rows: bool = False,
    field_map: Mapping[str, str] | None = None,
) -> None:
    """Check that every required field is present, textual and non-empty in every row.

    Optional fields, if present, must be text or null. Runs on Arrow columns, so it is fast
    on large data sets.

    Args:
        ds: Records with canonical field names.
        kind: ``"instruction"`` or ``"preference"``.
        source: The data set's name, for error messages.
        file_rows: ``ds`` holds the rows of the file ``source`` in its order: a blank field of a JSON
            Lines file names its line too (:func:`~lightning_fed.data_cross_rules.row_line`).
        field_map: The map ``ds`` was renamed by: a field read from another column is named with it.

    Raises:
        ValueError: On the first problem found: a missing field, a non-text field, or a row
            whose required field is null, empty or whitespace only (rows count from 0).
    """
    _check_kind(kind)
    required, optional = FIELDS[kind]
    for field in required:
        if field not in ds.column_names:  # the precheck's line (data_columns.missing_field_problem)
            raise UserError(
                f"data.dataset {source!r}: missing field {field!r} "
                f"(columns: {', '.join(ds.column_names)}; map it with data.field_map)"
            )
    if len(ds) == 0:
        raise ValueError(f"data.dataset {source!r}: no rows")
    fields = required + tuple(f for f in optional if f in ds.column_names)
    # one Arrow take for all fields: a shuffled or selected view is gathered only once
    table = ds.select_columns(list(fields)).with_format("arrow")[:]
    for field in fields:
        column = table.column(field)
        if not (
            pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)
            or (pa.types.is_null(column.type) and field in optional)
        ):
            # name the first row whose value is not text (mixed JSON columns decode per row)
            values = ds[field]
            row = next(
                (i for i, v in enumerate(values) if not (isinstance(v, str) or (v is None and field in optional))), None
            )
            if row is None:
                raise ValueError(f"data.dataset {source!r}: field {field!r} must be text; got {column.type}")
            line = row_line(source, row) if file_rows else None  # the precheck's line (data_columns.not_text_problem)
            column = mapped_column(field, field_map)
            raise UserError(not_text_line("data.dataset", source, row, field, values[row], line, column))
        if field in optional:
            continue
        blank = pc.or_kleene(pc.is_null(column), pc.equal(pc.utf8_trim_whitespace(column), "")).fill_null(True)
        if pc.any(blank).as_py():
            row = pc.index(blank, True).as_py()
            # a key missing from a JSON row reads as null, as `null` does: said as such, not as empty
            line = row_line(source, row) if file_rows else None
            # one line (red team 11 row 11); the precheck says it before torch (data_columns.blank_row_problem)
            missing, mapped = not column[row].is_valid, mapped_column(field, field_map)
            raise UserError(blank_field_line("data.dataset", source, row, field, missing, line, mapped))


def _check_kind(kind: str) -> None:
    if kind not in FIELDS:
        raise ValueError(f"`kind` must be one of {list(FIELDS)}, got {kind!r}")


def load_hub_or_local(
    name: str,
    config: str | None = None,
    split: str = "train",
    path: str | None = None,
    max_rows: int | None = None,
    seed: int = 0,
) -> datasets.Dataset:
    """The hub dataset ``name`` (``config``, ``split``), or the same columns from a local file
    or folder ``path``; optionally a seeded random subset of ``max_rows`` rows."""
    files = local_files(path) if path is not None else None
    if files is not None:
        ds = datasets.load_dataset(files[0], data_files=files[1], split="train")
    else:
        ds = datasets.load_dataset(name, config, split=split)
    ds = views_as_text(ds)
    if max_rows is not None and max_rows < len(ds):
        ds = ds.shuffle(seed=seed).select(range(max_rows))
    return ds
