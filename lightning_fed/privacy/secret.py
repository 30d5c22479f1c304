"""The secret randomness of a private run, and the key file that lets it resume exactly (issues 32, 40).

In a private run (client-level DP, DP-SGD, or FedBiscuit's noised selector losses) every random
choice the privacy guarantee relies on is drawn from one secret: which clients a round samples
(Poisson amplification assumes the sample is unknown), which examples each DP-SGD step takes
(Poisson batches at rate ``B / |D_k|``), and every Gaussian noise draw. Anyone who could
recompute them could subtract the noise or condition on the sample, so none of them may come
from the config's public ``seed``.

:class:`RunSecret` is 32 bytes (256 bits) from the operating system's CSPRNG
(:func:`secrets.token_bytes`, as Opacus' ``secure_mode`` seeds from ``os.urandom``). Each use gets
its own :class:`~lightning_fed.federation.secret_seed.SecretSeed`, ``HMAC-SHA256(key, label)``
(the standard library's PRF: one reveals nothing of the key or of the others), and each draw a
Philox generator keyed by all of its bits, so a draw depends only on (secret, label) and a
resumed run repeats the uninterrupted one.

The secret is never in a checkpoint, a report or a log line. It is written only to the run's
**key file** in the per-user **key store** (:func:`key_dir`: ``$LIGHTNING_FED_KEY_DIR``, else
``$XDG_DATA_HOME/lightning-fed/keys``, else ``~/.local/share/lightning-fed/keys``; created 0700),
``<run id>.key`` with mode 0600, outside any run folder, so copying or sharing a run folder never
carries it. The run id is 128 random bits, not derived from the config. The checkpoint keeps the
run id and a 64-bit fingerprint of the key (a PRF output: it reveals nothing of the key), so a
resume finds the key file, refuses one that is not the run's own key (another valid key swapped
in: exit 2, before anything is written), and, without it, resumes with a fresh secret and says so
in one warning. Deleting the key file makes the run's noise, sample and batches unrecoverable.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.errors import CheckpointError
from lightning_fed.federation.secret_seed import SecretSeed

KEY_BYTES = 32
KEY_SUFFIX = ".key"
KEY_DIR_ENV = "LIGHTNING_FED_KEY_DIR"
"""The environment variable that moves the key store (:func:`key_dir`)."""


def key_dir() -> Path:
    """The per-user key store: ``$LIGHTNING_FED_KEY_DIR``, else ``$XDG_DATA_HOME/lightning-fed/keys``,
    else ``~/.local/share/lightning-fed/keys``."""
    given = os.environ.get(KEY_DIR_ENV)
    if given:
        return Path(given).expanduser().absolute()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser().absolute() / "lightning-fed" / "keys"


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
        """Write the key to ``path`` (hex), created with mode 0600 (never widened by the umask)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
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


def seeded_secret(seed: int) -> RunSecret:
    """The run secret of a test run that fixed a noise seed in its config (``ClientLevelDP.seed``,
    ``model.dp_sgd.seed``): derived from that seed, so such a run is reproducible and *not*
    private against anyone who has its config (tests only)."""
    return RunSecret(hashlib.sha256(f"lightning-fed test seed/{int(seed)}".encode()).digest())


def _make_key_dir(folder: Path) -> None:
    """Create the key store with mode 0700 (the folders it creates; an existing one is left as it is)."""
    missing = []
    for parent in [folder, *folder.parents]:
        if parent.exists():
            break
        missing.append(parent)
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)  # mkdir's mode is narrowed by the umask, never widened: set it


WHAT_TO_DO = "put the run's own key file back, or delete this one to resume with fresh secret randomness"
"""The end of the lines refusing a run's key file (:func:`check_key`)."""


def check_key(state: Mapping[str, Any], ckpt: str | None = None) -> RunSecret | None:
    """The key file's secret for a checkpoint's ``run_key`` state (``{"id", "fingerprint"}``);
    ``None`` when the file is missing (or the checkpoint has no key state). ``ckpt``: the ``ckpt_path``
    the lines name first, where known (the option that led to the key file).

    Raises:
        CheckpointError: One line naming ``ckpt`` and the key file when it holds another run's key, or
            is not a key at all (issue 41, M13: random bytes were a bare ``UnicodeDecodeError`` and the
            ``--debug`` hint, a cut key the file and the hint as a second line).
    """
    run_id, fingerprint = state.get("id"), state.get("fingerprint")
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        return None
    path = key_file(run_id)
    if not path.is_file():
        return None
    where = "" if ckpt is None else f"ckpt_path {str(ckpt)!r}: "
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


class RunKey:
    """A private run's secret and its key file: drawn before training, written with the first
    checkpoint, read back on resume.

    Args:
        secret: The run's secret (:meth:`RunSecret.fresh`, or :func:`seeded_secret` in a test).
        seeded: Whether it comes from a noise seed fixed in the config (tests: not private, no key file).
    """

    def __init__(self, secret: RunSecret, seeded: bool = False) -> None:
        self.secret, self.seeded = secret, seeded
        #: The run's id (128 random bits; names its key file), kept in the checkpoint.
        self.run_id = new_run_id()
        #: The run's key file (:func:`key_file`), set by :meth:`attach` (a training run).
        self.path: Path | None = None
        self._written = False

    def attach(self) -> None:
        """The run trains: a private run keeps its secret in its key file in the key store."""
        if not self.seeded:
            self.path = key_file(self.run_id)

    def save(self) -> None:
        """Write the key file once (mode 0600, key store 0700), with one line saying where it is."""
        if self.path is not None and not self._written:
            _make_key_dir(self.path.parent)
            self.secret.write(self.path)
            self._written = True
            rank_zero_info(
                f"private run: its secret randomness is in {self.path} (mode 0600, outside the run folder): keep it"
                " to resume exactly, never share it; deleting it makes the run's noise and sample unrecoverable"
            )

    def state_dict(self) -> dict[str, str]:
        """What the checkpoint keeps: the run id and the key's fingerprint (nothing of the key)."""
        if self.seeded:
            return {}
        return {"id": self.run_id, "fingerprint": self.secret.fingerprint()}

    def resume(self, state: Mapping[str, Any]) -> bool:
        """On a resumed fit from a checkpoint's :meth:`state_dict`: the key file's secret (an exact
        resume), or a fresh one (new run id), said in one warning; a key file with another key is
        refused (:func:`check_key`). ``False``: nothing to resume (a seeded run, or no run attached:
        ``validate``/``test`` of a checkpoint draws nothing)."""
        if self.seeded or self.path is None:
            return False
        run_id = state.get("id")
        secret = check_key(state)
        if secret is not None:
            self.secret, self.run_id = secret, str(run_id)
            self.path, self._written = key_file(self.run_id), True
            return True
        where = key_file(run_id) if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) else "(none recorded)"
        self.secret, self.run_id = RunSecret.fresh(), new_run_id()
        self.path, self._written = key_file(self.run_id), False
        rank_zero_warn(
            f"resuming a private run without its key file {where}: client sampling, DP-SGD batches and"
            f" noise continue from fresh secret randomness (key file {self.path}), not those of the uninterrupted run"
        )
        return True
