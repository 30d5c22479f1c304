"""What reading a local data file may raise, where the precheck leaves the file to the live reader.

The precheck reads a data file (its columns, rows, key values) to refuse a mistake before torch; a
file it cannot read cleanly is the data source's reader's to refuse, after the imports. Only the
ways a *file* fails are left so: a ``NameError``, ``AttributeError`` or ``TypeError`` of the
package's own code is a bug, reported as one (exit 1, the ``--debug`` hint), never read as "not
certain here" (red team 15 M1: a ``NameError`` in ``ByKey``'s CSV reader was swallowed, so a CSV
with too few keys was refused only after torch).
"""

from __future__ import annotations

import csv
import sys

FILE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # no access, a folder, a file gone meanwhile; pyarrow's ArrowIOError is OSError
    ValueError,  # UnicodeDecodeError, json.JSONDecodeError, pyarrow's ArrowInvalid
    csv.Error,  # a field past csv.field_size_limit, a quote the strict reader refuses
    RecursionError,  # JSON nested deeper than Python's json reads
)
"""What reading a JSON, JSON Lines or CSV file raises for the file's own sake."""


def file_errors() -> tuple[type[BaseException], ...]:
    """:data:`FILE_ERRORS` and, once pyarrow is imported (a Parquet file read), any of its errors
    (``ArrowException``: a column it has no kernel for, ``ArrowTypeError``...). Called in an ``except``
    clause, so only when something was raised: a JSON file's check never imports pyarrow."""
    arrow = sys.modules.get("pyarrow.lib")
    return FILE_ERRORS + ((arrow.ArrowException,) if arrow is not None else ())
