"""A rule: what one config option accepts, and the one line that refuses a value.

A :class:`Rule` is one option as the user writes it (``model.lr``) with an integer or a number in a
range (open or closed at each end, finite, maybe odd), one of some choices, or also ``null``.
:func:`check` raises the classes' ``ValueError``; :func:`problems` gives the lines to the precheck.
What each option of the package accepts is declared with these in :mod:`lightning_fed.option_rules`.

Imports nothing but the standard library (PyYAML to read a number written as a string).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SEED_MAX = 2**32 - 1
"""numpy's bound on ``seed_everything`` (and on the seeds bounded as it: a hook's, a planted-data
generator's)."""

_INT = re.compile(r"^[-+]?[0-9][0-9_]*$")
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n"}


def _number(value: float) -> str:
    return str(value)


@dataclass(frozen=True)
class Rule:
    """What one option accepts; :meth:`problem` is the one line that refuses a value."""

    option: str
    """The option as the user writes it, section first: ``model.lr``."""
    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    """``low`` itself is refused (``(0, ...``)."""
    high_open: bool = False
    nullable: bool = False
    """``null`` (``None``) is accepted."""
    choices: tuple[str, ...] | None = None
    odd: bool = False
    """Only odd integers (FedBiscuit's number of selectors: majority voting never ties)."""

    @property
    def name(self) -> str:
        """The parameter's name in its class (the option without its section)."""
        return self.option.rsplit(".", 1)[-1]

    def describe(self) -> str:
        """What is accepted, as the message says it: ``in (0, 10.0]``, ``>= 1``, ``one of (...)``."""
        if self.choices is not None:
            text = f"one of {self.choices}"
        elif self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"in {left}{_number(self.low)}, {_number(self.high)}{right}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {_number(self.low)}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {_number(self.high)}"
        else:
            text = "finite"
        return text + (" and odd" if self.odd else "") + (" or null" if self.nullable else "")

    def parsed(self, value: Any) -> Any:
        """``value`` as the CLI's parser hands it to the class: an integer given for a number is a float, and
        a string is read as jsonargparse reads one for a typed ``int``/``float`` parameter, in every section
        alike (``lr: "1e-4"``, ``rounds: "3"``; ``trainer:`` took them, issue 41): as YAML
        (:func:`~lightning_fed.yaml_reading.value_of`), kept if that is a number of the rule's kind, else
        left as the string the parser refuses (``"3.0"`` for an integer, ``"nan"``, ``"four"``)."""
        if self.choices is not None:
            return value
        if isinstance(value, str):
            from lightning_fed.yaml_reading import value_of  # PyYAML only, read by the precheck anyway

            loaded = value_of(value)
            kinds = int if self.integer else (int, float)
            if not isinstance(loaded, kinds) or isinstance(loaded, bool):
                return value
            value = loaded
        return float(value) if not self.integer and isinstance(value, int) and not isinstance(value, bool) else value

    def problem(self, value: Any) -> str | None:
        """The one line refusing ``value``, or ``None`` if it is accepted."""
        if value is None:
            return None if self.nullable else f"{self.option} must be {self.describe()}, got None"
        if self.choices is not None:
            ok = isinstance(value, str) and value in self.choices
            return None if ok else f"{self.option} must be {self.describe()}, got {value!r}"
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return f"{self.option} must be {kind} {self.describe()}, got {value!r}"
        if not math.isfinite(value):
            if self.high is None:  # e.g. `>= 0`: inf is no value either
                return f"{self.option} must be finite and {self.describe()}, got {value}"
            return f"{self.option} must be {self.describe()}, got {value}"
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return f"{self.option} must be {self.describe()}, got {value}"
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return f"{self.option} must be {self.describe()}, got {value}"
        if self.odd and value % 2 == 0:
            return f"{self.option} must be {self.describe()}, got {value}"
        return None


def in_range(option: str, low: float, high: float, **kw: Any) -> Rule:
    """A number (``integer=True``: an integer) in ``[low, high]`` (``low_open``/``high_open``: excluded)."""
    return Rule(option, low=low, high=high, **kw)


def at_least(option: str, low: float, **kw: Any) -> Rule:
    """A finite number (``integer=True``: an integer) ``>= low`` (``low_open=True``: ``> low``)."""
    return Rule(option, low=low, **kw)


def one_of(option: str, choices: Iterable[str], **kw: Any) -> Rule:
    """One of ``choices`` (strings)."""
    return Rule(option, choices=tuple(choices), **kw)


def problems(rules: Iterable[Rule], values: Mapping[str, Any]) -> list[str]:
    """The line of each rule (in declaration order) whose parameter is in ``values`` and refused."""
    return [p for rule in rules if rule.name in values and (p := rule.problem(values[rule.name])) is not None]


def check(rules: Iterable[Rule], **values: Any) -> None:
    """Raise ``ValueError`` with every refused value's line (``"; "``-joined), as the classes do."""
    if found := problems(rules, values):
        raise ValueError("; ".join(found))


def word_fits(kinds: tuple[str, ...], word: str) -> bool:
    """A string the parser may still read as one of ``kinds`` (``"5"`` for an integer, ``"on"`` for a bool)."""
    if kinds_literal(word) in kinds or ("null" in kinds and word.lower() in ("null", "none", "~")):
        return True
    if "int" in kinds and _INT.match(word):
        return True
    if "float" in kinds:
        try:
            float(word.replace("_", ""))
            return True
        except ValueError:
            pass
    return "bool" in kinds and word.lower() in _BOOL_WORDS


def kinds_literal(word: str) -> str:
    """How a ``Literal`` string is written among the kinds of :func:`plain_value_problem` (``'warn'``)."""
    return repr(word)


def _fits(kinds: tuple[str, ...], value: Any) -> bool:
    if value is None:
        return "null" in kinds
    if "str" in kinds:
        return True  # the parser keeps a command-line value as its text (`[0]`, `5`): nothing certain
    if isinstance(value, bool):
        return "bool" in kinds
    if isinstance(value, int):
        return "int" in kinds or "float" in kinds
    if isinstance(value, float):
        return "float" in kinds
    if isinstance(value, str):
        return word_fits(kinds, value.strip())
    if isinstance(value, list) and "list[int]" in kinds:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return False


def plain_value_problem(option: str, kinds: tuple[str, ...], value: Any) -> str | None:
    """The line refusing ``value`` for an option whose type is made of ``kinds`` (``int``, ``float``,
    ``bool``, ``str``, ``null``, ``list[int]``, a ``Literal`` string as ``'warn'``) where the parser
    certainly refuses it (Lightning's ``trainer.*``, :data:`~lightning_fed.trainer_options.TRAINER_TYPES`),
    ``None`` otherwise. Worded as :func:`type_problem`: ``must be an integer or null, got 'abc'``."""
    if _fits(kinds, value):
        return None
    items = ["a number"] if "float" in kinds else (["an integer"] if "int" in kinds else [])
    items += ["true", "false"] if "bool" in kinds else []
    items += [k for k in kinds if k.startswith("'")]
    items += ["a string"] if "str" in kinds else []
    items += ["a list of integers"] if "list[int]" in kinds else []
    items += ["null"] if "null" in kinds else []
    wanted = items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
    return f"{option} must be {wanted}, got {value!r}"


def unknown_key(option: str, owner: str, key: str, accepted: Iterable[str]) -> str:
    """The line refusing ``option.key``, which ``owner`` does not take."""
    names = sorted(accepted)
    near = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"did you mean {option}.{near[0]}?" if near else f"its options: {', '.join(names)}"
    return f"{option}.{key} is not an option of {owner}; {hint}"
