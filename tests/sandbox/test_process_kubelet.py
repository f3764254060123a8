"""The process kubelet: pods of local images run as processes with the pod's env, volumes, probes,
restarts, logs and graceful termination (real kubectl and the official client where it counts)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster.sandbox.apiserver.core import Context
from gpucluster.sandbox.server import Sandbox
from gpucluster.sandbox.sim import SimulationOptions
from tests.sandbox.conftest import KUBECTL, process_sandbox, rt

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

PYTHON = "example.com/python:3"  # runs this interpreter: the image entrypoint is python
GPUCLUSTER = "ghcr.io/gpucluster/gpucluster:0.1.0"
NS = "default"


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    s = await process_sandbox(tmp_path, backoff=(0.3, 1.2))
    try:
        yield s
    finally:
        await s.stop()


def ctx() -> Context:
    return Context(field_manager="test")


async def create(s: Sandbox, plural: str, body: dict[str, Any], group: str = "", version: str = "v1") -> Any:
    return await s.core.create(rt(s.core, group, version, plural), NS, body, ctx())


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeName": "gpu-node-0", "containers": list(containers), **spec},
    }


def py(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": PYTHON, "args": ["-c", code], **extra}


def get_pod(s: Sandbox, name: str) -> dict[str, Any] | None:
    return s.store.get(("", "pods"), NS, name)


async def eventually(what: str, probe: Callable[[], Any], timeout: float = 20.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def status(s: Sandbox, name: str) -> dict[str, Any]:
    p = get_pod(s, name)
    return (p or {}).get("status") or {}


def container(s: Sandbox, name: str, c: str = "main") -> dict[str, Any]:
    return next((x for x in status(s, name).get("containerStatuses") or [] if x["name"] == c), {})


def condition(s: Sandbox, name: str, kind: str) -> str | None:
    return next((c["status"] for c in status(s, name).get("conditions") or [] if c["type"] == kind), None)


def log_of(s: Sandbox, name: str, c: str = "main") -> str:
    assert s.sim is not None and s.sim.runtime is not None
    found = s.sim.runtime.log_file(NS, name, c)
    return found.path.read_text() if found is not None else ""


async def kubectl(s: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [KUBECTL, "--kubeconfig", str(s.kubeconfig_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


PRINT_ENV = """
import json, os, pathlib, sys
sa = os.environ.get("GPUCLUSTER_SERVICEACCOUNT_DIR", "")
out = {k: v for k, v in os.environ.items()}
out["argv"] = sys.argv[1:]
out["secret"] = pathlib.Path(sys.argv[1], "password").read_text()
out["mode"] = oct(pathlib.Path(sys.argv[1], "password").stat().st_mode & 0o777)
out["namespace_file"] = pathlib.Path(sa, "namespace").read_text() if sa else ""
out["ca"] = pathlib.Path(sa, "ca.crt").read_text() if sa else ""
out["token"] = bool(pathlib.Path(sa, "token").read_text()) if sa else False
out["shared"] = pathlib.Path(sys.argv[2], "from-init").read_text()
print(json.dumps(out), flush=True)
"""


async def test_env_field_refs_secrets_and_volumes(sandbox: Sandbox) -> None:
    s = sandbox
    await create(
        s, "secrets", {"metadata": {"name": "creds"}, "data": {"password": base64.b64encode(b"s3cret").decode()}}
    )
    await create(s, "configmaps", {"metadata": {"name": "settings"}, "data": {"LEVEL": "debug", "COLOR": "blue"}})
    spec = pod(
        "env",
        {
            "name": "main",
            "image": PYTHON,
            "command": ["python", "-c", PRINT_ENV],
            "args": ["/etc/creds", "$(SHARED)", "$$(NOT_EXPANDED)"],
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "PROBE", "value": "--probe=$(POD_IP):9443"},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                {"name": "MISSING", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
                {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
                {"name": "SHARED", "value": "/shared"},
                {"name": "CERT_FILE", "value": "/etc/creds/password"},
            ],
            "volumeMounts": [
                {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
                {"name": "scratch", "mountPath": "/shared"},
            ],
        },
        initContainers=[
            {
                "name": "init",
                "image": PYTHON,
                "args": [
                    "-c",
                    "import pathlib, sys; pathlib.Path(sys.argv[1], 'from-init').write_text('hello')",
                    "/work",
                ],
                "volumeMounts": [{"name": "scratch", "mountPath": "/work"}],
            }
        ],
        volumes=[
            {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o440}},
            {"name": "scratch", "emptyDir": {}},
        ],
        restartPolicy="Never",
    )
    created = await create(s, "pods", spec)
    await eventually("the pod to finish", lambda: status(s, "env").get("phase") in ("Succeeded", "Failed"))
    assert status(s, "env")["phase"] == "Succeeded", log_of(s, "env")
    out = json.loads(log_of(s, "env").strip().splitlines()[-1])
    pod_ip = status(s, "env")["podIP"]
    poddir = s.sim.runtime.pods[(NS, "env")].dir  # type: ignore[union-attr]
    assert pod_ip.startswith("127.") and pod_ip != "127.0.0.1"
    assert out["POD_NAME"] == "env" and out["POD_NS"] == NS and out["POD_UID"] == created["metadata"]["uid"]
    assert (out["APP"], out["NODE"], out["SA"], out["POD_IP"]) == ("env", "gpu-node-0", "default", pod_ip)
    assert out["PROBE"] == f"--probe={pod_ip}:9443"
    assert out["GPUCLUSTER_BIND_ADDRESS"] == pod_ip
    assert out["PASSWORD"] == "s3cret" and "MISSING" not in out
    assert (out["LEVEL"], out["CFG_LEVEL"], out["CFG_COLOR"]) == ("debug", "debug", "blue")
    assert out["argv"] == [f"{poddir}/etc/creds", f"{poddir}/shared", "$(NOT_EXPANDED)"]
    assert out["CERT_FILE"] == f"{poddir}/etc/creds/password" and out["SHARED"] == f"{poddir}/shared"
    assert out["secret"] == "s3cret" and out["mode"] == "0o640"
    assert out["shared"] == "hello"  # the emptyDir is shared with the init container
    host, port = s.url.removeprefix("https://").rsplit(":", 1)
    assert (out["KUBERNETES_SERVICE_HOST"], out["KUBERNETES_SERVICE_PORT"]) == (host, port)
    assert out["GPUCLUSTER_SERVICEACCOUNT_DIR"] == f"{poddir}/var/run/secrets/kubernetes.io/serviceaccount"
    assert out["namespace_file"] == NS and out["token"] and "BEGIN CERTIFICATE" in out["ca"]
    inits = status(s, "env")["initContainerStatuses"]
    assert inits[0]["state"]["terminated"]["reason"] == "Completed"
    assert condition(s, "env", "Initialized") == "True" and condition(s, "env", "Ready") == "False"


async def test_missing_secret_waits_with_config_error(sandbox: Sandbox) -> None:
    s = sandbox
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "x"}}}]
    await create(
        s, "pods", pod("late", py("main", "import os; print(os.environ['X'])", env=env), restartPolicy="Never")
    )
    await eventually(
        "CreateContainerConfigError",
        lambda: container(s, "late").get("state", {}).get("waiting", {}).get("reason") == "CreateContainerConfigError",
    )
    assert container(s, "late")["state"]["waiting"]["message"] == 'secret "later" not found'
    await create(s, "secrets", {"metadata": {"name": "later"}, "stringData": {"x": "now"}})
    await eventually("the pod to succeed", lambda: status(s, "late").get("phase") == "Succeeded")
    assert log_of(s, "late").strip() == "now"


SERVE = """
import http.server, os, pathlib, sys

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = pathlib.Path(sys.argv[1]).exists()
        self.send_response(200 if ok else 503); self.end_headers(); self.wfile.write(b"ok" if ok else b"no")
    def log_message(self, *a): pass
http.server.HTTPServer((os.environ["GPUCLUSTER_BIND_ADDRESS"], 8080), H).serve_forever()
"""


async def test_readiness_probe_drives_ready(sandbox: Sandbox, tmp_path: Path) -> None:
    s = sandbox
    flag = tmp_path / "ready"
    probe = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1}
    main = py(
        "main",
        SERVE,
        args=["-c", SERVE, str(flag)],
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe=probe,
    )
    await create(s, "pods", pod("web", main))
    await eventually("running", lambda: container(s, "web").get("state", {}).get("running"))

    def readiness_failed() -> bool:
        return any(
            e["reason"] == "Unhealthy" and e["message"].startswith("Readiness probe failed")
            for e in s.store.iter(("", "events"), NS)
            if e["involvedObject"]["name"] == "web"
        )

    # The probe has run and failed (a kubelet event says so): the pod stays not ready.
    await eventually("a failed readiness probe", readiness_failed)
    assert condition(s, "web", "Ready") == "False" and container(s, "web")["ready"] is False
    flag.write_text("1")
    await eventually("ready", lambda: condition(s, "web", "Ready") == "True")
    assert condition(s, "web", "ContainersReady") == "True" and status(s, "web")["phase"] == "Running"
    flag.unlink()
    await eventually("not ready again", lambda: condition(s, "web", "Ready") == "False")
    # the Service's EndpointSlice follows readiness
    await create(
        s,
        "services",
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    )
    flag.write_text("1")

    def endpoint() -> Any:
        slices = list(s.store.iter(("discovery.k8s.io", "endpointslices"), NS))
        return (
            next((e for sl in slices for e in sl.get("endpoints") or [] if e["conditions"]["ready"]), None) and slices
        )

    slices = await eventually("a ready endpoint", endpoint)
    assert slices[0]["ports"] == [{"port": 8080, "protocol": "TCP", "name": ""}]
    assert slices[0]["endpoints"][0]["addresses"] == [status(s, "web")["podIP"]]
    from gpucluster.sandbox.apiserver.webhooks import service_endpoint

    assert service_endpoint(s.store, NS, "web", 80) == (status(s, "web")["podIP"], 8080)


async def test_liveness_failure_restarts(sandbox: Sandbox, tmp_path: Path) -> None:
    s = sandbox
    probe = {
        "exec": {"command": ["python", "-c", "import sys; sys.exit(1)"]},
        "periodSeconds": 1,
        "failureThreshold": 1,
        "initialDelaySeconds": 1,
    }
    main = py("main", "import time; print('up', flush=True); time.sleep(600)", livenessProbe=probe)
    await create(s, "pods", pod("sick", main, terminationGracePeriodSeconds=1))
    await eventually("a restart", lambda: container(s, "sick").get("restartCount", 0) >= 1)
    assert container(s, "sick")["lastState"]["terminated"]["exitCode"] in (137, 143)


async def test_crash_loop_back_off_and_logs(sandbox: Sandbox) -> None:
    s = sandbox
    await create(s, "pods", pod("crash", py("main", "import sys; print('crashing', flush=True); sys.exit(3)")))
    await eventually(
        "CrashLoopBackOff",
        lambda: container(s, "crash").get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff",
    )
    c = container(s, "crash")
    assert c["lastState"]["terminated"]["exitCode"] == 3 and c["lastState"]["terminated"]["reason"] == "Error"
    assert "back-off" in c["state"]["waiting"]["message"]
    await eventually("two restarts", lambda: container(s, "crash").get("restartCount", 0) >= 2)
    assert status(s, "crash")["phase"] == "Running"
    result = await kubectl(s, "logs", "crash")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "crashing"
    previous = await kubectl(s, "logs", "crash", "--previous", "--tail", "1")
    assert previous.returncode == 0 and previous.stdout.strip() == "crashing", previous.stderr
    reasons = {e["reason"] for e in s.store.iter(("", "events"), NS) if e["involvedObject"]["name"] == "crash"}
    assert {"Pulled", "Created", "Started", "BackOff"} <= reasons
    described = await kubectl(s, "describe", "pod", "crash")
    assert "Back-off restarting failed container main in pod crash_default" in described.stdout, described.stdout


async def test_delete_stops_the_process_within_the_grace_period(sandbox: Sandbox, tmp_path: Path) -> None:
    s = sandbox
    marker = tmp_path / "pid"
    code = f"import os, pathlib, time, signal; pathlib.Path({str(marker)!r}).write_text(str(os.getpid())); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    await create(s, "pods", pod("stubborn", py("main", code), terminationGracePeriodSeconds=1))
    await eventually("running", lambda: container(s, "stubborn").get("state", {}).get("running") and marker.exists())
    pid = int(marker.read_text())
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await kubectl(s, "delete", "pod", "stubborn", "--wait=true", "--timeout=20s")
    assert result.returncode == 0, result.stderr
    assert get_pod(s, "stubborn") is None
    assert loop.time() - started < 6
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(pid, 0)
            await asyncio.sleep(0.05)


async def test_simulated_pods_terminate_too(sandbox: Sandbox) -> None:
    s = sandbox
    await create(s, "pods", pod("sim", {"name": "main", "image": "example.com/agent:1"}))
    await eventually("running", lambda: status(s, "sim").get("phase") == "Running")
    seen: list[str] = []
    unsubscribe = s.store.subscribe(
        lambda e: seen.append(str((e.obj.get("status") or {}).get("phase"))) if e.resource == ("", "pods") else None
    )
    try:
        deleted, now = await s.core.delete(rt(s.core, "", "v1", "pods"), NS, "sim", {}, ctx())
        assert not now and deleted["metadata"]["deletionGracePeriodSeconds"] == 30
        await eventually("the pod to go", lambda: get_pod(s, "sim") is None)
    finally:
        unsubscribe()
    assert "Succeeded" in seen


async def test_gpucluster_image_runs_the_installed_command(sandbox: Sandbox) -> None:
    s = sandbox
    job = {"name": "main", "image": GPUCLUSTER, "args": ["--version"]}
    await create(s, "pods", pod("version", job, restartPolicy="Never"))
    await eventually("done", lambda: status(s, "version").get("phase") == "Succeeded", timeout=30)
    assert log_of(s, "version").startswith("gpucluster ")


async def test_kubectl_image_uses_the_service_account(sandbox: Sandbox) -> None:
    s = sandbox
    main = {
        "name": "main",
        "image": "registry.k8s.io/kubectl:v1.34.0",
        "args": ["get", "serviceaccounts", "-o", "name"],
    }
    await create(s, "pods", pod("kubectl", main, restartPolicy="Never"))
    await eventually("done", lambda: status(s, "kubectl").get("phase") in ("Succeeded", "Failed"), timeout=30)
    output = log_of(s, "kubectl")
    # authenticated as the pod's ServiceAccount: allowed (200) or refused by RBAC (403), never 401
    assert "Unauthorized" not in output and "must be logged in" not in output, output
    assert "serviceaccount/default" in output or "forbidden" in output.lower(), output


async def test_secret_changes_reach_the_volume(sandbox: Sandbox, tmp_path: Path) -> None:
    s = sandbox
    await create(s, "secrets", {"metadata": {"name": "cert"}, "stringData": {"tls.crt": "one"}})
    code = "import pathlib, sys, time\nwhile True:\n    print(pathlib.Path(sys.argv[1]).read_text(), flush=True); time.sleep(0.1)"
    main = py("main", code, args=["-c", code, "/certs/tls.crt"], volumeMounts=[{"name": "c", "mountPath": "/certs"}])
    await create(s, "pods", pod("reader", main, volumes=[{"name": "c", "secret": {"secretName": "cert"}}]))
    await eventually("the first value", lambda: "one" in log_of(s, "reader"))
    current = s.store.get(("", "secrets"), NS, "cert")
    assert current is not None
    await s.core.update(
        rt(s.core, "", "v1", "secrets"), NS, "cert", {**current, "stringData": {"tls.crt": "two"}}, ctx()
    )
    await eventually("the new value", lambda: "two" in log_of(s, "reader"))


async def test_follow_logs_and_the_default_container(sandbox: Sandbox) -> None:
    s = sandbox
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.2)"
    await create(s, "pods", pod("two", py("first", code), py("second", "print('second')"), restartPolicy="Never"))
    await eventually("running", lambda: container(s, "two", "first").get("state", {}).get("running"))
    followed = await kubectl(s, "logs", "-f", "two", "-c", "first")
    assert followed.returncode == 0 and followed.stdout.splitlines() == ["line 0", "line 1", "line 2"], followed.stderr
    default = await kubectl(s, "logs", "two")  # kubectl picks the first container
    assert default.stdout.splitlines()[0] == "line 0", default.stderr
    missing = await kubectl(s, "logs", "two", "-c", "nope")
    assert missing.returncode != 0 and "container nope is not valid for pod two" in missing.stderr


async def test_stopping_the_sandbox_stops_every_process(tmp_path: Path) -> None:
    options = SimulationOptions(
        nodes=1, process_images={"example.com/python": [sys.executable]}, process_root=tmp_path / "p"
    )
    s = Sandbox(simulate=options)
    await s.start()
    marker = tmp_path / "pid"
    code = f"import os, pathlib, signal, time; pathlib.Path({str(marker)!r}).write_text(str(os.getpid())); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    try:
        await s.core.create(
            rt(s.core, "", "v1", "pods"),
            NS,
            pod("forever", py("main", code), automountServiceAccountToken=False),
            ctx(),
        )
        await eventually("the process", marker.exists)
        pid = int(marker.read_text())
    finally:
        await s.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").iterdir())


async def test_start_latency(sandbox: Sandbox) -> None:
    """How long a process pod takes from creation to Ready (printed for the README)."""
    s = sandbox
    loop = asyncio.get_running_loop()
    started = loop.time()
    await create(s, "pods", pod("quick", py("main", "import time; time.sleep(600)")))
    await eventually("ready", lambda: condition(s, "quick", "Ready") == "True")
    python_ready = loop.time() - started
    started = loop.time()
    main = {"name": "main", "image": GPUCLUSTER, "args": ["--version"]}
    await create(s, "pods", pod("cli", main, restartPolicy="Never"))
    await eventually("done", lambda: status(s, "cli").get("phase") == "Succeeded", timeout=30)
    print(
        f"python pod Ready in {python_ready:.2f}s; gpucluster --version pod Succeeded in {loop.time() - started:.2f}s"
    )
    assert python_ready < 5


async def test_failing_init_container(sandbox: Sandbox) -> None:
    s = sandbox
    init = [py("init", "import sys; print('no'); sys.exit(1)")]
    await create(s, "pods", pod("never", py("main", "print('unreached')"), initContainers=init, restartPolicy="Never"))
    await eventually("Failed", lambda: status(s, "never").get("phase") == "Failed")
    assert status(s, "never")["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    assert container(s, "never")["state"] == {"waiting": {"reason": "PodInitializing"}}
    await create(s, "pods", pod("again", py("main", "print('unreached')"), initContainers=init))
    await eventually(
        "the init container restarting",
        lambda: (status(s, "again").get("initContainerStatuses") or [{}])[0].get("restartCount", 0) >= 1,
    )
    assert status(s, "again")["phase"] == "Pending" and condition(s, "again", "Initialized") == "False"


def test_expansion_and_remapping() -> None:
    from gpucluster.sandbox.sim import podenv

    env = {"A": "1", "B": "x y"}
    assert podenv.expand("$(A)-$(B)-$(C)-$$(A)-$$$(A)", env) == "1-x y-$(C)-$(A)-$1"
    remap = podenv.remapper(Path("/pods/p"), ["/tmp", "/var/run/certs/", "/etc/x"])
    assert remap("--cert-dir=/var/run/certs") == "--cert-dir=/pods/p/var/run/certs"
    assert remap("/tmp/a:/tmpfoo:/etc/x/y") == "/pods/p/tmp/a:/tmpfoo:/pods/p/etc/x/y"
    assert remap("/usr/tmp /var/run/certsX") == "/usr/tmp /var/run/certsX"
    assert podenv.repository("ghcr.io/gpucluster/gpucluster:0.1.0@sha256:ab") == "ghcr.io/gpucluster/gpucluster"
    assert podenv.repository("localhost:5000/gpucluster") == "localhost:5000/gpucluster"
    entry = podenv.Entrypoint("gpucluster", ("py", "-m", "gpucluster.cli"))
    container = {"command": ["/usr/local/bin/gpucluster", "certs"], "args": ["--ns=$(NS)"]}
    assert podenv.argv_for(container, entry, {"NS": "n"}, str) == ["py", "-m", "gpucluster.cli", "certs", "--ns=n"]
    assert podenv.argv_for({"args": ["x"]}, entry, {}, str) == ["py", "-m", "gpucluster.cli", "x"]
    assert podenv.argv_for({"command": ["sh", "-c"], "args": ["x"]}, entry, {}, str) == ["sh", "-c", "x"]
