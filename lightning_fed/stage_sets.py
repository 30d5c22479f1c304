"""What a stage needs from the data, told from the config before torch (issue 41, item 1).

``lightning-fed test`` scores a separate test set, ``data.test_dataset``: the package's data
modules (:class:`~lightning_fed.datamodules.FederatedDataModule` and every subclass the package
ships; none sets a test set of its own) refuse ``setup("test")`` without one, with
:data:`NO_TEST_SET`, but only after 10-15 s of imports and the model's build.
:func:`test_set_problem` gives the same line from the merged config
(:class:`lightning_fed.config_values.Merged`) when the data class is one of the package's
(:func:`lightning_fed.option_rules.class_rules`) and ``test_dataset`` is unset or ``null``. A
user's own data module decides for itself (it may load a test split its own way). ``validate``
needs nothing here: every data module has a validation set (``val_dataset`` or
``val_fraction``'s share of each client).

Imports nothing but :mod:`lightning_fed.option_rules` and the standard library.
"""

from __future__ import annotations

from typing import Any

from lightning_fed.option_rules import class_rules

NO_TEST_SET = (
    "data.test_dataset is not set: `test` scores a separate test set; pass --data.init_args.test_dataset=<file>"
)
"""The line of a ``test`` without ``data.test_dataset`` (the data module's and the precheck's)."""


def test_set_problem(data: Any) -> str | None:
    """:data:`NO_TEST_SET` if ``data`` (merged, ``{class_path, init_args}``) is the package's data
    module without a ``test_dataset``, else ``None``."""
    if not isinstance(data, dict) or not isinstance(data.get("class_path"), str):
        return None
    if class_rules("data", data["class_path"]) is None:
        return None  # a user's own data module
    init_args = data.get("init_args")
    if isinstance(init_args, dict) and init_args.get("test_dataset") is None:
        return NO_TEST_SET
    return None
