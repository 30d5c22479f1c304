"""Run ``lightning-fed`` and send it SIGTERM from inside a chosen function (for the signal tests).

    python tests/helpers/signal_driver.py lightning.pytorch.trainer.call:_call_setup_hook -- fit --config ...
    python tests/helpers/signal_driver.py --in-del <function> -- fit --config ...

The first call of the named function (``module:Class.method`` or ``module:function``) sends
SIGTERM to this process before doing its work, the way a scheduler's signal lands in that
phase; the exit status is the CLI's. With ``--in-del`` the signal is sent, and its handler runs,
inside an object's ``__del__`` there, where Python prints an exception and drops it ("Exception
ignored in ...", the way a SIGTERM landed in ``regex``'s ``Group.__del__``, issue 41 H2).
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import time


class SignalInDel:
    """Its ``__del__`` sends SIGTERM and runs Python code, between whose bytecodes the handler runs."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10  # ended at once by the handler's exception, dropped with it
        while time.monotonic() < deadline:
            pass


def main() -> None:
    in_del = sys.argv[1] == "--in-del"
    target = sys.argv[2 if in_del else 1]
    cli_args = sys.argv[sys.argv.index("--") + 1 :]
    module_name, qualname = target.split(":")
    owner = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    sent = [False]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not sent[0]:
            sent[0] = True
            sys.stderr.write(f"signal_driver: SIGTERM in {target}{' (in a __del__)' if in_del else ''}\n")
            if in_del:
                SignalInDel()  # dropped at once: its __del__ runs here
            else:
                os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    sys.argv[1:] = cli_args  # as the process has them (a stop line reads --ckpt_path there)
    from lightning_fed.cli import console_main

    sys.exit(console_main(cli_args))


if __name__ == "__main__":
    main()
