"""``lightning-fed flower``'s command line: its options, their checks and its help, read before Flower.

The process itself (:mod:`lightning_fed.deploy.clientapp_process`) imports ``flwr`` and ``httpx``,
which come with the ``flower`` extra (``setup.cfg``). Red team 12 row 6: ``lightning-fed flower
--help`` without the extra printed ``error: ModuleNotFoundError: No module named 'httpx'`` and the
``--debug`` hint; here the help answers without it and says what installs it, and ``flower
clientapp ...`` without it is one line naming the extra (exit 2), as ``evaluate`` names its ``eval``
extra (:data:`lightning_fed.evaluation.arguments.LM_EVAL_MISSING`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from lightning_fed.errors import OneLineParser

EXIT_USAGE = 2
SUPERNODE_DEFAULT_CLIENT_ADDRESS = "127.0.0.1:9094"
"""flwr's ``flwr.supercore.constant.SUPERNODE_DEFAULT_CLIENT_ADDRESS`` (the SuperNode's default Runtime
API address), written here so the help needs no flwr (``tests/deploy`` compares the two)."""
FLOWER_MODULES = ("flwr", "httpx")
"""What :mod:`~lightning_fed.deploy.clientapp_process` imports from the ``flower`` extra."""
NEEDS_EXTRA = "Needs the `flower` extra: pip install 'lightning-fed[flower]'."
FLOWER_MISSING = (
    "lightning-fed flower clientapp needs Flower (module {module}), which is not installed: it comes with"
    " the `flower` extra: pip install 'lightning-fed[flower]'"
)
"""The line refusing ``flower clientapp`` without the extra (:func:`missing_flower_module`)."""


def missing_flower_module() -> str | None:
    """The first of :data:`FLOWER_MODULES` that cannot be imported (found, not imported), or ``None``."""
    for module in FLOWER_MODULES:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def _parser() -> argparse.ArgumentParser:
    """``lightning-fed flower``'s options; an argument error is one line and the tip, as ``report``'s and
    ``plan``'s (:class:`~lightning_fed.errors.OneLineParser`; argparse printed its usage block first)."""
    parser = OneLineParser(
        prog="lightning-fed flower",
        description=f"Flower deployment helpers of lightning-fed. {NEEDS_EXTRA}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{clientapp}")
    app = commands.add_parser(
        "clientapp",
        help="a long-lived ClientApp process for a SuperNode started with --isolation process",
        description=(
            "Claim the ClientApp tasks of one SuperNode (started with --isolation process) and run them in this"
            " process, so the backbone is loaded once per run instead of once per round. Stop it with SIGTERM."
            f" {NEEDS_EXTRA}"
        ),
    )
    app.add_argument(
        "--runtime-api-address",
        default=SUPERNODE_DEFAULT_CLIENT_ADDRESS,
        help=f"host:port of the SuperNode's Runtime API, its --port (default {SUPERNODE_DEFAULT_CLIENT_ADDRESS})",
    )
    security = app.add_mutually_exclusive_group()
    security.add_argument("--insecure", action="store_true", help="plain HTTP to the Runtime API")
    security.add_argument("--root-certificates", help="CA certificate (PEM) of the Runtime API's TLS certificate")
    app.add_argument("--superexec-auth-secret-file", help="the SuperNode's --superexec-auth-secret-file")
    app.add_argument("--parent-pid", type=int, help="exit when this process (the SuperNode) exits")
    app.add_argument("--poll-interval", type=float, default=0.2, help="seconds between claims when idle")
    app.add_argument("--max-tasks", type=int, help="exit after this many tasks (default: run until stopped)")
    return parser


def _check(args: argparse.Namespace) -> tuple[bytes | None, bytes | None]:
    """The certificate and secret bytes; a one-line ``ValueError`` naming the option otherwise."""
    host, _, port = args.runtime_api_address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--runtime-api-address must be host:port, got {args.runtime_api_address!r}")
    if args.poll_interval <= 0:
        raise ValueError(f"--poll-interval must be > 0 seconds, got {args.poll_interval}")
    if args.max_tasks is not None and args.max_tasks < 1:
        raise ValueError(f"--max-tasks must be >= 1, got {args.max_tasks}")
    if args.parent_pid is not None:
        try:
            os.kill(args.parent_pid, 0)
        except ProcessLookupError:
            raise ValueError(f"--parent-pid {args.parent_pid} is not a running process") from None
        except PermissionError:
            pass  # exists, owned by another user
    files = {}
    for option, path in (
        ("--root-certificates", args.root_certificates),
        ("--superexec-auth-secret-file", args.superexec_auth_secret_file),
    ):
        if path is not None:
            try:
                files[option] = Path(path).expanduser().read_bytes()
            except OSError as err:
                raise ValueError(f"{option} {path!r} cannot be read: {err.strerror}") from None
            if not files[option]:
                raise ValueError(f"{option} {path!r} is empty")
    return files.get("--root-certificates"), files.get("--superexec-auth-secret-file")


def main(argv: list[str] | None = None) -> int:
    """``lightning-fed flower clientapp ...``: serve a SuperNode's ClientApp tasks until stopped."""
    args = _parser().parse_args(argv)
    if (module := missing_flower_module()) is not None:
        sys.stderr.write(f"error: {FLOWER_MISSING.format(module=module)}\n")
        return EXIT_USAGE
    try:
        certificates, secret = _check(args)
    except ValueError as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_USAGE
    from lightning_fed.deploy.clientapp_process import serve  # flwr: the extra

    return serve(args, certificates, secret)


if __name__ == "__main__":
    sys.exit(main())
