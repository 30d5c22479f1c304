"""TLS certificates and SuperNode authentication keys for a Flower deployment.

Flower 1.41 secures a deployment in two layers (see Flower's "Enable TLS connections" and
"Authenticate SuperNodes" guides):

* **TLS**: the SuperLink serves its Fleet, Control and Runtime APIs over HTTPS with
  ``--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile``; SuperNodes verify it with
  ``--root-certificates <ca>``, the ``flwr`` CLI with ``root-certificates`` in its
  ``config.toml``. The certificate must name the address clients dial (IP or DNS SAN).
* **SuperNode authentication** (needs TLS): the SuperLink runs with
  ``--enable-supernode-auth`` and accepts only SuperNodes whose public key was registered with
  ``flwr supernode register <public key>``; each SuperNode signs its requests with
  ``--auth-supernode-private-key``. Keys are EC on a NIST curve, in OpenSSH format.

:func:`make_certificates` writes a private CA and a server certificate signed by it, for tests
and for trying TLS on one machine; :func:`make_supernode_key` writes one SuperNode's key pair.
Both use ``cryptography``, a dependency of ``flwr``. For a real federation use certificates
from your own CA and keep every private key on its machine.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a SuperLink's TLS: the CA that signed it, its certificate and private key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class SuperNodeKey:
    """One SuperNode's authentication key pair (OpenSSH format, EC P-384)."""

    private_key: Path
    public_key: Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a private key is for its owner only
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "lightning-fed"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_certificates(
    folder: str | os.PathLike, hosts: Sequence[str] = ("127.0.0.1", "localhost"), days: int = 7
) -> TlsFiles:
    """Write ``ca.crt``, ``server.pem`` and ``server.key`` to ``folder``: a fresh private CA
    and a SuperLink certificate it signed, valid for ``hosts`` (IP addresses or DNS names).

    Raises:
        ValueError: If ``hosts`` is empty or ``days`` is not positive.
    """
    if not hosts:
        raise ValueError("make_certificates: hosts must name at least one address, got none")
    if days < 1:
        raise ValueError(f"make_certificates: days must be >= 1, got {days}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)  # tolerate small clock skew
    until = now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("lightning-fed test CA"))
        .issuer_name(_name("lightning-fed test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA384())
    )

    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.server_key,
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return files


def make_supernode_key(folder: str | os.PathLike, name: str) -> SuperNodeKey:
    """Write ``<name>`` (private) and ``<name>.pub`` (public) to ``folder``: a SuperNode's EC
    P-384 key pair in OpenSSH format, as ``flwr supernode register`` and ``flower-supernode
    --auth-supernode-private-key`` read them."""
    folder = Path(folder)
    key = ec.generate_private_key(ec.SECP384R1())
    files = SuperNodeKey(folder / name, folder / f"{name}.pub")
    _write_private(
        files.private_key,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ),
    )
    files.public_key.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n"
    )
    return files


def superlink_security_args(tls: TlsFiles | None, supernode_auth: bool = False) -> list[str]:
    """``flower-superlink`` options: HTTPS with these files (and SuperNode authentication), or ``--insecure``."""
    if tls is None:
        return ["--insecure"]
    args = ["--ssl-ca-certfile", str(tls.ca_cert), "--ssl-certfile", str(tls.server_cert)]
    args += ["--ssl-keyfile", str(tls.server_key)]
    return args + (["--enable-supernode-auth"] if supernode_auth else [])


def supernode_security_args(tls: TlsFiles | None, key: SuperNodeKey | None = None) -> list[str]:
    """``flower-supernode`` options: verify the SuperLink against the CA (signing with ``key``), or ``--insecure``."""
    if tls is None:
        return ["--insecure"]
    args = ["--root-certificates", str(tls.ca_cert)]
    return args + (["--auth-supernode-private-key", str(key.private_key)] if key is not None else [])
