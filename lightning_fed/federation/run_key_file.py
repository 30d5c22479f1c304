"""A run's key file in the per-user key store, and the check of it on resume, with no Lightning imported.

The early checkpoint check (:mod:`~lightning_fed.federation.early_check`) refuses a resumed private
run whose key file is damaged or holds another run's key right after reading the checkpoint, before
Lightning, transformers and PEFT are imported (issue 41: on 1ce1023 the same line came after ~15 s of
CPU, once the model was built); the live CLI applies :func:`check_checkpoint_key` again. The run's
secret itself, and why it is kept this way, is :mod:`~lightning_fed.privacy.secret`.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.errors import CheckpointError
from lightning_fed.federation.key_store import key_dir
from lightning_fed.federation.secret_seed import SecretSeed
from lightning_fed.path_kinds import not_a_file

KEY_BYTES = 32
KEY_SUFFIX = ".key"


def key_file(run_id: str) -> Path:
    """The key file of the run ``run_id`` in the key store: ``<key_dir()>/<run id>.key``."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a lightning-fed run id: {run_id!r}")
    return key_dir() / f"{run_id}{KEY_SUFFIX}"


RUN_ID = re.compile(r"[0-9a-f]{32}")
"""A run id: 128 random bits in hex."""


def new_run_id() -> str:
    """A fresh run id (128 bits from the OS, unrelated to the key and the config)."""
    return os.urandom(16).hex()


class RunSecret:
    """A private run's secret (32 bytes) and the seeds derived from it.

    Its ``repr`` never shows the key, so a stray log line cannot carry it.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a run key is {KEY_BYTES} bytes, got {len(key)}")
        self._key = bytes(key)

    @classmethod
    def fresh(cls) -> RunSecret:
        """A new secret from the operating system's CSPRNG."""
        return cls(secrets.token_bytes(KEY_BYTES))

    def __repr__(self) -> str:
        return "RunSecret(<secret>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunSecret) and hmac.compare_digest(self._key, other._key)

    __hash__ = None  # type: ignore[assignment]

    def seed(self, *label: int | str) -> SecretSeed:
        """The secret seed of the draws named ``label`` (e.g. ``("client sampling",)``): all 256 bits
        of ``HMAC-SHA256(key, label)`` (:class:`~lightning_fed.federation.secret_seed.SecretSeed`)."""
        return SecretSeed(self._key).child("run secret", *label)

    def fingerprint(self) -> str:
        """16 hex digits a checkpoint keeps to recognise this key on resume, revealing nothing of it."""
        return SecretSeed(self._key).fingerprint("key fingerprint")

    # ------------------------------------------------------------------ the key file
    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the key to ``path`` (hex), created with mode 0600 (never widened by the umask).

        ``ValueError`` naming the path when it, or its ``.tmp`` file, is there but not a regular file (a
        FIFO, a folder, a device, a symlink to one): nothing is written through it, and a FIFO never
        blocks the run (red team 15, H3)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        for there in (path, tmp):
            if kind := not_a_file(there):
                raise ValueError(
                    f"{there}: not a lightning-fed run key ({kind}): refusing to write the run's key there"
                )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped in since the check above
                raise ValueError(f"{tmp}: not a regular file: refusing to write the run's key there")
            os.fchmod(fd, 0o600)
            os.write(fd, (self._key.hex() + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunSecret:
        """The secret in the key file ``path``; ``ValueError`` naming the file when it is not one: not hex
        text (random bytes: on 08c1cba a bare ``UnicodeDecodeError``, issue 41 M13), cut, or another length."""
        raw = Path(path).read_bytes()
        try:
            return cls(bytes.fromhex(raw.decode("ascii").strip()))
        except UnicodeDecodeError as err:
            why = f"not hex text: byte {raw[err.start]:#04x} at position {err.start}"
        except ValueError as err:
            why = str(err)
        raise ValueError(f"{path}: not a lightning-fed run key ({why})")


WHAT_TO_DO = "put the run's own key file back, or delete this one to resume with fresh secret randomness"
"""The end of the lines refusing a run's key file (:func:`check_key`)."""


def check_key(state: Mapping[str, Any], ckpt: str | None = None) -> RunSecret | None:
    """The key file's secret for a checkpoint's ``run_key`` state (``{"id", "fingerprint"}``);
    ``None`` when the file is missing (nothing at its path: ``lexists`` false) or the checkpoint has no key
    state. ``ckpt``: the ``ckpt_path`` the lines name first, where known (the option that led to the key file).

    Raises:
        CheckpointError: One line naming ``ckpt`` and the key file when it holds another run's key, or
            is not a key at all (issue 41, M13: random bytes were a bare ``UnicodeDecodeError`` and the
            ``--debug`` hint, a cut key the file and the hint as a second line), or is not a regular file (a
            FIFO, a folder, a symlink to ``/dev/zero``: on 4a8638c resumed as a lost key, red team 15 H3).
    """
    run_id, fingerprint = state.get("id"), state.get("fingerprint")
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        return None
    path = key_file(run_id)
    if not os.path.lexists(path):
        return None
    where = "" if ckpt is None else f"ckpt_path {str(ckpt)!r}: "
    if kind := not_a_file(path):
        raise CheckpointError(f"{where}{path}: not a lightning-fed run key ({kind}): {WHAT_TO_DO}")
    try:
        secret = RunSecret.read(path)
    except ValueError as err:
        raise CheckpointError(f"{where}{err}: {WHAT_TO_DO}") from None
    if fingerprint is not None and not hmac.compare_digest(secret.fingerprint(), str(fingerprint)):
        raise CheckpointError(
            f"{where}{path}: not the key of the run that wrote this checkpoint (its fingerprint differs): {WHAT_TO_DO}"
        )
    return secret


def check_checkpoint_key(checkpoint: Mapping[str, Any], ckpt: str | None = None) -> None:
    """Before a resume writes anything: refuse a checkpoint whose run's key file holds another key or no
    key (:func:`check_key`). ``checkpoint`` is the loaded checkpoint (its ``federation.privacy.run_key``),
    ``ckpt`` its ``ckpt_path``."""
    federation = checkpoint.get("federation") or {}
    privacy = federation.get("privacy") if isinstance(federation, Mapping) else None
    state = privacy.get("run_key") if isinstance(privacy, Mapping) else None
    if isinstance(state, Mapping):
        check_key(state, ckpt)
