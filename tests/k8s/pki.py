"""A throw-away PKI for one control plane: CAs, serving and client certificates, the ServiceAccount key pair.

ECDSA P-256 for the certificates (fast to make), RSA 2048 for the ServiceAccount signing key, which the
API server requires to be RSA or ECDSA and every client library can verify.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, on disk."""

    cert: Path
    key: Path


def _name(common_name: str, organisation: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organisation:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation))
    return x509.Name(attrs)


def _write_key(key: PrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class Pki:
    """Every certificate the four components and the tests need, written under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        self._from = now - datetime.timedelta(hours=1)
        self._until = now + datetime.timedelta(days=30)
        self.ca = self._ca("ca", "tidal-test-ca")
        self.front_proxy_ca = self._ca("front-proxy-ca", "tidal-test-front-proxy-ca")
        self.apiserver = self._issue(
            "apiserver",
            _name("kube-apiserver"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            hosts=[
                "127.0.0.1",
                "::1",
                "10.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )
        self.serving = self._issue(
            "controlplane-serving",
            _name("tidal-test-controlplane"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            hosts=["127.0.0.1", "localhost"],
        )
        self.admin = self._client("admin", "kubernetes-admin", "system:masters")
        self.scheduler = self._client("kube-scheduler", "system:kube-scheduler")
        # The controller manager runs every controller as itself (--use-service-account-credentials=false).
        self.controller_manager = self._client(
            "kube-controller-manager", "system:kube-controller-manager", "system:masters"
        )
        self.kubelet_client = self._client(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"
        )
        self.front_proxy_client = self._issue(
            "front-proxy-client",
            _name("front-proxy-client"),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            ca=self.front_proxy_ca,
        )
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = folder / "sa.key"
        self.sa_pub = folder / "sa.pub"
        _write_key(sa, self.sa_key)
        self.sa_pub.write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _ca(self, stem: str, common_name: str) -> tuple[Issued, PrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._from)
            .not_valid_after(self._until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return self._store(stem, cert, key), key

    def _client(self, stem: str, common_name: str, organisation: str | None = None) -> Issued:
        return self._issue(stem, _name(common_name, organisation), ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self,
        stem: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        *,
        hosts: list[str] | None = None,
        ca: tuple[Issued, PrivateKey] | None = None,
    ) -> Issued:
        ca_issued, ca_key = ca or self.ca
        ca_cert = x509.load_pem_x509_certificate(ca_issued.cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._from)
            .not_valid_after(self._until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return self._store(stem, builder.sign(ca_key, hashes.SHA256()), key)

    def _store(self, stem: str, cert: x509.Certificate, key: PrivateKey) -> Issued:
        issued = Issued(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, issued.key)
        return issued
