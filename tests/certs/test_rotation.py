"""The certificate state machine over simulated time.

A simulated deployment: a Secret, the caBundle the API server trusts (injected after each pass),
and replicas that each serve the serving certificate they last loaded (they pick the Secret's up
some passes later). At every step the API server must trust what every replica serves.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from gpucluster.certs import rotation as r
from gpucluster.certs.authority import new_ca, new_serving_cert, service_dns_names

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
SVC, NS = "gpucluster-webhook", "gpu-operator"
# Short lifetimes keep simulated years cheap: a 30-day CA, a 9-day serving certificate.
FAST = r.Policy(
    ca_lifetime=dt.timedelta(days=30),
    serving_lifetime=dt.timedelta(days=9),
    propagation_delay=dt.timedelta(minutes=5),
    overlap_fallback=dt.timedelta(days=1),
)


def plan(secret: r.SecretState | None, now: dt.datetime, policy: r.Policy = FAST, **kw: object) -> r.Plan:
    return r.plan(secret, now=now, service=SVC, namespace=NS, policy=policy, **kw)  # type: ignore[arg-type]


def leaf_of(state: r.SecretState) -> x509.Certificate:
    return x509.load_pem_x509_certificate(state.data[r.TLS_CERT])


def bundle_of(state: r.SecretState) -> list[x509.Certificate]:
    return r.split_pem_bundle(state.data[r.CA_BUNDLE])


def trusted(leaf_pem: bytes, bundle: bytes) -> bool:
    leaf = x509.load_pem_x509_certificate(leaf_pem)
    return any(r.issued_by(leaf, ca) for ca in r.split_pem_bundle(bundle))


# --- single transitions -----------------------------------------------------------------------


def test_fresh_install_bootstraps_a_ca_and_a_serving_certificate() -> None:
    p = plan(None, T0, r.Policy())
    assert (p.phase, p.action, p.changed) == (r.Phase.MISSING, r.Action.BOOTSTRAP, True)
    assert p.secret is not None
    assert set(p.secret.data) == {r.CA_BUNDLE, r.CA_KEY, r.TLS_CERT, r.TLS_KEY}
    (ca,) = bundle_of(p.secret)
    leaf = leaf_of(p.secret)
    assert ca.not_valid_after_utc - ca.not_valid_before_utc == dt.timedelta(days=3650, minutes=5)
    assert leaf.not_valid_after_utc - T0 == dt.timedelta(days=365)
    assert r.issued_by(leaf, ca) and r.key_matches(leaf, p.secret.data[r.TLS_KEY])
    assert r.key_matches(ca, p.secret.data[r.CA_KEY])
    assert p.bundle == p.secret.data[r.CA_BUNDLE] and p.generation == 1
    assert r.phase_of(p.secret, T0) is r.Phase.STEADY


def test_serving_certificate_names_usages_and_key() -> None:
    p = plan(None, T0, r.Policy(), extra_dns_names=["webhook.example.com"])
    assert p.secret is not None
    leaf = leaf_of(p.secret)
    assert r.dns_names(leaf) == {
        "gpucluster-webhook",
        "gpucluster-webhook.gpu-operator",
        "gpucluster-webhook.gpu-operator.svc",
        "gpucluster-webhook.gpu-operator.svc.cluster.local",
        "webhook.example.com",
    }
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)
    assert leaf.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    (ca,) = bundle_of(p.secret)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert r.issuer_id(leaf) == r.ca_id(ca)


def test_steady_state_changes_nothing() -> None:
    secret = plan(None, T0).secret
    for hours in (0, 1, 24, 24 * 5):
        p = plan(secret, T0 + dt.timedelta(hours=hours))
        assert (p.phase, p.action, p.changed) == (r.Phase.STEADY, r.Action.NONE, False), p.reason


@pytest.mark.parametrize(
    ("lifetime", "due_after"),
    [
        (dt.timedelta(days=9), dt.timedelta(days=6)),  # a third of 9 days remains after 6
        (dt.timedelta(days=365), dt.timedelta(days=335)),  # a third is 121 days: capped at 30
    ],
)
def test_serving_renewal_at_a_third_of_the_lifetime_at_most_30_days(
    lifetime: dt.timedelta, due_after: dt.timedelta
) -> None:
    policy = r.Policy(serving_lifetime=lifetime)
    secret = plan(None, T0, policy).secret
    assert secret is not None
    before = plan(secret, T0 + due_after - dt.timedelta(hours=1), policy)
    assert before.action is r.Action.NONE
    due = plan(secret, T0 + due_after + dt.timedelta(minutes=6), policy)  # past the 5-minute backdate
    assert due.action is r.Action.RENEW_SERVING and due.secret is not None
    assert due.secret.data[r.CA_BUNDLE] == secret.data[r.CA_BUNDLE]  # same CA, no bundle change
    assert due.secret.data[r.CA_KEY] == secret.data[r.CA_KEY]
    assert due.generation == before.generation
    assert leaf_of(due.secret).not_valid_after_utc > leaf_of(secret).not_valid_after_utc


def test_serving_certificate_never_outlives_its_ca() -> None:
    ca = new_ca(now=T0, lifetime=dt.timedelta(days=10))
    pair = new_serving_cert(ca, ["x"], now=T0)
    assert pair.certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc


def test_wrong_names_or_foreign_certificate_are_reissued() -> None:
    secret = plan(None, T0).secret
    assert secret is not None
    moved = r.plan(secret, now=T0, service="other", namespace=NS, policy=FAST)
    assert moved.action is r.Action.RENEW_SERVING and "names differ" in moved.reason
    stranger = new_serving_cert(new_ca(now=T0), service_dns_names(SVC, NS), now=T0)
    foreign = r.SecretState({**secret.data, r.TLS_CERT: stranger.cert_pem, r.TLS_KEY: stranger.key_pem})
    p = plan(foreign, T0)
    assert p.action is r.Action.RENEW_SERVING and "not from the signing CA" in p.reason
    mismatched = r.SecretState({**secret.data, r.TLS_KEY: stranger.key_pem})
    assert plan(mismatched, T0).action is r.Action.RENEW_SERVING


def test_unusable_secret_is_replaced_keeping_its_cas_trusted() -> None:
    secret = plan(None, T0).secret
    assert secret is not None
    broken = r.SecretState({**secret.data, r.CA_KEY: new_ca(now=T0).key_pem})  # matches no CA
    p = plan(broken, T0 + dt.timedelta(hours=1))
    assert p.action is r.Action.BOOTSTRAP and "matches no CA" in p.reason
    assert p.secret is not None
    old_ca = bundle_of(secret)[0]
    assert any(r.pem(c) == r.pem(old_ca) for c in bundle_of(p.secret))  # still trusted
    assert r.phase_of(p.secret, T0 + dt.timedelta(hours=1)) is r.Phase.OVERLAP
    garbage = r.SecretState({r.CA_BUNDLE: b"not pem", r.CA_KEY: b"x"})
    assert plan(garbage, T0).action is r.Action.BOOTSTRAP


def test_expired_ca_is_bootstrapped_afresh() -> None:
    secret = plan(None, T0).secret
    p = plan(secret, T0 + dt.timedelta(days=31))
    assert p.action is r.Action.BOOTSTRAP and "expired" in p.reason
    assert p.secret is not None and len(bundle_of(p.secret)) == 1


# --- CA rotation ------------------------------------------------------------------------------


def fresh_at(moment: dt.datetime) -> r.SecretState:
    """A Secret bootstrapped at T0 whose serving certificate was renewed at ``moment``."""
    secret = plan(None, T0).secret
    renewed = plan(secret, moment)
    assert renewed.action is r.Action.RENEW_SERVING and renewed.secret is not None
    return renewed.secret


def test_ca_rotation_steps() -> None:
    secret = fresh_at(T0 + dt.timedelta(days=18))
    old_ca = bundle_of(secret)[0]
    t = T0 + dt.timedelta(days=20, hours=1)  # a third of 30 days remains: the CA is due
    trust = plan(secret, t)
    assert (trust.phase, trust.action) == (r.Phase.STEADY, r.Action.TRUST_NEXT_CA)
    assert trust.secret is not None
    assert len(bundle_of(trust.secret)) == 2 and trust.generation == 2
    assert trust.secret.data[r.TLS_CERT] != b"" and r.NEXT_CA_CERT in trust.secret.data
    assert r.phase_of(trust.secret, t) is r.Phase.TRUSTING_NEXT

    # Not before the propagation delay, and not before every caBundle carries the next CA.
    early = plan(trust.secret, t + dt.timedelta(minutes=1))
    assert early.action is r.Action.NONE and not early.changed
    stale = plan(trust.secret, t + dt.timedelta(minutes=10), injected=[r.pem(old_ca)])
    assert stale.action is r.Action.NONE and "caBundle" in stale.reason

    switch = plan(trust.secret, t + dt.timedelta(minutes=10), injected=[trust.bundle, trust.bundle])
    assert (switch.phase, switch.action) == (r.Phase.TRUSTING_NEXT, r.Action.SWITCH_CA)
    assert switch.secret is not None
    next_ca = x509.load_pem_x509_certificate(trust.secret.data[r.NEXT_CA_CERT])
    assert r.issued_by(leaf_of(switch.secret), next_ca)
    assert r.key_matches(next_ca, switch.secret.data[r.CA_KEY])
    assert r.NEXT_CA_CERT not in switch.secret.data and r.NEXT_CA_KEY not in switch.secret.data
    assert switch.secret.data[r.CA_BUNDLE] == trust.secret.data[r.CA_BUNDLE]  # old CA still trusted
    assert r.phase_of(switch.secret, t) is r.Phase.OVERLAP

    t2 = t + dt.timedelta(minutes=20)
    new_id, old_id = r.ca_id(next_ca), r.ca_id(old_ca)
    waiting = plan(switch.secret, t2, replicas={"pod-a": new_id, "pod-b": old_id})
    assert waiting.action is r.Action.NONE and "pod-b" in waiting.reason
    unknown = plan(switch.secret, t2, replicas={"pod-a": new_id, "pod-b": None})
    assert unknown.action is r.Action.NONE
    prune = plan(switch.secret, t2, replicas={"pod-a": new_id, "pod-b": new_id})
    assert (prune.action, prune.generation) == (r.Action.PRUNE_BUNDLE, 3)
    assert prune.secret is not None and [r.pem(c) for c in bundle_of(prune.secret)] == [r.pem(next_ca)]
    assert r.phase_of(prune.secret, t2) is r.Phase.STEADY


def test_overlap_without_observable_replicas_ends_after_the_fallback() -> None:
    secret = fresh_at(T0 + dt.timedelta(days=18))
    t = T0 + dt.timedelta(days=21)
    trust = plan(secret, t)
    switch = plan(trust.secret, t + dt.timedelta(hours=1))
    assert switch.action is r.Action.SWITCH_CA
    assert plan(switch.secret, t + dt.timedelta(hours=20)).action is r.Action.NONE
    assert plan(switch.secret, t + dt.timedelta(days=1, hours=2)).action is r.Action.PRUNE_BUNDLE


def test_missing_timestamps_start_the_clock_instead_of_waiting_forever() -> None:
    secret = fresh_at(T0 + dt.timedelta(days=18))
    t = T0 + dt.timedelta(days=21)
    trust = plan(secret, t)
    assert trust.secret is not None
    annotations = {k: v for k, v in trust.secret.annotations.items() if k != r.NEXT_CA_TRUSTED_AT}
    p = plan(r.SecretState(trust.secret.data, annotations), t + dt.timedelta(hours=1))
    assert p.changed and p.secret is not None and r.NEXT_CA_TRUSTED_AT in p.secret.annotations


def test_expired_retired_cas_leave_the_bundle() -> None:
    old = new_ca(now=T0 - dt.timedelta(days=40), lifetime=dt.timedelta(days=30))  # expired
    secret = plan(None, T0).secret
    assert secret is not None
    with_old = r.SecretState({**secret.data, r.CA_BUNDLE: old.cert_pem + secret.data[r.CA_BUNDLE]})
    p = plan(with_old, T0)
    assert p.action is r.Action.PRUNE_BUNDLE and "expired" in p.reason
    assert p.secret is not None and p.secret.data[r.CA_BUNDLE] == secret.data[r.CA_BUNDLE]


# --- a simulated deployment over many rotations -------------------------------------------------


@dataclass
class Replica:
    name: str
    lag: int  # passes between a Secret change and this replica serving it
    serving: bytes = b""
    pending: list[tuple[int, bytes]] = field(default_factory=list)


def test_years_of_renewals_and_rotations_never_break_trust() -> None:
    """Every 6 simulated hours for 200 days (six CA rotations, many renewals): the API server's
    caBundle always verifies what each replica serves, and every rotation ends pruned."""
    replicas = [Replica("pod-a", lag=0), Replica("pod-b", lag=3)]
    secret: r.SecretState | None = None
    injected = b""
    actions: list[r.Action] = []
    step = dt.timedelta(hours=6)
    for n in range(200 * 4):
        now = T0 + n * step
        # Replicas load what the Secret held `lag` passes ago, and report what they serve.
        for rep in replicas:
            if secret is not None:
                rep.pending.append((n + rep.lag, secret.data[r.TLS_CERT]))
            while rep.pending and rep.pending[0][0] <= n:
                rep.serving = rep.pending.pop(0)[1]
        view = {
            rep.name: r.issuer_id(x509.load_pem_x509_certificate(rep.serving)) if rep.serving else None
            for rep in replicas
        }
        p = plan(secret, now, replicas=view, injected=[injected] if injected else None)
        actions.append(p.action)
        if p.secret is not None:
            secret = p.secret
        injected = p.bundle  # the injection that follows every pass
        for rep in replicas:
            if rep.serving:
                assert trusted(rep.serving, injected), (n, p.action, rep.name)
    assert actions.count(r.Action.TRUST_NEXT_CA) >= 6
    assert actions.count(r.Action.SWITCH_CA) == actions.count(r.Action.TRUST_NEXT_CA)
    assert actions.count(r.Action.PRUNE_BUNDLE) >= actions.count(r.Action.SWITCH_CA)
    assert actions.count(r.Action.RENEW_SERVING) >= 10
    assert actions.count(r.Action.BOOTSTRAP) == 1
    assert secret is not None and r.phase_of(secret, T0 + 800 * step) in (r.Phase.STEADY, r.Phase.TRUSTING_NEXT)


# --- reports --------------------------------------------------------------------------------------


def test_serving_reports_are_recorded_and_collected() -> None:
    a = r.record_report({}, replica="pod-a", serving="aa")
    b = r.record_report(a, replica="pod-b", serving="bb")
    assert r.parse_reports(b) == {"pod-a": "aa", "pod-b": "bb"}
    gone = r.record_report(b, live=["pod-b"])
    assert r.parse_reports(gone) == {"pod-b": "bb"}
    assert r.replica_view(gone, ["pod-b", "pod-c"]) == {"pod-b": "bb", "pod-c": None}
    assert r.replica_view(gone, None) is None
    assert r.SERVING_REPORTS not in r.record_report(gone, live=[])
    assert r.parse_reports({r.SERVING_REPORTS: "not json"}) == {}
