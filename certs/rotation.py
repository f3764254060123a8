"""The webhook's certificates as a state machine over a Secret (pure: data in, data out).

The Secret holds everything, so any replica can run a pass and all of them agree:

=============== =====================================================================================
``ca.crt``      the CA bundle the API server trusts (PEM, one or more CAs): what ``caBundle`` carries
``ca.key``      the key of the *signing* CA, the bundle's CA whose public key matches it
``tls.crt``     the serving certificate, issued by the signing CA
``tls.key``     its key
``next-ca.crt`` only while a CA rotation is under way: the next CA, already trusted, not yet signing
``next-ca.key`` its key
=============== =====================================================================================

and these annotations:

- ``gpucluster.nvidia.com/next-ca-trusted-at``: when the next CA entered the bundle;
- ``gpucluster.nvidia.com/ca-switched-at``: when the signing CA last changed;
- ``gpucluster.nvidia.com/ca-bundle-generation``: bumped at every change of ``ca.crt``, so that an
  injection computed from an older read never overwrites a newer bundle;
- ``gpucluster.nvidia.com/serving``: JSON ``{replica: issuer id}``, what each webhook replica
  reported it serves (the issuer id is the serving certificate's Authority Key Identifier).

Phases (:class:`Phase`), computed from that data, and the transitions :func:`plan` takes, one per pass:

- ``missing`` (no Secret, or material that does not parse, does not match, or has expired)
  -> ``bootstrap``: a new CA and serving certificate. Unexpired CAs of the old bundle stay trusted
  (they may be what replicas serve right now), which makes the result ``overlap``, else ``steady``.
- ``steady`` (the bundle is exactly the signing CA) or ``overlap`` (it also trusts retired CAs):
  the signing CA due for renewal -> ``trust-next-ca``: a new CA joins the bundle as ``next-ca.*``
  -> ``trusting-next``; the serving certificate due (or for the wrong names, or not from the
  signing CA) -> ``renew-serving``; in ``overlap``, once every live replica reports serving from
  the signing CA (or, when replicas cannot be observed, ``Policy.overlap_fallback`` after the
  switch) -> ``prune-bundle`` -> ``steady``. Expired CAs leave the bundle at once.
- ``trusting-next``: once the next CA has been in the bundle for ``Policy.propagation_delay`` and
  every injected ``caBundle`` carries it -> ``switch-ca``: the next CA signs a new serving
  certificate and becomes the signing CA; the old one stays in the bundle -> ``overlap``.

So the API server trusts the new CA before any replica serves a certificate from it, and keeps
trusting the old CA until no replica does: it never rejects the webhook during a rotation.

A certificate is due when less than a third of its lifetime, and at most 30 days, remains.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gpucluster import timestamps
from gpucluster.certs.authority import (
    CA_LIFETIME,
    SERVING_LIFETIME,
    KeyPair,
    new_ca,
    new_serving_cert,
    service_dns_names,
)

CA_BUNDLE = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
NEXT_CA_CERT = "next-ca.crt"
NEXT_CA_KEY = "next-ca.key"
# What a webhook pod may see on disk: never a CA key.
SERVING_FILES = (CA_BUNDLE, TLS_CERT, TLS_KEY)

ANNOTATION_PREFIX = "gpucluster.nvidia.com/"
NEXT_CA_TRUSTED_AT = ANNOTATION_PREFIX + "next-ca-trusted-at"
CA_SWITCHED_AT = ANNOTATION_PREFIX + "ca-switched-at"
BUNDLE_GENERATION = ANNOTATION_PREFIX + "ca-bundle-generation"
SERVING_REPORTS = ANNOTATION_PREFIX + "serving"

MAX_RENEW_WINDOW = dt.timedelta(days=30)


class Phase(enum.StrEnum):
    MISSING = "missing"
    STEADY = "steady"
    TRUSTING_NEXT = "trusting-next"
    OVERLAP = "overlap"


class Action(enum.StrEnum):
    NONE = "none"
    BOOTSTRAP = "bootstrap"
    RENEW_SERVING = "renew-serving"
    TRUST_NEXT_CA = "trust-next-ca"
    SWITCH_CA = "switch-ca"
    PRUNE_BUNDLE = "prune-bundle"


@dataclass(frozen=True)
class Policy:
    """Lifetimes and delays; the defaults are the product's."""

    ca_lifetime: dt.timedelta = CA_LIFETIME
    serving_lifetime: dt.timedelta = SERVING_LIFETIME
    max_renew_window: dt.timedelta = MAX_RENEW_WINDOW
    # How long the next CA is trusted before it signs: every API server must have seen the new
    # caBundle (they watch webhook configurations, so seconds are enough; this is generous).
    propagation_delay: dt.timedelta = dt.timedelta(minutes=2)
    # When replicas cannot be observed: how long retired CAs stay trusted after a switch. Replicas
    # pick a new certificate up within minutes (Secret sync, then a 10 s file poll).
    overlap_fallback: dt.timedelta = dt.timedelta(hours=24)
    ca_common_name: str = "gpucluster-webhook-ca"


@dataclass(frozen=True)
class SecretState:
    """What a pass reads: the Secret's data (decoded) and annotations."""

    data: Mapping[str, bytes]
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """One pass's decision. ``secret`` is the new Secret content, or None when nothing changes."""

    phase: Phase
    action: Action
    reason: str
    secret: SecretState | None
    bundle: bytes  # the CA bundle to inject (the Secret's ca.crt after this pass)
    generation: int  # its generation

    @property
    def changed(self) -> bool:
        return self.secret is not None


# --- reading certificates ---------------------------------------------------------------------


def split_pem_bundle(bundle: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle (ValueError when something in it does not parse)."""
    if not bundle.strip():
        return []
    return x509.load_pem_x509_certificates(bundle)


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def join_bundle(certs: Sequence[x509.Certificate]) -> bytes:
    """A PEM bundle with each certificate once, in order."""
    seen: set[bytes] = set()
    out = b""
    for cert in certs:
        der = cert.public_bytes(serialization.Encoding.DER)
        if der not in seen:
            seen.add(der)
            out += pem(cert)
    return out


def _spki(key: object) -> bytes:
    if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)):
        raise ValueError("unsupported key type")
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    """True when ``key_pem`` is the private key of ``cert``."""
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    try:
        return _spki(key.public_key()) == _spki(cert.public_key())
    except ValueError:
        return False


def ca_id(ca: x509.Certificate) -> str:
    """How a CA is named in serving reports: its Subject Key Identifier (hex)."""
    try:
        ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        return ski.digest.hex()
    except x509.ExtensionNotFound:
        return x509.SubjectKeyIdentifier.from_public_key(ca.public_key()).digest.hex()


def issuer_id(leaf: x509.Certificate) -> str:
    """The issuing CA's id as a serving certificate names it: its Authority Key Identifier (hex)."""
    try:
        aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        if aki.key_identifier is not None:
            return aki.key_identifier.hex()
    except x509.ExtensionNotFound:
        pass
    return "issuer:" + hashlib.sha256(leaf.issuer.public_bytes()).hexdigest()


def dns_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return set(san.get_values_for_type(x509.DNSName))


def renew_window(cert: x509.Certificate, max_window: dt.timedelta = MAX_RENEW_WINDOW) -> dt.timedelta:
    """A third of the certificate's lifetime, at most ``max_window``."""
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return min(lifetime / 3, max_window)


def renew_at(cert: x509.Certificate, max_window: dt.timedelta = MAX_RENEW_WINDOW) -> dt.datetime:
    """When the certificate becomes due for renewal."""
    return cert.not_valid_after_utc - renew_window(cert, max_window)


def is_due(cert: x509.Certificate, now: dt.datetime, max_window: dt.timedelta = MAX_RENEW_WINDOW) -> bool:
    return now >= renew_at(cert, max_window)


def _valid_at(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def issued_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _timestamp(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return timestamps.parse(value)
    except ValueError:
        return None


def _format_time(moment: dt.datetime) -> str:
    return timestamps.rfc3339(moment)


def _generation(annotations: Mapping[str, str]) -> int:
    try:
        return int(annotations.get(BUNDLE_GENERATION, "0"))
    except ValueError:
        return 0


# --- serving reports ----------------------------------------------------------------------------


def parse_reports(annotations: Mapping[str, str]) -> dict[str, str]:
    """``{replica: issuer id}`` from the serving annotation (empty when absent or malformed)."""
    try:
        raw = json.loads(annotations.get(SERVING_REPORTS, "{}"))
    except json.JSONDecodeError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, str)}


def record_report(
    annotations: Mapping[str, str],
    *,
    replica: str | None = None,
    serving: str | None = None,
    live: Sequence[str] | None = None,
) -> dict[str, str]:
    """Annotations with ``replica``'s report set to ``serving`` and, when the live replicas are
    known, reports of replicas that are gone dropped."""
    reports = parse_reports(annotations)
    if replica and serving:
        reports[replica] = serving
    if live is not None:
        keep = set(live) | ({replica} if replica else set())
        reports = {k: v for k, v in reports.items() if k in keep}
    out = dict(annotations)
    if reports:
        out[SERVING_REPORTS] = json.dumps(dict(sorted(reports.items())), separators=(",", ":"))
    else:
        out.pop(SERVING_REPORTS, None)
    return out


def replica_view(annotations: Mapping[str, str], live: Sequence[str] | None) -> dict[str, str | None] | None:
    """What :func:`plan` takes as ``replicas``: each live replica's report (None: not reported)."""
    if live is None:
        return None
    reports = parse_reports(annotations)
    return {name: reports.get(name) for name in live}


# --- the state ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Material:
    """A parsed, consistent Secret."""

    bundle: list[x509.Certificate]
    signing: KeyPair
    signing_cert: x509.Certificate
    leaf: x509.Certificate | None  # None: missing or unusable (renew)
    next_ca: KeyPair | None
    next_cert: x509.Certificate | None


def _parse(secret: SecretState | None, now: dt.datetime) -> tuple[_Material | None, str]:
    """The Secret's material, or None and why it cannot be used."""
    if secret is None:
        return None, "no Secret yet"
    data = secret.data
    for key in (CA_BUNDLE, CA_KEY):
        if not data.get(key):
            return None, f"the Secret has no {key}"
    try:
        bundle = split_pem_bundle(data[CA_BUNDLE])
    except ValueError:
        return None, f"{CA_BUNDLE} does not parse"
    signing_cert = next((c for c in bundle if key_matches(c, data[CA_KEY])), None)
    if signing_cert is None:
        return None, f"{CA_KEY} matches no CA of {CA_BUNDLE}"
    if not _is_ca(signing_cert):
        return None, "the signing certificate is not a CA"
    if not _valid_at(signing_cert, now):
        return None, "the signing CA has expired"
    signing = KeyPair(pem(signing_cert), data[CA_KEY])
    leaf: x509.Certificate | None = None
    try:
        if data.get(TLS_CERT) and data.get(TLS_KEY):
            candidate = x509.load_pem_x509_certificate(data[TLS_CERT])
            if key_matches(candidate, data[TLS_KEY]):
                leaf = candidate
    except ValueError:
        leaf = None
    next_ca: KeyPair | None = None
    next_cert: x509.Certificate | None = None
    if data.get(NEXT_CA_CERT) and data.get(NEXT_CA_KEY):
        try:
            next_candidate: x509.Certificate | None = x509.load_pem_x509_certificate(data[NEXT_CA_CERT])
        except ValueError:
            next_candidate = None
        if (
            next_candidate is not None
            and key_matches(next_candidate, data[NEXT_CA_KEY])
            and _valid_at(next_candidate, now)
        ):
            next_ca, next_cert = KeyPair(pem(next_candidate), data[NEXT_CA_KEY]), next_candidate
    return _Material(bundle, signing, signing_cert, leaf, next_ca, next_cert), ""


def _same(a: x509.Certificate, b: x509.Certificate) -> bool:
    return a.public_bytes(serialization.Encoding.DER) == b.public_bytes(serialization.Encoding.DER)


def phase_of(secret: SecretState | None, now: dt.datetime) -> Phase:
    """The phase of a Secret at ``now``."""
    material, _ = _parse(secret, now)
    return _phase(material)


def _phase(material: _Material | None) -> Phase:
    if material is None:
        return Phase.MISSING
    if material.next_cert is not None:
        return Phase.TRUSTING_NEXT
    if any(not _same(c, material.signing_cert) for c in material.bundle):
        return Phase.OVERLAP
    return Phase.STEADY


def _serving_problem(material: _Material, names: set[str], now: dt.datetime, policy: Policy) -> str | None:
    """Why the serving certificate must be reissued, or None."""
    leaf = material.leaf
    if leaf is None:
        return "no usable serving certificate"
    if not issued_by(leaf, material.signing_cert):
        return "the serving certificate is not from the signing CA"
    if dns_names(leaf) != names:
        return "the serving certificate's names differ from " + ", ".join(sorted(names))
    if now >= leaf.not_valid_after_utc:
        return f"the serving certificate expired {_format_time(leaf.not_valid_after_utc)}"
    if now < leaf.not_valid_before_utc:
        return f"the serving certificate is not valid before {_format_time(leaf.not_valid_before_utc)}"
    if is_due(leaf, now, policy.max_renew_window):
        return f"the serving certificate expires {_format_time(leaf.not_valid_after_utc)}"
    return None


def plan(
    secret: SecretState | None,
    *,
    now: dt.datetime,
    service: str,
    namespace: str,
    replicas: Mapping[str, str | None] | None = None,
    injected: Sequence[bytes] | None = None,
    extra_dns_names: Sequence[str] = (),
    policy: Policy = Policy(),
) -> Plan:
    """Decide one pass.

    ``replicas`` maps each live webhook replica to the issuer id it reported serving with (None:
    not reported yet); None means replicas cannot be observed. ``injected`` holds the caBundle of
    every webhook of our configurations (None: unknown, rely on ``policy.propagation_delay``).
    """
    names = set(service_dns_names(service, namespace)) | set(extra_dns_names)
    material, why = _parse(secret, now)
    phase = _phase(material)
    annotations = dict(secret.annotations) if secret else {}
    generation = _generation(annotations)
    if material is None:
        return _bootstrap(secret, annotations, generation, sorted(names), now, policy, why)

    data = dict(secret.data) if secret else {}
    bundle = list(material.bundle)

    def result(action: Action, reason: str, new_bundle: list[x509.Certificate] | None = None) -> Plan:
        gen = generation
        if new_bundle is not None:
            bundle_pem = join_bundle(new_bundle)
            if bundle_pem != data.get(CA_BUNDLE):
                data[CA_BUNDLE] = bundle_pem
                gen += 1
                annotations[BUNDLE_GENERATION] = str(gen)
        return Plan(phase, action, reason, SecretState(data, annotations), data[CA_BUNDLE], gen)

    def issue(ca: KeyPair) -> None:
        pair = new_serving_cert(ca, sorted(names), lifetime=policy.serving_lifetime, now=now)
        data[TLS_CERT], data[TLS_KEY] = pair.cert_pem, pair.key_pem

    # Expired CAs are useless to everyone: drop them whatever else happens.
    live_bundle = [c for c in bundle if _valid_at(c, now) or _same(c, material.signing_cert)]
    if len(live_bundle) != len(bundle):
        dropped = len(bundle) - len(live_bundle)
        return result(Action.PRUNE_BUNDLE, f"{dropped} expired CA(s) left the bundle", live_bundle)

    if phase is Phase.TRUSTING_NEXT:
        assert material.next_ca is not None and material.next_cert is not None
        if not any(_same(c, material.next_cert) for c in bundle):  # repair: the next CA must be trusted
            annotations[NEXT_CA_TRUSTED_AT] = _format_time(now)
            return result(Action.TRUST_NEXT_CA, "the next CA joined the bundle", [*bundle, material.next_cert])
        trusted_at = _timestamp(annotations.get(NEXT_CA_TRUSTED_AT))
        if trusted_at is None:  # start the clock now
            annotations[NEXT_CA_TRUSTED_AT] = _format_time(now)
            return result(Action.NONE, "recording when the next CA became trusted")
        next_pem = pem(material.next_cert)
        everywhere = injected is None or all(next_pem in b for b in injected)
        if now >= trusted_at + policy.propagation_delay and everywhere:
            issue(material.next_ca)
            data[CA_KEY] = material.next_ca.key_pem
            del data[NEXT_CA_CERT], data[NEXT_CA_KEY]
            annotations.pop(NEXT_CA_TRUSTED_AT, None)
            annotations[CA_SWITCHED_AT] = _format_time(now)
            return result(Action.SWITCH_CA, "the next CA is trusted everywhere and now signs")
        problem = _serving_problem(material, names, now, policy)
        if problem:
            issue(material.signing)
            return result(Action.RENEW_SERVING, problem)
        waiting = (
            "for every webhook's caBundle to carry it"
            if not everywhere
            else f"until {_format_time(trusted_at + policy.propagation_delay)}"
        )
        return Plan(
            phase, Action.NONE, f"the next CA is trusted; it signs {waiting}", None, data[CA_BUNDLE], generation
        )

    if is_due(material.signing_cert, now, policy.max_renew_window):
        next_ca = new_ca(policy.ca_common_name, now=now, lifetime=policy.ca_lifetime)
        data[NEXT_CA_CERT], data[NEXT_CA_KEY] = next_ca.cert_pem, next_ca.key_pem
        annotations[NEXT_CA_TRUSTED_AT] = _format_time(now)
        reason = f"the signing CA expires {_format_time(material.signing_cert.not_valid_after_utc)}"
        return result(Action.TRUST_NEXT_CA, reason, [*bundle, next_ca.certificate])

    problem = _serving_problem(material, names, now, policy)
    if problem:
        issue(material.signing)
        return result(Action.RENEW_SERVING, problem)

    if phase is Phase.OVERLAP:
        signing_id = ca_id(material.signing_cert)
        if replicas is not None:
            behind = sorted(r for r, served in replicas.items() if served != signing_id)
            if not behind:
                return result(Action.PRUNE_BUNDLE, "every replica serves from the signing CA", [material.signing_cert])
            reason = "waiting for replicas to serve from the signing CA: " + ", ".join(behind)
        else:
            switched = _timestamp(annotations.get(CA_SWITCHED_AT))
            if switched is None:  # start the clock now
                annotations[CA_SWITCHED_AT] = _format_time(now)
                return result(Action.NONE, "recording when retired CAs began to overlap")
            if now >= switched + policy.overlap_fallback:
                reason = f"retired CAs trusted for {policy.overlap_fallback} after the switch; replicas unobservable"
                return result(Action.PRUNE_BUNDLE, reason, [material.signing_cert])
            reason = f"retired CAs stay trusted until {_format_time(switched + policy.overlap_fallback)}"
        return Plan(phase, Action.NONE, reason, None, data[CA_BUNDLE], generation)

    return Plan(phase, Action.NONE, "certificates are current", None, data[CA_BUNDLE], generation)


def _bootstrap(
    secret: SecretState | None,
    annotations: dict[str, str],
    generation: int,
    names: list[str],
    now: dt.datetime,
    policy: Policy,
    why: str,
) -> Plan:
    """A fresh CA and serving certificate; unexpired CAs of an unusable bundle stay trusted."""
    retained: list[x509.Certificate] = []
    if secret is not None:
        try:
            retained = [c for c in split_pem_bundle(secret.data.get(CA_BUNDLE, b"")) if _valid_at(c, now)]
        except ValueError:
            retained = []
    ca = new_ca(policy.ca_common_name, now=now, lifetime=policy.ca_lifetime)
    pair = new_serving_cert(ca, names, lifetime=policy.serving_lifetime, now=now)
    bundle = join_bundle([*retained, ca.certificate])
    for key in (NEXT_CA_TRUSTED_AT, SERVING_REPORTS):
        annotations.pop(key, None)
    annotations[CA_SWITCHED_AT] = _format_time(now)
    annotations[BUNDLE_GENERATION] = str(generation + 1)
    data = {CA_BUNDLE: bundle, CA_KEY: ca.key_pem, TLS_CERT: pair.cert_pem, TLS_KEY: pair.key_pem}
    return Plan(Phase.MISSING, Action.BOOTSTRAP, why, SecretState(data, annotations), bundle, generation + 1)
