"""Run ``lightning-fed`` and send it SIGTERM from inside a chosen function (for the signal tests).

    python tests/helpers/signal_driver.py lightning.pytorch.trainer.call:_call_setup_hook -- fit --config ...

The first call of the named function (``module:Class.method`` or ``module:function``) sends
SIGTERM to this process before doing its work, the way a scheduler's signal lands in that
phase; the exit status is the CLI's.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys


def main() -> None:
    target = sys.argv[1]
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
            sys.stderr.write(f"signal_driver: SIGTERM in {target}\n")
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    from lightning_fed.cli import console_main

    sys.exit(console_main(cli_args))


if __name__ == "__main__":
    main()
