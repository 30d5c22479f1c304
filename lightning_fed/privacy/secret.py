"""The secret randomness of a private run, and the key file that lets it resume exactly (issue 32).

In a private run (client-level DP, DP-SGD, or FedBiscuit's noised selector losses) every random
choice the privacy guarantee relies on is drawn from one secret: which clients a round samples
(Poisson amplification assumes the sample is unknown), which examples each DP-SGD step takes
(Poisson batches at rate ``B / |D_k|``), and every Gaussian noise draw. Anyone who could
recompute them could subtract the noise or condition on the sample, so none of them may come
from the config's public ``seed``.

:class:`RunSecret` is 32 bytes from the operating system's CSPRNG (:func:`secrets.token_bytes`,
as Opacus' ``secure_mode`` seeds from ``os.urandom``). Each use gets its own 63-bit seed,
``HMAC-SHA256(key, label)`` (the standard library's PRF: one seed reveals nothing of the key or
of the others), which seeds a ``torch.Generator`` for that draw, so a draw depends only on
(secret, label) and a resumed run repeats the uninterrupted one.

The secret is never in a checkpoint, a report or a log line. It is written only to the run's
**key file** :func:`key_file`, ``.<run folder name>.key`` next to (not inside) the run folder,
created with mode 0600 (hidden, so a ``report 'runs/x/lightning_logs/*'`` glob never picks it
up). Resuming from ``<run folder>/checkpoints/last.ckpt`` reads it back and continues exactly;
without it the run resumes with a fresh secret and says so in one warning.
Share a run folder freely; keep the key file to yourself (or delete it once the run is done).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.federation.secret_seed import SecretSeed

KEY_BYTES = 32
KEY_SUFFIX = ".key"


def key_file(run_dir: str | os.PathLike[str]) -> Path:
    """The key file of the run in ``run_dir``: ``<parent>/.<run folder name>.key``, outside the folder."""
    run = Path(run_dir).absolute()
    return run.parent / f".{run.name}{KEY_SUFFIX}"


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
        """The secret in the key file ``path``; ``ValueError`` naming the file when it is not one."""
        text = Path(path).read_text().strip()
        try:
            return cls(bytes.fromhex(text))
        except ValueError as err:
            raise ValueError(f"{path}: not a lightning-fed run key ({err})") from None


def seeded_secret(seed: int) -> RunSecret:
    """The run secret of a test run that fixed a noise seed in its config (``ClientLevelDP.seed``,
    ``model.dp_sgd.seed``): derived from that seed, so such a run is reproducible and *not*
    private against anyone who has its config (tests only)."""
    return RunSecret(hashlib.sha256(f"lightning-fed test seed/{int(seed)}".encode()).digest())


class RunKey:
    """A private run's secret and its key file: drawn before training, written with the first
    checkpoint, read back on resume.

    Args:
        secret: The run's secret (:meth:`RunSecret.fresh`, or :func:`seeded_secret` in a test).
        seeded: Whether it comes from a noise seed fixed in the config (tests: not private, no key file).
    """

    def __init__(self, secret: RunSecret, seeded: bool = False) -> None:
        self.secret, self.seeded = secret, seeded
        #: The run's key file (:func:`key_file`), set by :meth:`attach`.
        self.path: Path | None = None
        self._written = False

    def attach(self, run_dir: str | os.PathLike[str]) -> None:
        """The run folder is known: a private run keeps its secret in the key file next to it."""
        if not self.seeded:
            self.path = key_file(run_dir)

    def save(self) -> None:
        """Write the key file once (mode 0600), with one line saying where it is."""
        if self.path is not None and not self._written:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.secret.write(self.path)
            self._written = True
            rank_zero_info(
                f"private run: its secret randomness is in {self.path} (mode 0600): keep it to resume"
                " exactly, never share it with the run folder"
            )

    def resume(self) -> bool:
        """On a resumed fit: the key file's secret (an exact resume), or a fresh one, said in one
        warning. ``False``: nothing to resume (a seeded run, or no run attached: ``validate``/``test``
        of a checkpoint draws nothing)."""
        if self.seeded or self.path is None:
            return False
        if self.path.is_file():
            self.secret = RunSecret.read(self.path)
            self._written = True
        else:
            rank_zero_warn(
                f"resuming a private run without its key file {self.path}: client sampling, DP-SGD batches and"
                " noise continue from fresh secret randomness, not those of the uninterrupted run"
            )
            self.secret = RunSecret.fresh()
            self._written = False
        return True
