"""A certificate authority and serving certificates for the webhook (pure: PEM bytes in and out)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = dt.timedelta(days=3650)
SERVING_LIFETIME = dt.timedelta(days=365)
# Backdate so that a node whose clock is a little behind still accepts a brand-new certificate.
_CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


# An ECDSA serving key only signs the TLS handshake.
_LEAF_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=False,
    crl_sign=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(
    common_name: str = "gpucluster-webhook-ca",
    *,
    now: dt.datetime | None = None,
    lifetime: dt.timedelta = CA_LIFETIME,
) -> KeyPair:
    """A self-signed CA (ECDSA P-256, 10 years unless ``lifetime`` says otherwise)."""
    now = now or dt.datetime.now(dt.UTC)
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + lifetime)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach a Service."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def new_serving_cert(
    ca: KeyPair,
    dns_names: list[str],
    *,
    ip_addresses: list[str] | None = None,
    lifetime: dt.timedelta = SERVING_LIFETIME,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A serving certificate signed by ``ca`` for ``dns_names`` (and IPs), ECDSA P-256.

    It never outlives its issuer: ``notAfter`` is the earlier of ``now + lifetime`` and the CA's.
    """
    import ipaddress

    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses or []]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])])
    return _leaf(ca, subject, ExtendedKeyUsageOID.SERVER_AUTH, lifetime, now, sans)


def new_client_cert(
    ca: KeyPair,
    common_name: str,
    organizations: list[str] | None = None,
    *,
    lifetime: dt.timedelta = SERVING_LIFETIME,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A client certificate signed by ``ca``: kube-apiserver's x509 authenticator takes the
    common name as the user name and each organization as a group."""
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations or []]
    return _leaf(ca, x509.Name(attributes), ExtendedKeyUsageOID.CLIENT_AUTH, lifetime, now, None)


def _leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    lifetime: dt.timedelta,
    now: dt.datetime | None,
    sans: list[x509.GeneralName] | None,
) -> KeyPair:
    now = now or dt.datetime.now(dt.UTC)
    ca_cert = ca.certificate
    not_after = min(now + lifetime, ca_cert.not_valid_after_utc)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an ECDSA key")
    key = _new_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = (
        builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(_LEAF_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
