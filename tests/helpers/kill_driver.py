"""Run ``lightning-fed fit`` and SIGKILL it at a chosen point (for the kill -9 resume tests).

    python tests/helpers/kill_driver.py batch 7 -- fit --config ...   # after the 7th training batch
    python tests/helpers/kill_driver.py save 2 -- fit --config ...    # halfway through writing the 2nd checkpoint
    python tests/helpers/kill_driver.py state 3 -- fit --config ...   # halfway through the 3rd client state file
    python tests/helpers/kill_driver.py none 0 -- fit --config ...    # no kill

The kill is a real ``kill -9`` of this process: no ``finally``, no atexit, no flush.
"""

from __future__ import annotations

import os
import signal
import sys


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    mode, at = sys.argv[1], int(sys.argv[2])
    cli_args = sys.argv[sys.argv.index("--") + 1 :]
    if mode == "batch":
        from lightning_fed.callbacks import FederatedLoop

        step = FederatedLoop.on_train_batch_end
        seen = [0]

        def on_train_batch_end(self, *args, **kwargs):  # noqa: ANN001
            step(self, *args, **kwargs)
            seen[0] += 1
            if seen[0] == at:
                _die()

        FederatedLoop.on_train_batch_end = on_train_batch_end
    elif mode in ("save", "state"):
        from lightning_fed.federation import checkpoint_io

        write = checkpoint_io.write_chunks
        saves = [0]
        kind = ".ckpt." if mode == "save" else ".safetensors."  # the temporary file is <name>.<pid>.tmp

        def write_chunks(f, data, chunk=1 << 22):  # noqa: ANN001
            if kind in os.path.basename(f.name):
                saves[0] += 1
                if saves[0] == at:
                    f.write(data[: len(data) // 2])
                    f.flush()
                    _die()
            write(f, data, chunk)

        checkpoint_io.write_chunks = write_chunks
    from lightning_fed.cli import main as cli_main

    cli_main(cli_args)


if __name__ == "__main__":
    main()
