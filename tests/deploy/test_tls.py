"""TLS material and SuperNode keys for a deployment, checked without starting Flower.

The deployment itself over TLS with SuperNode authentication is in
``test_flower_deployment.py``; here: the certificate chain verifies in a real TLS handshake
(Python's ``ssl``, host name checked), keys are private to their owner and in the format
Flower reads, and the CLI connection points at the CA.
"""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
import tomllib
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

from lightning_fed.deploy.flower_cli import write_cli_config
from lightning_fed.deploy.local_deployment import LocalDeployment
from lightning_fed.deploy.tls import make_certificates, make_supernode_key

APP = Path(__file__).resolve().parents[2] / "lightning_fed" / "deploy" / "flower_app"


def _handshake(files, server_hostname: str) -> str:
    """A TLS handshake over a socket pair: server with the certificate, client trusting only the CA."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.server_cert, files.server_key)
    client_ctx = ssl.create_default_context(cafile=str(files.ca_cert))
    a, b = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as conn:
                conn.sendall(b"ok")
        except (ssl.SSLError, OSError) as err:
            errors.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_hostname) as conn:
            return conn.recv(2).decode()
    finally:
        thread.join(5)


def test_certificates_verify_for_their_hosts_only(tmp_path):
    files = make_certificates(tmp_path / "tls", hosts=["127.0.0.1", "localhost"])
    assert _handshake(files, "127.0.0.1") == "ok" and _handshake(files, "localhost") == "ok"
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch|Hostname mismatch"):
        _handshake(files, "10.0.0.1")
    other_ca = make_certificates(tmp_path / "other", hosts=["127.0.0.1"]).ca_cert
    mixed = type(files)(other_ca, files.server_cert, files.server_key)
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(mixed, "127.0.0.1")
    assert stat.S_IMODE(files.server_key.stat().st_mode) == 0o600


def test_supernode_key_is_what_flower_reads(tmp_path):
    key = make_supernode_key(tmp_path, "supernode-0")
    private = load_ssh_private_key(key.private_key.read_bytes(), None)  # flower-supernode --auth-supernode-private-key
    public = load_ssh_public_key(key.public_key.read_bytes())  # flwr supernode register
    assert isinstance(private, ec.EllipticCurvePrivateKey) and public.curve.name == "secp384r1"
    assert public.public_numbers() == private.public_key().public_numbers()
    assert stat.S_IMODE(key.private_key.stat().st_mode) == 0o600


def test_cli_connection_uses_the_ca_or_is_insecure(tmp_path):
    ca = make_certificates(tmp_path / "tls").ca_cert
    secure = tomllib.loads(write_cli_config(tmp_path / "a", "lab", "127.0.0.1:9093", ca).read_text())
    assert secure["superlink"] == {
        "default": "lab",
        "lab": {"address": "127.0.0.1:9093", "root-certificates": str(ca.resolve())},
    }
    plain = tomllib.loads(write_cli_config(tmp_path / "b", "lab", "127.0.0.1:9093", None).read_text())
    assert plain["superlink"]["lab"] == {"address": "127.0.0.1:9093", "insecure": True}


def test_supernode_auth_needs_tls(tmp_path):
    with pytest.raises(ValueError, match="supernode_auth=True needs tls"):
        LocalDeployment(APP, num_supernodes=1, workdir=tmp_path, supernode_auth=True)


def test_node_config_inline_or_as_a_toml_file(tmp_path):
    dep = LocalDeployment(
        APP, num_supernodes=2, workdir=tmp_path, node_configs=[{"partition-id": 0}, {"partition-id": 1, "name": "a b"}]
    )
    assert dep._node_config_arg(0) == "partition-id=0"
    path = Path(dep._node_config_arg(1))  # a value with a space cannot go inline
    assert tomllib.loads(path.read_text()) == {"partition-id": 1, "name": "a b"}
