"""The property every boundary test checks: an input is accepted, or refused as a user error."""

from __future__ import annotations

from lightning_fed.errors import exit_code, one_line


def assert_user_error(err: BaseException, *names: str) -> str:
    """``err`` is what the CLI reports as exit 2 before training, in one line naming one of ``names``.

    Returns:
        The line.
    """
    assert exit_code(err, training_started=False) == 2, f"exit 1 for an input: {type(err).__name__}: {err}"
    line = one_line(err)
    assert "\n" not in line and line, line
    if names:
        assert any(n in line for n in names), f"names none of {names}: {line}"
    return line
