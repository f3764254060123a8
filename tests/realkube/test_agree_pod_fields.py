"""The operand fields a GPUCluster sets: the sandbox refuses them as kube-apiserver does.

Labels and annotations of any object and of pod templates (ValidateObjectMeta,
ValidatePodTemplateSpec), and of the pod spec (ValidatePodSpec): volumes and volume mounts,
container env names and resources, the pod security context (IDs, sysctls, seccomp and AppArmor
profiles, seLinuxChangePolicy), tolerations and priorityClassName; server-side apply's typed
conversion (a repeated list-map key, an IntOrString an int32 cannot hold, an int32 that wraps) and
create's decoding (an int32 that overflows). Each case is a dry-run request on both backends: the
same code, reason, message and causes. Go walks maps in random order, so a case has at most one
bad key per map.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.realkube.agreement import Case, Obj, Step, answer
from tests.realkube.api import Api

NS = "agree-pod-fields"
DAEMONSETS = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS = f"/api/v1/namespaces/{NS}/pods"
DRY = "?dryRun=All"
APPLY = "?dryRun=All&fieldManager=agreement&force=true"
APPLY_YAML = "application/apply-patch+yaml"


def container(**fields: Any) -> Obj:
    return {"name": "c", "image": "busybox:1.36", **fields}


def pod_spec(*, containers: list[Obj] | None = None, **fields: Any) -> Obj:
    return {"containers": containers or [container()], **fields}


def daemonset(spec: Obj | None = None, *, metadata: Obj | None = None, template: Obj | None = None, **ds: Any) -> Obj:
    labels = {"app": "ds"}
    template_md: Obj = {"labels": labels}
    for key, value in (template or {}).items():
        template_md[key] = {**template_md.get(key, {}), **value}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ds", **(metadata or {})},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": template_md, "spec": spec or pod_spec()},
            **ds,
        },
    }


def created(case: str, obj: Obj, path: str = DAEMONSETS) -> Case:
    return Case(case, Step("POST", path + DRY, obj))


def applied(case: str, obj: Obj, path: str = DAEMONSETS, keep: Any = None) -> Case:
    name = obj["metadata"]["name"]
    return Case(f"apply-{case}", Step("PATCH", f"{path}/{name}{APPLY}", obj, content_type=APPLY_YAML), keep=keep)


def ds_case(case: str, spec: Obj) -> Case:
    return created(case, daemonset(spec))


def security(case: str, **context: Any) -> Case:
    return ds_case(case, pod_spec(securityContext=context))


def tolerations(case: str, *items: Obj) -> Case:
    return ds_case(case, pod_spec(tolerations=list(items)))


def resources(case: str, **requirements: Any) -> Case:
    return ds_case(case, pod_spec(containers=[container(resources=requirements)]))


def env(case: str, *names: str) -> Case:
    return ds_case(case, pod_spec(containers=[container(env=[{"name": n, "value": "x"} for n in names])]))


def first_port(body: Obj) -> Any:
    return body["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]


MOUNTED = pod_spec(
    containers=[container(volumeMounts=[{"name": "v", "mountPath": "/v"}, {"name": "v", "mountPath": "/v"}])],
    volumes=[{"name": "v", "emptyDir": {}}],
)

CASES = [
    # metadata and pod template metadata
    created("label-key", daemonset(metadata={"labels": {"bad key": "v"}})),
    created("label-value", daemonset(metadata={"labels": {"k": "bad value"}})),
    created("label-value-too-long", daemonset(metadata={"labels": {"k": "v" * 64}})),
    created("label-prefix", daemonset(metadata={"labels": {"Example.com/k": "v"}})),
    created("annotation-key", daemonset(metadata={"annotations": {"bad key": "v"}})),
    created("annotation-key-capital-prefix", daemonset(metadata={"annotations": {"Example.COM/Note": "v"}})),
    created("annotations-too-large", daemonset(metadata={"annotations": {"a": "x" * (256 * 1024)}})),
    created("template-label-key", daemonset(template={"labels": {"bad key": "v"}})),
    created("template-annotation-key", daemonset(template={"annotations": {"a/b/c": "v"}})),
    created(
        "cluster-role-label",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "r", "labels": {"k": "v!"}},
        },
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ),
    # tolerations (ValidateTolerations)
    tolerations("toleration-exists-with-value", {"key": "a", "operator": "Exists", "value": "x"}),
    tolerations("toleration-lt", {"key": "a", "operator": "Lt", "value": "5"}),
    tolerations(
        "toleration-seconds-without-no-execute",
        {"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
    ),
    tolerations("toleration-key", {"key": "bad key", "operator": "Exists"}),
    tolerations("toleration-no-key-equal", {"operator": "Equal", "value": "x"}),
    tolerations("toleration-no-key-no-operator"),
    tolerations("toleration-value", {"key": "a", "value": "bad value!"}),
    tolerations("toleration-effect", {"key": "a", "operator": "Exists", "effect": "Sometimes"}),
    tolerations(
        "toleration-everything-wrong",
        {"key": "bad key", "operator": "Exists", "value": "x", "effect": "NoSchedule", "tolerationSeconds": 1},
    ),
    tolerations(
        "tolerations-fine",
        {"operator": "Exists"},
        {"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -1},
    ),
    # priorityClassName
    ds_case("priority-class", pod_spec(priorityClassName="Bad_Name")),
    ds_case("priority-class-too-long", pod_spec(priorityClassName="a" * 254)),
    # the pod security context
    security("ids", runAsUser=-1, runAsGroup=3000000000, fsGroup=-2, supplementalGroups=[-1, 5]),
    security("seccomp-localhost-without-profile", seccompProfile={"type": "Localhost"}),
    security("seccomp-profile-without-localhost", seccompProfile={"type": "RuntimeDefault", "localhostProfile": "x"}),
    security("seccomp-absolute-profile", seccompProfile={"type": "Localhost", "localhostProfile": "/abs"}),
    security("seccomp-backstep", seccompProfile={"type": "Localhost", "localhostProfile": "a/../b"}),
    security("seccomp-empty-profile", seccompProfile={"type": "Localhost", "localhostProfile": ""}),
    security("seccomp-type", seccompProfile={"type": "Other"}),
    security("apparmor-empty-profile", appArmorProfile={"type": "Localhost", "localhostProfile": ""}),
    security("apparmor-padded", appArmorProfile={"type": "Localhost", "localhostProfile": " x"}),
    security("apparmor-too-long", appArmorProfile={"type": "Localhost", "localhostProfile": "x" * 4096}),
    security("apparmor-profile-without-localhost", appArmorProfile={"type": "RuntimeDefault", "localhostProfile": "x"}),
    security("apparmor-type", appArmorProfile={"type": "Other"}),
    security("selinux-change-policy-mount-option", seLinuxChangePolicy="MountOption"),
    security("fs-group-change-policy", fsGroupChangePolicy="Sometimes"),
    security("supplemental-groups-policy", supplementalGroupsPolicy="Sometimes"),
    security(
        "sysctls",
        sysctls=[
            {"name": "bad name", "value": "1"},
            {"name": "kernel.msgmax", "value": "1"},
            {"name": "kernel.msgmax", "value": "2"},
            {"name": "", "value": "x"},
        ],
    ),
    ds_case(
        "sysctls-on-the-host-network",
        pod_spec(
            hostNetwork=True,
            securityContext={
                "sysctls": [
                    {"name": "net.ipv4.ip_forward", "value": "1"},
                    {"name": "net/core/somaxconn", "value": "1"},
                    {"name": "kernel.shm_rmid_forced", "value": "1"},
                ]
            },
        ),
    ),
    ds_case(
        "sysctls-with-host-ipc",
        pod_spec(hostIPC=True, securityContext={"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}),
    ),
    # env names (1.34's relaxed names)
    env("env-names", "", "A=B", "ok name", "1-a.b"),
    env("env-tab", "A\tB"),
    env("env-non-ascii", "Ä"),
    ds_case("init-container-env", pod_spec(initContainers=[container(name="i", env=[{"name": "A=B"}])])),
    # resources (validateContainerResourceName, ValidateResourceRequirements)
    resources("resource-no-domain", limits={"foo": "1"}),
    resources("resource-name", limits={"bad name": "1"}),
    resources("resource-requests-prefix", limits={"requests.example.com/y": "1"}),
    resources("resource-quota-name", requests={"pods": "1"}),
    resources("resource-kubernetes-io", limits={"kubernetes.io/x": "1.5"}),
    resources("resource-extended-request-without-limit", requests={"example.com/foo": "1"}),
    resources("resource-extended-below-limit", limits={"example.com/foo": "2"}, requests={"example.com/foo": "1"}),
    resources("resource-extended-fraction", limits={"example.com/foo": "500m"}),
    resources("hugepages-alone", limits={"hugepages-2Mi": "2Mi"}),
    resources(
        "hugepages-partial-page", limits={"hugepages-2Mi": "3Mi", "memory": "1Gi"}, requests={"hugepages-2Mi": "3Mi"}
    ),
    resources("hugepages-request-without-limit", requests={"hugepages-2Mi": "2Mi", "memory": "1Gi"}),
    ds_case(
        "containers-before-init-containers",
        pod_spec(
            containers=[container(resources={"limits": {"cpu": "-1"}})],
            initContainers=[container(name="i", resources={"limits": {"cpu": "-1"}})],
        ),
    ),
    ds_case("init-container-named-as-a-container", pod_spec(initContainers=[container()])),
    # volumes and mounts
    ds_case(
        "host-path-backstep",
        pod_spec(
            containers=[container(volumeMounts=[{"name": "v", "mountPath": "/v"}])],
            volumes=[{"name": "v", "hostPath": {"path": "/a/../b"}}],
        ),
    ),
    ds_case("mount-of-no-volume", pod_spec(containers=[container(volumeMounts=[{"name": "nope", "mountPath": "/v"}])])),
    ds_case("mount-path-twice", MOUNTED),
    # the same fields elsewhere: a Deployment's template, a Job's, a Pod
    created(
        "deployment-toleration",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "deploy"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod_spec(tolerations=[{"operator": "Lt"}])},
            },
        },
        DEPLOYMENTS,
    ),
    created(
        "job-template-label",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"bad key": "v"}},
                    "spec": pod_spec(restartPolicy="Never", priorityClassName="Bad_Name"),
                }
            },
        },
        JOBS,
    ),
    created(
        "pod-security-context",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": pod_spec(securityContext={"runAsUser": -1}),
        },
        PODS,
    ),
    # decoding and server-side apply's typed conversion
    created(
        "max-unavailable-over-int32",
        daemonset(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3000000000}}),
    ),
    applied(
        "max-unavailable-over-int32",
        daemonset(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": -3000000000}}),
    ),
    applied("mount-path-twice", daemonset(MOUNTED)),
    applied(
        "service-port-twice",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc"},
            "spec": {"selector": {"a": "b"}, "ports": [{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]},
        },
        f"/api/v1/namespaces/{NS}/services",
    ),
    created(
        "container-port-over-int32", daemonset(pod_spec(containers=[container(ports=[{"containerPort": 2**32 + 80}])]))
    ),
    applied(
        "container-port-wraps-around",
        daemonset(pod_spec(containers=[container(ports=[{"containerPort": 2**32 + 80}])])),
        keep=first_port,
    ),
]


@pytest.fixture(scope="module")
def namespace(apis: list[Api]) -> str:
    for api in apis:
        api.namespace(NS)
    return NS


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_operand_fields_agree_with_kube_apiserver(apis: list[Api], namespace: str, case: Case) -> None:
    sandbox, kube = (answer(api, case, {}) for api in apis)
    assert sandbox == kube


# --- a custom resource's metadata ---------------------------------------------------------------

WIDGETS_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.agree.example.com"},
    "spec": {
        "group": "agree.example.com",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "count": {"type": "integer"},
                                    "code": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                                    "items": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"],
                                        "items": {
                                            "type": "object",
                                            "required": ["name"],
                                            "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                                        },
                                    },
                                    "tags": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "set",
                                        "items": {"type": "string"},
                                    },
                                    "cpu": {
                                        "x-kubernetes-int-or-string": True,
                                        "maxLength": 16,
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "isQuantity(string(self)) && quantity(string(self)).isLessThan(quantity('2')) && quantity(string(self)).add(1).compareTo(quantity('1500m')) >= 0",
                                                "message": "cpu must be a quantity from 500m to less than 2",
                                            }
                                        ],
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}
WIDGETS = f"/apis/agree.example.com/v1/namespaces/{NS}/widgets"


@pytest.fixture(scope="module")
def widgets(apis: list[Api], namespace: str) -> Iterator[None]:
    for api in apis:
        status, body = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS_CRD)
        assert status in (201, 409), body
    deadline = time.monotonic() + 30
    while any(api.request("GET", WIDGETS)[0] != 200 for api in apis):
        assert time.monotonic() < deadline, "widgets are not served after 30 s"
        time.sleep(0.2)
    yield
    for api in apis:
        api.request(
            "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{WIDGETS_CRD['metadata']['name']}"
        )


@pytest.mark.parametrize(
    ("case", "metadata"),
    [
        ("label-key", {"labels": {"bad key": "v"}}),
        ("label-value", {"labels": {"k": "v" * 64}}),
        ("annotation-key", {"annotations": {"a/b/c": "v"}}),
        ("fine", {"labels": {"example.com/k": "v"}, "annotations": {"Example.COM/x": "y"}}),
    ],
)
def test_custom_resource_metadata_agrees_with_kube_apiserver(
    apis: list[Api], widgets: None, case: str, metadata: Obj
) -> None:
    obj = {"apiVersion": "agree.example.com/v1", "kind": "Widget", "metadata": {"name": "w", **metadata}}
    step = Case(f"widget-{case}", Step("POST", WIDGETS + DRY, obj))
    sandbox, kube = (answer(api, step, {}) for api in apis)
    assert sandbox == kube


@pytest.mark.parametrize(
    ("case", "spec"),
    [
        # JSON integers beyond int64 are float64 to kube-apiserver's decoder: "number", not integer
        ("integer-beyond-int64", {"count": 10**30}),
        ("integer-in-int64", {"count": 2**63 - 1}),
        # x-kubernetes-list-type map and set: a repeated key or value
        ("list-map-key-twice", {"items": [{"name": "a", "value": "1"}, {"name": "b"}, {"name": "a", "value": "2"}]}),
        ("list-set-value-twice", {"tags": ["x", "y", "x"]}),
        # a string's checks stop at the first that fails: maxLength, then pattern
        ("string-too-long-and-unmatched", {"code": "TOO-LONG"}),
        ("string-unmatched", {"code": "AB"}),
        # Kubernetes' CEL quantity library in a CRD rule
        ("quantity-in-range", {"cpu": "750m"}),
        ("quantity-too-small", {"cpu": "100m"}),
        ("quantity-too-large", {"cpu": 2}),
        ("not-a-quantity", {"cpu": "lots"}),
    ],
)
def test_custom_resource_values_agree_with_kube_apiserver(apis: list[Api], widgets: None, case: str, spec: Obj) -> None:
    obj = {"apiVersion": "agree.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}
    step = Case(f"widget-{case}", Step("POST", WIDGETS + DRY, obj))
    sandbox, kube = (answer(api, step, {}) for api in apis)
    assert sandbox == kube
