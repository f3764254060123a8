"""/openapi/v2 and /openapi/v3, server-side field validation, protobuf DeleteOptions, real Helm.

Against real kubectl, the official client and Helm v4 (helm_python), as a real server behaves.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.sandbox.apiserver import openapi_proto, protobuf, schemas
from gpucluster.sandbox.server import SandboxThread
from tests.sandbox.conftest import CRD_FILE, KUBECTL
from tests.sandbox.test_kubectl import kubectl

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")


def _request(
    runner: SandboxThread,
    path: str,
    *,
    accept: str = "application/json",
    method: str = "GET",
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    config = yaml.safe_load(Path(runner.sandbox.kubeconfig_path).read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}", "Accept": accept, "Content-Type": "application/json"}
    req = urllib.request.Request(cluster["server"] + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=20) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _get(runner: SandboxThread, path: str, accept: str = "application/json") -> tuple[int, dict[str, str], bytes]:
    return _request(runner, path, accept=accept)


@pytest.fixture(scope="module")
def with_crd(threaded: SandboxThread) -> SandboxThread:
    kubectl(threaded, "apply", "--server-side", "-f", str(CRD_FILE))
    return threaded


def test_v2_json_has_every_served_kind_with_gvk_and_field_validation(with_crd: SandboxThread) -> None:
    status, headers, body = _get(with_crd, "/openapi/v2")
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["swagger"] == "2.0"
    kinds = {
        (g["group"], g["version"], g["kind"])
        for d in doc["definitions"].values()
        for g in d.get("x-kubernetes-group-version-kind", [])
    }
    for gvk in [
        ("", "v1", "Pod"),
        ("policy", "v1", "PodDisruptionBudget"),
        ("batch", "v1", "Job"),
        ("batch", "v1", "CronJob"),
        ("nvidia.com", "v1alpha1", "GPUCluster"),
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
    ]:
        assert gvk in kinds, gvk
    patch = doc["paths"]["/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "policy",
        "version": "v1",
        "kind": "PodDisruptionBudget",
    }
    port = doc["definitions"]["io.k8s.api.core.v1.ServicePort"]["properties"]["targetPort"]
    assert port["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"
    assert doc["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] == {
        "type": "string",
        "format": "int-or-string",
    }
    # A second request is served from the cache: the same document, the same ETag.
    headers2 = _get(with_crd, "/openapi/v2")[1]
    assert headers2["Etag"] == headers["Etag"]


def test_v2_protobuf_is_what_client_go_asks_for(with_crd: SandboxThread) -> None:
    status, headers, body = _get(with_crd, "/openapi/v2", accept=openapi_proto.MEDIA_TYPES[0] + ",application/json")
    assert status == 200 and headers["Content-Type"] == "application/octet-stream"
    assert body[:1] == b"\x0a" and b"io.k8s.api.core.v1.Pod" in body
    # kubectl's v2 explain parses the gnostic document.
    out = kubectl(with_crd, "explain", "pods.spec.containers.resources.limits", "--output=plaintext-openapiv2").stdout
    assert "FIELD:    limits <map[string]string>" in out
    assert _get(with_crd, "/openapi/v2", accept="text/html")[0] == 406


def test_v2_client_validation_of_a_list(with_crd: SandboxThread) -> None:
    # kubectl validates a v1 List client-side against /openapi/v2 (protobuf), even with server validation.
    manifest = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l1"}, "bogus": 1}],
        }
    )
    bad = kubectl(with_crd, "create", "--validate=strict", "-f", "-", stdin=manifest, check=False)
    assert bad.returncode == 1
    assert 'ValidationError(ConfigMap): unknown field "bogus" in io.k8s.api.core.v1.ConfigMap' in bad.stderr


def test_v3_root_documents_and_crd_updates(with_crd: SandboxThread) -> None:
    root = json.loads(_get(with_crd, "/openapi/v3")[2])["paths"]
    for gv in ("api/v1", "apis/batch/v1", "apis/policy/v1", "apis/nvidia.com/v1alpha1", "apis/apps/v1"):
        assert gv in root, gv
    url = root["apis/nvidia.com/v1alpha1"]["serverRelativeURL"]
    doc = json.loads(_get(with_crd, url)[2])
    gc = doc["components"]["schemas"]["com.nvidia.v1alpha1.GPUCluster"]
    assert gc["x-kubernetes-group-version-kind"] == [
        {"group": "nvidia.com", "version": "v1alpha1", "kind": "GPUCluster"}
    ]
    assert gc["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    patch = doc["paths"]["/apis/nvidia.com/v1alpha1/gpuclusters/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    # A CRD change shows in the document (and its hash) at once.
    crd = yaml.safe_load(CRD_FILE.read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["extraKnob"] = {
        "type": "string",
        "description": "added by the test",
    }
    kubectl(with_crd, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump(crd))
    try:
        root2 = json.loads(_get(with_crd, "/openapi/v3")[2])["paths"]
        assert root2["apis/nvidia.com/v1alpha1"]["serverRelativeURL"] != url
        assert root2["api/v1"] == root["api/v1"]
        out = kubectl(with_crd, "explain", "gpucluster.spec.extraKnob").stdout
        assert "added by the test" in out
    finally:
        kubectl(with_crd, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))


def test_kubectl_explain_builtin_and_crd(with_crd: SandboxThread) -> None:
    out = kubectl(with_crd, "explain", "pods.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in out and "resources\t<ResourceRequirements>" in out
    assert "FIELD: targetPort <IntOrString>" in kubectl(with_crd, "explain", "services.spec.ports.targetPort").stdout
    gc = kubectl(with_crd, "explain", "gpucluster.spec").stdout
    assert "KIND:       GPUCluster" in gc and "dcgmExporter\t<Object>" in gc
    pdb = kubectl(with_crd, "explain", "pdb.spec.minAvailable").stdout
    assert "<IntOrString>" in pdb


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "strict"},
    "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "imagee": "typo"}]},
}


def test_server_side_field_validation(with_crd: SandboxThread) -> None:
    manifest = yaml.safe_dump(POD)
    client_dry = kubectl(with_crd, "create", "--dry-run=client", "--validate=strict", "-f", "-", stdin=manifest)
    # As against kube-apiserver: the server supports fieldValidation, so kubectl leaves it to the server.
    assert client_dry.stdout.strip() == "pod/strict created (dry run)"
    strict = kubectl(with_crd, "create", "--validate=strict", "-f", "-", stdin=manifest, check=False)
    assert strict.returncode == 1
    assert (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagee"'
        in strict.stderr
    )
    server_dry = kubectl(
        with_crd, "create", "--dry-run=server", "--validate=strict", "-f", "-", stdin=manifest, check=False
    )
    assert server_dry.returncode == 1 and "strict decoding error" in server_dry.stderr
    warn = kubectl(with_crd, "create", "--validate=warn", "-f", "-", stdin=manifest)
    assert 'Warning: unknown field "spec.containers[0].imagee"' in warn.stderr
    stored = json.loads(kubectl(with_crd, "get", "pod", "strict", "-o", "json").stdout)
    assert "imagee" not in stored["spec"]["containers"][0]
    kubectl(with_crd, "delete", "pod", "strict", "--wait=false")
    ok = dict(POD, metadata={"name": "fine"}, spec={"containers": [{"name": "c", "image": "busybox:1.36"}]})
    good = kubectl(with_crd, "create", "--dry-run=client", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(ok))
    assert good.stdout.strip() == "pod/fine created (dry run)"
    crd_bad = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}}
    crd_bad["spec"] = {"bogusKnob": True}
    res = kubectl(
        with_crd, "create", "--dry-run=server", "--validate=strict", "-f", "-", stdin=json.dumps(crd_bad), check=False
    )
    assert 'unknown field "spec.bogusKnob"' in res.stderr


def test_duplicate_fields_under_strict(with_crd: SandboxThread) -> None:
    raw = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup","name":"dup"},"data":{"a":"1","a":"2"}}'
    path = "/api/v1/namespaces/default/configmaps"
    status, _, body = _request(with_crd, path + "?fieldValidation=Strict", method="POST", body=raw)
    assert status == 400
    assert json.loads(body)["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'duplicate field "metadata.name", duplicate field "data.a"'
    )
    status, headers, _ = _request(with_crd, path + "?fieldValidation=Warn", method="POST", body=raw)
    assert status == 201 and 'duplicate field \\"metadata.name\\"' in headers["Warning"]


def test_builtin_quantities_are_validated(with_crd: SandboxThread) -> None:
    def pod(name: str, resources: dict[str, Any]) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "resources": resources}]},
            }
        )

    neg = kubectl(with_crd, "create", "-f", "-", stdin=pod("neg", {"requests": {"cpu": "-1"}}), check=False)
    assert 'spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0' in (
        neg.stderr
    )
    junk = kubectl(with_crd, "create", "-f", "-", stdin=pod("junk", {"limits": {"memory": "lots"}}), check=False)
    assert junk.returncode == 1 and "quantities must match the regular expression" in junk.stderr
    over = kubectl(
        with_crd,
        "create",
        "-f",
        "-",
        stdin=pod("over", {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
        check=False,
    )
    assert (
        'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1'
        in (over.stderr)
    )
    kubectl(with_crd, "create", "-f", "-", stdin=pod("fine-q", {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}))


def test_protobuf_delete_options_decode() -> None:
    # metav1.DeleteOptions{GracePeriodSeconds: ptr(0), PropagationPolicy: ptr("Background")} as client-go sends it.
    inner = b"\x08\x00" + b"\x22\x0aBackground"
    type_meta = b"\x0a\x02v1" + b"\x12\x0dDeleteOptions"
    envelope = protobuf.MAGIC + b"\x0a" + bytes([len(type_meta)]) + type_meta + b"\x12" + bytes([len(inner)]) + inner
    assert protobuf.decode(envelope) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Background",
    }


def test_shipped_definitions_match_kubernetes_validate() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    src = Path(kv.__file__).parent / "kubernetes-json-schema/v1.34.0-local/_definitions.json"
    assert json.loads(src.read_text())["$defs"] == schemas.definitions()


CHART = {
    "Chart.yaml": "apiVersion: v2\nname: tiny\nversion: 0.1.0\n",
    "templates/all.yaml": """
apiVersion: v1
kind: Secret
metadata: {name: tiny-secret}
stringData: {token: abc}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: tiny}
spec:
  replicas: 1
  selector: {matchLabels: {app: tiny}}
  template:
    metadata: {labels: {app: tiny}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{containerPort: 80}]
        resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 32Mi}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: tiny}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: tiny}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: tiny-hook
  annotations:
    helm.sh/hook: post-install,pre-delete
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: hook, image: busybox:1.36, args: [echo, done]}]
""",
}


def _complete_jobs(runner: SandboxThread, stop: threading.Event) -> None:
    """Stand in for a Job controller: mark every Job of the test namespace Complete."""
    done: set[str] = set()
    while not stop.is_set():
        out = kubectl(runner, "get", "jobs", "-n", "tiny", "-o", "json", check=False).stdout
        for job in json.loads(out or '{"items": []}')["items"]:
            uid = job["metadata"]["uid"]
            if uid in done:
                continue
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status = {
                "status": {
                    "succeeded": 1,
                    "startTime": now,
                    "completionTime": now,
                    "conditions": [
                        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                        {"type": "Complete", "status": "True", "lastTransitionTime": now},
                    ],
                }
            }
            name = job["metadata"]["name"]
            patched = kubectl(
                runner,
                *("patch", "job", name, "-n", "tiny", "--subresource=status", "--type=merge", "-p", json.dumps(status)),
                check=False,
            )
            if patched.returncode == 0:
                done.add(uid)
        stop.wait(0.2)


def test_real_helm_install_and_uninstall(tmp_path: Path, threaded: SandboxThread) -> None:
    helm = pytest.importorskip("helm_python")
    chart = tmp_path / "tiny"
    for name, text in CHART.items():
        (chart / name).parent.mkdir(parents=True, exist_ok=True)
        (chart / name).write_text(text)
    cfg = helm.Config(kubeconfig_path=str(threaded.sandbox.kubeconfig_path), namespace="tiny")
    stop = threading.Event()
    worker = threading.Thread(target=_complete_jobs, args=(threaded, stop), daemon=True)
    worker.start()
    try:
        cfg.install(str(chart), "tiny", {}, create_namespace=True, timeout=60)
        objects = kubectl(threaded, "get", "deploy,pdb,secret", "-n", "tiny", "-o", "name").stdout.split()
        assert {"deployment.apps/tiny", "poddisruptionbudget.policy/tiny", "secret/tiny-secret"} <= set(objects)
        assert "secret/sh.helm.release.v1.tiny.v1" in objects
        cfg.uninstall("tiny", timeout=60)
    finally:
        stop.set()
        worker.join(timeout=10)
    left = kubectl(threaded, "get", "deploy,pdb,secret,jobs", "-n", "tiny", "-o", "name").stdout.split()
    assert left == [], left
