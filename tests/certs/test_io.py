"""caBundle injection, the atomic file writer and a rotation pass against an API server double."""

from __future__ import annotations

import base64
import datetime as dt
import os
import ssl
import stat
from pathlib import Path

import pytest

from gpucluster.certs import files, inject, rotation, rotator
from gpucluster.webhook import configurations
from gpucluster.webhook.tls import ReloadingTLS
from tests.kit.fakekube import FakeKube

NS, SVC, SECRET = "gpu-operator", "gpucluster-webhook", "gpucluster-webhook-certs"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"


def ours() -> list[dict[str, object]]:
    return configurations.webhook_configurations(namespace=NS, service=SVC)


def install_configs(kube: FakeKube) -> None:
    validating, mutating = ours()
    kube.put(validating)
    kube.put(mutating)
    # Another tool's configuration, same label, other name: never touched.
    other = {**validating, "metadata": {"name": "someone-else", "labels": dict(configurations.MANAGED_LABELS)}}
    kube.put(other)


def bundles(kube: FakeKube, path: str) -> list[bytes]:
    return inject.injected_bundles({**kube.object(path), "kind": "ValidatingWebhookConfiguration"})


# --- injection (pure) ---------------------------------------------------------------------------


def test_names_agree_with_the_webhook_configurations() -> None:
    assert inject.VALIDATING_NAME == configurations.VALIDATING_NAME
    assert inject.MUTATING_NAME == configurations.MUTATING_NAME
    assert configurations.MANAGED_LABELS[inject.CA_INJECTION_LABEL] == "true"


def test_injection_touches_only_our_configurations() -> None:
    validating, mutating = ours()
    assert inject.is_ours(validating) and inject.is_ours(mutating)
    renamed = {**validating, "metadata": {**validating["metadata"], "name": "other"}}  # type: ignore[dict-item]
    unlabelled = {**validating, "metadata": {"name": configurations.VALIDATING_NAME}}
    other_tool = {
        **validating,
        "metadata": {"name": configurations.VALIDATING_NAME, "labels": {"app.kubernetes.io/managed-by": "gpucluster"}},
    }
    # Helm relabels every object it installs managed-by=Helm: the injection label still marks ours.
    helm_installed = {
        **validating,
        "metadata": {
            "name": configurations.VALIDATING_NAME,
            "labels": {"app.kubernetes.io/managed-by": "Helm", inject.CA_INJECTION_LABEL: "true"},
        },
    }
    assert inject.is_ours(helm_installed)
    for foreign in (renamed, unlabelled, other_tool):
        assert not inject.is_ours(foreign)
        assert inject.ca_bundle_patch(foreign, b"CA") is None


def test_injection_patch_sets_every_webhook_and_is_conditional() -> None:
    validating, _ = ours()
    validating["metadata"]["resourceVersion"] = "7"  # type: ignore[index]
    patch = inject.ca_bundle_patch(validating, b"CA", generation=3)
    assert patch is not None
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    paths = {op["path"] for op in patch[1:]}
    n = len(validating["webhooks"])  # type: ignore[arg-type]
    assert {f"/webhooks/{i}/clientConfig/caBundle" for i in range(n)} <= paths
    injected = inject.with_ca_bundle(validating, b"CA", 3)
    assert injected is not None
    assert inject.injected_bundles(injected) == [b"CA"] * n
    assert inject.ca_bundle_patch(injected, b"CA", 3) is None  # nothing left to change
    assert inject.ca_bundle_patch(injected, b"OLD", 2) is None  # an older generation never wins
    assert inject.ca_bundle_patch(injected, b"NEW", 4) is not None


# --- files ----------------------------------------------------------------------------------------


def test_atomic_writer_modes_layout_and_idempotence(tmp_path: Path) -> None:
    d = tmp_path / "certs"
    assert files.write_atomically(d, {"ca.crt": b"A", "tls.crt": b"B", "tls.key": b"K"})
    assert (d / "tls.key").read_bytes() == b"K" and (d / "tls.key").is_symlink()
    assert stat.S_IMODE(os.stat(d / "tls.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d / "tls.crt").st_mode) == 0o644
    assert not files.write_atomically(d, {"ca.crt": b"A", "tls.crt": b"B", "tls.key": b"K"})
    assert files.write_atomically(d, {"tls.crt": b"B2", "tls.key": b"K2"})
    assert (d / "tls.crt").read_bytes() == b"B2" and not (d / "ca.crt").exists()
    assert len([p for p in d.iterdir() if p.name.startswith("..") and not p.is_symlink()]) == 1  # old set gone
    with pytest.raises(ValueError):
        files.write_atomically(d, {"../x": b""})


def test_atomic_writer_leaves_a_volume_it_does_not_own_as_the_kubelet_made_it(tmp_path: Path) -> None:
    """The chart's emptyDir is root's (group fsGroup, 2777): the non-root operator cannot chmod it,
    so the writer must not try (on a real node that chmod failed with EPERM, and certs-init
    crash-looped)."""
    d = tmp_path / "certs"
    d.mkdir()
    os.chmod(d, 0o2777)
    if os.geteuid() == 0:
        os.chown(d, 4242, 65532)  # owned by someone else, as root's volume is to the operator
    else:
        pytest.skip("needs root to hand the directory to another owner")
    assert files.write_atomically(d, {"tls.crt": b"B", "tls.key": b"K"})
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o2777
    assert (d / "tls.key").read_bytes() == b"K"
    mine = tmp_path / "mine"
    files.write_atomically(mine, {"tls.key": b"K"})
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700  # a directory of its own it still narrows


def test_plain_writer_key_mode(tmp_path: Path) -> None:
    written = files.write_plain(tmp_path / "out", {"tls.key": b"K", "tls.crt": b"C"})
    assert [p.name for p in written] == ["tls.key", "tls.crt"]
    assert stat.S_IMODE(os.stat(tmp_path / "out" / "tls.key").st_mode) == 0o600
    assert not (tmp_path / "out" / "tls.key").is_symlink()


def test_webhook_reloads_what_the_writer_writes(tmp_path: Path) -> None:
    first = rotation.plan(None, now=dt.datetime.now(dt.UTC), service="localhost", namespace=NS).secret
    assert first is not None
    files.write_atomically(tmp_path, rotator.serving_files(first))
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert tls.reload_if_changed()
    renewed = rotation.plan(None, now=dt.datetime.now(dt.UTC), service="localhost", namespace=NS).secret
    assert renewed is not None
    files.write_atomically(tmp_path, rotator.serving_files(renewed))
    assert tls.reload_if_changed() and tls.reloads == 1
    assert set(os.listdir(tmp_path)) >= {"ca.crt", "tls.crt", "tls.key"} and "ca.key" not in os.listdir(tmp_path)


# --- a pass against the API server double -------------------------------------------------------


async def test_rotate_once_bootstraps_injects_and_writes_files(tmp_path: Path) -> None:
    kube = FakeKube()
    install_configs(kube)
    opts = rotator.RotateOptions(namespace=NS, secret=SECRET, service=SVC, cert_dir=tmp_path)
    result = await rotator.rotate_once(kube, opts)
    assert result.plan.action is rotation.Action.BOOTSTRAP and result.wrote_secret and result.wrote_files
    secret = kube.object(f"{SECRETS}/{SECRET}")
    assert secret["type"] == "kubernetes.io/tls"
    bundle = base64.b64decode(secret["data"]["ca.crt"])
    assert bundles(kube, f"{VWC}/{configurations.VALIDATING_NAME}") == [bundle] * 5
    assert bundles(kube, f"{MWC}/{configurations.MUTATING_NAME}") == [bundle] * 2
    assert bundles(kube, f"{VWC}/someone-else") == [b""] * 5  # untouched
    assert (tmp_path / "ca.crt").read_bytes() == bundle and not (tmp_path / "ca.key").exists()
    again = await rotator.rotate_once(kube, opts)
    assert again.plan.action is rotation.Action.NONE and not again.wrote_secret
    assert not any(i.changed for i in again.injections) and not again.wrote_files


async def test_rotate_fills_a_chart_created_secret_and_survives_a_conflict() -> None:
    kube = FakeKube()
    empty = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": SECRET, "namespace": NS}}
    kube.put(empty)
    # Someone else writes first: the first PUT is stale.
    race = kube.on("PUT", SECRETS, lambda call: kube.put(kube.object(call.path)), times=1)
    result = await rotator.rotate_once(kube, rotator.RotateOptions(NS, SECRET, SVC, inject=False))
    assert race not in kube.hooks  # the race was run
    assert result.wrote_secret and kube.object(f"{SECRETS}/{SECRET}")["type"] == "Opaque"
    assert set(kube.object(f"{SECRETS}/{SECRET}")["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}


async def test_reports_of_live_replicas_are_recorded(tmp_path: Path) -> None:
    kube = FakeKube()
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
    kube.put(
        {
            "metadata": {"name": "s1", "labels": {"kubernetes.io/service-name": SVC}},
            "endpoints": [
                {"conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": "pod-a"}},
                {"conditions": {"ready": False}, "targetRef": {"kind": "Pod", "name": "pod-gone"}},
            ],
        },
        path=f"{slices}/s1",
    )
    opts = rotator.RotateOptions(NS, SECRET, SVC, replica="pod-a", probe=("127.0.0.1", 1), inject=False)
    await rotator.rotate_once(kube, opts)  # nothing listens on port 1: no report yet
    secret = kube.object(f"{SECRETS}/{SECRET}")
    assert rotation.SERVING_REPORTS not in secret["metadata"].get("annotations", {})
    assert await rotator.live_replicas(kube, NS, SVC) == ["pod-a"]
    kube.fail("*", slices, 403)
    assert await rotator.live_replicas(kube, NS, SVC) is None


async def test_probe_reads_the_served_certificate(tmp_path: Path) -> None:
    import asyncio

    state = rotation.plan(None, now=dt.datetime.now(dt.UTC), service="localhost", namespace=NS).secret
    assert state is not None
    files.write_plain(tmp_path, rotator.serving_files(state))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        served = await rotator.probe_serving("127.0.0.1", port)
    finally:
        server.close()
        await server.wait_closed()
    (ca,) = rotation.split_pem_bundle(state.data["ca.crt"])
    assert served == rotation.ca_id(ca)
    assert await rotator.probe_serving("127.0.0.1", 1, timeout=1) is None


async def test_inject_retries_a_concurrent_write() -> None:
    kube = FakeKube()
    install_configs(kube)
    # The resourceVersion moves on before the first PATCH: its test fails, and it is retried.
    race = kube.on("PATCH", "", lambda call: kube.put(kube.object(call.path)), times=1)
    results = await inject.inject(kube, b"CA", generation=1)
    assert [(i.name, i.changed) for i in results] == [
        (configurations.MUTATING_NAME, True),
        (configurations.VALIDATING_NAME, True),
    ]
    assert bundles(kube, f"{VWC}/{configurations.VALIDATING_NAME}") == [b"CA"] * 5
    assert race not in kube.hooks


async def test_serving_continues_across_a_ca_rotation_under_loopback_load(tmp_path: Path) -> None:
    """A TLS server reloading its files (as the webhook does) while the state machine renews and
    rotates; clients verify with the caBundle injected at that moment and the right host name.
    No request fails; a client expecting another host name is rejected."""
    import asyncio

    from cryptography import x509
    from cryptography.x509 import DNSName
    from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

    from gpucluster.certs.authority import new_ca
    from tests.certs.test_rotation import FAST, T0

    def new_ca_pem() -> bytes:
        return new_ca(now=T0).cert_pem

    state = rotation.plan(None, now=T0, service="localhost", namespace=NS, policy=FAST).secret
    assert state is not None
    files.write_atomically(tmp_path, rotator.serving_files(state))
    simulated = [T0]  # the replica judges certificate dates at simulated time too
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", clock=lambda: simulated[0])
    assert tls.reload_if_changed()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]

    async def request(bundle: bytes, now: dt.datetime, host: str = "localhost") -> bool:
        """A verifying client at simulated time ``now``: the chain must lead to the bundle and name ``host``."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # verified below, at simulated time
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        data = await reader.read()
        writer.close()
        store = Store(rotation.split_pem_bundle(bundle))
        verifier = PolicyBuilder().store(store).time(now).build_server_verifier(DNSName(host))
        try:
            verifier.verify(x509.load_der_x509_certificate(der), [])
        except VerificationError:
            return False
        return data == b"ok"

    injected = state.data["ca.crt"]
    failures, actions = 0, []
    try:
        for n in range(50):  # 50 passes of 12 simulated hours: renewals and a CA rotation
            now = T0 + n * dt.timedelta(hours=12)
            simulated[0] = now
            if n % 2:  # the replica picks files up every other pass (Secret sync + poll lag)
                tls.reload_if_changed()
            # The replica reports what it serves; the API server trusts what was injected.
            served = await rotator.probe_serving("127.0.0.1", port)
            plan = rotation.plan(
                state, now=now, service="localhost", namespace=NS, policy=FAST,
                replicas={"pod": served}, injected=[injected],
            )  # fmt: skip
            actions.append(plan.action)
            if plan.secret is not None:
                state = plan.secret
            injected = plan.bundle
            files.write_atomically(tmp_path, rotator.serving_files(state))
            results = await asyncio.gather(*(request(injected, now) for _ in range(4)))
            failures += results.count(False)
        assert not await request(injected, now, host="wrong.example.com")
        assert not await request(b"".join(c for c in [new_ca_pem()]), now)
    finally:
        server.close()
        await server.wait_closed()
    assert failures == 0
    assert actions.count(rotation.Action.SWITCH_CA) == 1 and actions.count(rotation.Action.PRUNE_BUNDLE) == 1
    assert actions.count(rotation.Action.RENEW_SERVING) >= 2


async def test_sidecar_injects_soon_into_configurations_created_after_it_started(tmp_path: Path) -> None:
    """Helm creates the webhook configurations after the Deployment: the sidecar must not wait its
    whole interval (300 s in the chart) before injecting into them."""
    import asyncio

    kube = FakeKube()
    opts = rotator.RotateOptions(namespace=NS, secret=SECRET, service=SVC, cert_dir=tmp_path)
    stop = asyncio.Event()
    task = asyncio.create_task(rotator.rotate_forever(kube, opts, interval=300, stop=stop))
    try:
        async with asyncio.timeout(5):  # the first pass ran and found no configuration
            while not kube.has(f"{SECRETS}/{SECRET}"):
                await asyncio.sleep(0.01)
        install_configs(kube)
        path = f"{VWC}/{configurations.VALIDATING_NAME}"
        async with asyncio.timeout(5):  # well before the 300 s interval
            while bundles(kube, path) != [base64.b64decode(kube.object(f"{SECRETS}/{SECRET}")["data"]["ca.crt"])] * 5:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
