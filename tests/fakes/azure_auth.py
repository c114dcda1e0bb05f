"""What the Azure SDK needs to talk to a local fake: a throw-away TLS certificate and a token credential.

The ARM bearer-token policy refuses plain ``http`` endpoints, so the fake serves HTTPS with a self-signed
certificate made for 127.0.0.1 at test start; clients trust it through ``connection_verify=<cert file>``.
"""

from __future__ import annotations

import datetime
import ipaddress
import threading
import time
from pathlib import Path
from typing import Any

from azure.core.credentials import AccessToken
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

FAKE_TOKEN = "fake-arm-token"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """Write a self-signed certificate and key for 127.0.0.1/localhost; return (cert path, key path)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tidal fake azure")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "fake-azure.crt", directory / "fake-azure.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


class FakeCredential:
    """A TokenCredential that hands out one fixed token and counts how often it was asked."""

    def __init__(self, token: str = FAKE_TOKEN) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        """Return the fixed token, valid for an hour."""
        with self._lock:
            self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)
