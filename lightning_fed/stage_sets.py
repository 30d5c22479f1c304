"""What a stage needs from the data, told from the config before torch (issue 41, item 1).

``lightning-fed test`` scores a separate test set, ``data.test_dataset``: the package's data
modules (:class:`~lightning_fed.datamodules.FederatedDataModule` and every subclass the package
ships; none sets a test set of its own) refuse ``setup("test")`` without one, with
:data:`NO_TEST_SET`, but only after 10-15 s of imports and the model's build.
:func:`test_set_problem` gives the same line from the merged config
(:class:`lightning_fed.config_values.Merged`) when the data class is one of the package's
(:func:`lightning_fed.option_rules.class_rules`) and ``test_dataset`` is unset or ``null``. A
user's own data module decides for itself (it may load a test split its own way). ``validate``
scores every data module's validation set (``val_dataset`` or ``val_fraction``'s share of each
client): :func:`validation_set_problem` gives :func:`empty_set_line`'s line from the config when the
package's data module has no ``val_dataset`` and ``val_fraction`` is 0, which holds out no row
whatever the data (red team 15 M9: refused only after the imports, 7 s of CPU).

Whether that set holds any example is known only once it is tokenized: :func:`empty_set_line` is the
line of a ``validate`` or ``test`` whose set has none left (every row longer than ``data.max_length``
dropped, or a ``val_fraction`` that leaves no client a row), which the data module raises at setup
(issue 41 H3: ``test`` of a set ``on_overflow`` dropped whole exited 0 with a warning and wrote no
``test_results.json``, where ``fit`` refuses a client left without training examples).
:func:`planned_clients_line` is the line of one whose ``federation.eval_clients`` picks only clients
without an example of the set while other clients have some (issue 41: it scored nothing and exited 0,
silently).

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


def validation_set_problem(data: Any) -> str | None:
    """:func:`empty_set_line`'s line of a ``validate`` if ``data`` (merged, ``{class_path, init_args}``) is
    the package's data module without a ``val_dataset`` and with ``val_fraction`` 0, else ``None``
    (a positive fraction holds out a row of each client with two or more: only the data can tell)."""
    if not isinstance(data, dict) or not isinstance(data.get("class_path"), str):
        return None
    rules = class_rules("data", data["class_path"])
    init_args = data.get("init_args")
    if rules is None or not isinstance(init_args, dict) or init_args.get("val_dataset") is not None:
        return None
    rule = next((r for r in rules if r.name == "val_fraction"), None)
    if rule is None or "val_fraction" not in init_args:  # unset: the default, 0.1
        return None
    value = rule.parsed(init_args["val_fraction"])  # `0`, `"0"`: 0.0, as the live parser reads it
    if isinstance(value, float) and value == 0:
        return empty_set_line("validate", None, value, None)
    return None


EVALUATED = {"validate": "val", "test": "test"}
"""The set each evaluating subcommand scores."""


def empty_set_line(stage: str, source: str | None, val_fraction: float, why: str | None) -> str:
    """The line refusing ``stage`` (``validate``, ``test``) whose set holds no example for any client.

    Args:
        stage: The subcommand.
        source: The set's file or dataset name (``data.val_dataset``/``data.test_dataset``); ``None`` for
            validation rows held out of each client's training rows (``data.val_fraction``).
        val_fraction: ``data.val_fraction``.
        why: What left the rows out (the data module's counts), ``None`` if none was left out.
    """
    name = EVALUATED[stage]
    if source is None:
        return (
            f"data.val_fraction={val_fraction} leaves no client a validation example, so validate has nothing"
            " to score; raise data.val_fraction or give data.val_dataset=<file>"
        )
    left = f": {why}" if why else " (no row of it went to a client)"
    return f"data.{name}_dataset {source!r}: no {name} example is left for {stage} to score{left}"


def _some(clients: list[int], shown: int = 8) -> str:
    """``clients`` as a list, the first ``shown`` of a longer one and how many there are."""
    return str(clients) if len(clients) <= shown else f"{str(clients[:shown])[:-1]}, ...] ({len(clients)} clients)"


def planned_clients_line(
    stage: str, plan: str, planned: list[int], holding: list[int], source: str | None, val_fraction: float
) -> str:
    """The line refusing ``stage`` whose evaluation plan picks only clients without an example of its set.

    Args:
        stage: The subcommand (``validate``, ``test``).
        plan: The options that picked them (``federation.eval_clients='panel' (federation.eval_panel_size=1)``).
        planned: The clients picked.
        holding: The clients that have examples of the set.
        source: The set's file or dataset name; ``None`` for rows held out by ``data.val_fraction``.
        val_fraction: ``data.val_fraction``.
    """
    name = EVALUATED[stage]
    given = f"data.{name}_dataset {source!r}" if source is not None else f"data.val_fraction={val_fraction}"
    return (
        f"{plan} picks clients {_some(planned)}, none of which has a {name} example, so {stage} has nothing to"
        f" score ({given} gives examples to clients {_some(holding)}); set federation.eval_clients=all"
    )
