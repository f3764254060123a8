"""The Helm chart, rendered and linted by real Helm v4 (tests/chart/helm.py), compared with what
the Python code generates: webhook configurations, CRDs, operand RBAC, the GPUCluster spec."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from gpucluster.api import gpucluster as gc
from gpucluster.api.crd import generated_files
from gpucluster.api.validation import validate_gpucluster
from gpucluster.certs.inject import CA_INJECTION_LABEL
from gpucluster.cli.webhook import WEBHOOK_KINDS
from gpucluster.controller.leader import LEASE_NAME
from gpucluster.controller.operands import ClusterFacts
from gpucluster.controller.operands import render as render_operands
from gpucluster.controller.runtime import Controller
from gpucluster.kube.paths import plural
from gpucluster.kube.reflector import RESOURCES
from gpucluster.translate import parse_quantity
from gpucluster.webhook.admission import HOOKS
from gpucluster.webhook.configurations import webhook_configurations
from tests.chart import helm, schema
from tests.chart.helm import (
    CA_BUNDLE,
    CERT_MANAGER_API,
    DOCS_OPERATOR_MANAGED,
    DOCS_PREINSTALLED,
    DOCS_RECIPES,
    NAMESPACE,
    NVIDIADRIVER_API,
    Manifest,
    Recipe,
    render,
    render_error,
    render_recipe,
)

RECIPE_IDS = [r.name for r in DOCS_RECIPES]


def one(objs: list[Manifest], kind: str) -> Manifest:
    found = [o for o in objs if o.kind == kind]
    assert len(found) == 1, (kind, [(o.kind, o.name) for o in objs])
    return found[0]


def kinds(objs: list[Manifest]) -> set[str]:
    return {o.kind for o in objs}


def default_object(objs: list[Manifest], kind: str) -> Manifest:
    """The GPUCluster or NVIDIADriver the install creates (a release object or hook-applied)."""
    return one(helm.default_objects(objs), kind)


def operator_account(objs: list[Manifest]) -> str:
    name = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert name in {o.name for o in objs if o.kind == "ServiceAccount"}
    return str(name)


# --- Chart.yaml, values, schema, lint ------------------------------------------------------------


def test_chart_yaml() -> None:
    chart = helm.chart().metadata
    assert chart["apiVersion"] == "v2" and chart["name"] == "gpucluster" and chart["version"] == "0.2.0"
    # helm install checks this before rendering; the SDK's render does not, validations.yaml does.
    assert chart["kubeVersion"] == ">=1.34.2-0"
    assert chart["appVersion"] and chart["description"] and chart["home"] and chart["sources"]


def test_values_schema_is_draft7_and_current() -> None:
    jsonschema.Draft7Validator.check_schema(helm.chart().schema)
    assert (schema.CHART / "values.schema.json").read_text() == schema.render(), "run: python -m tests.chart.schema"


@pytest.mark.parametrize("recipe", [Recipe("defaults", ()), *DOCS_RECIPES], ids=["defaults", *RECIPE_IDS])
def test_helm_lint_is_clean(recipe: Recipe) -> None:
    problems = [str(m) for m in helm.lint(recipe.set_flags) if m.severity >= helm.WARNING]
    assert not problems, problems


def test_lint_reports_schema_violations() -> None:
    """The lint check itself works: bad values are errors."""
    assert any(m.severity == helm.ERROR and "/operator/replicas" in m.error for m in helm.lint(["operator.replicas=0"]))


def test_docs_recipes_as_helm_parses_them() -> None:
    dra = {"env": [{"name": "DEFAULT_GPU_ALLOCATION_MODE", "value": "dra"}]}
    assert helm.set_values(DOCS_OPERATOR_MANAGED.set_flags) == {
        "gpuCluster": {"enabled": True},
        "driver": {"nvidiaDriverCRD": {"enabled": True}},
        "operator": dra,
    }
    assert helm.set_values(DOCS_PREINSTALLED.set_flags) == {
        "gpuCluster": {"enabled": True},
        "driver": {"enabled": False},
        "operator": dra,
    }


def test_docs_recipes_are_the_documented_ones() -> None:
    """The flags in README's "Install on a cluster" and in the values.yaml header are these."""
    readme = (schema.CHART.parents[1] / "README.md").read_text()
    header = (schema.CHART / "values.yaml").read_text().split("\n\n", 1)[0]
    for recipe in DOCS_RECIPES:
        flags = " ".join(f"--set {f}" for f in recipe.set_flags)
        assert flags in " ".join(readme.replace("\\\n", " ").split()), recipe.name
    assert " ".join(f"--set {f}" for f in DOCS_OPERATOR_MANAGED.set_flags) in " ".join(
        header.replace("#", " ").replace("\\", " ").split()
    )


def test_docs_helm_reference_defaults() -> None:
    values = helm.chart().values
    assert values["gpuCluster"]["enabled"] is False
    assert values["operator"]["env"] == []
    assert values["dcgmExporter"]["enabled"] is True and values["dcgm"]["enabled"] is False
    assert set(values["hostPaths"]) == {"rootFS", "driverInstallDir", "kubeletRootDir"}
    assert {"labels", "annotations", "priorityClassName", "tolerations", "updateStrategy"} <= set(values["daemonsets"])
    assert {"repository", "image", "version", "gpus", "computeDomains", "featureGates"} <= set(
        values["gpuCluster"]["draDriver"]
    )
    assert values["driver"]["enabled"] is True and values["driver"]["nvidiaDriverCRD"]["enabled"] is False
    assert {"repository", "image", "version"} <= set(values["operator"])
    assert values["webhook"]["enabled"] is True and values["webhook"]["translation"]["mode"] == "auto"
    assert values["webhook"]["certificates"]["mode"] == "self-managed"
    assert values["operator"]["replicas"] == 2


def test_the_controller_memory_limit_holds_20000_nodes() -> None:
    """values.yaml's formula (README, "memory per 1,000 nodes"): the caches 128 MiB + 12 MiB per 1,000
    nodes x 8 GPUs (`make bench` measures the line), x 1.5 for a relist, plus the allocator worker
    32 MiB + 16 MiB per 1,000 nodes."""
    resources = helm.chart().values["operator"]["resources"]
    thousands = 20
    needed = 1.5 * (128 + 12 * thousands) + 32 + 16 * thousands
    assert parse_quantity(resources["limits"]["memory"]) >= needed * 2**20
    assert parse_quantity(resources["requests"]["memory"]) <= parse_quantity(resources["limits"]["memory"])


@pytest.mark.parametrize(
    ("flag", "where"),
    [
        ("webhook.translation.mode=sometimes", "/webhook/translation/mode"),
        ("webhook.certificates.mode=vault", "/webhook/certificates/mode"),
        (r"webhook.failurePolicy.pods\.mutate\.gpucluster\.nvidia\.com=Maybe", "/webhook/failurePolicy"),
        (r"webhook.failurePolicy.pods\.mutate\.typo=Fail", "invalid propertyName 'pods.mutate.typo'"),
        ("gpuCluster.draDriver.imagePullPolicy=Sometimes", "/gpuCluster/draDriver/imagePullPolicy"),
        ("gpuCluster.draDriver.typo=1", "/gpuCluster/draDriver"),
        ("dcgm.hostPort=70000", "/dcgm/hostPort"),
        ("daemonsets.updateStrategy=Recreate", "/daemonsets/updateStrategy"),
        ("operator.replicas=0", "/operator/replicas"),
        ("operator.replicas=two", "/operator/replicas"),
        ("typo=1", "typo"),
    ],
)
def test_helm_refuses_bad_values(flag: str, where: str) -> None:
    """Helm validates the values against values.schema.json before rendering."""
    message = render_error([*DOCS_PREINSTALLED.set_flags, flag])
    assert "don't meet the specifications of the schema" in message and where in message, message


def test_every_values_path_in_templates_exists() -> None:
    """A typo in .Values.x.y renders as empty, silently: every path the templates read exists."""
    values = helm.chart().values
    missing = []
    for template in helm.chart().templates:
        for match in re.finditer(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", template["data"]):
            node: Any = values
            for part in match.group(1).lstrip(".").split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(f"{template['name']}: .Values{match.group(1)}")
                    break
                node = node[part]
    assert not missing, missing


def test_crds_are_the_generated_ones() -> None:
    on_disk = {c["name"].removeprefix("crds/"): c["data"] for c in helm.chart().crds}
    assert on_disk == generated_files(), "run: make crds"


# --- install-time checks (validations.yaml) -------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "kwargs", "message"),
    [
        ((), {"api_versions": ()}, "this cluster does not serve resource.k8s.io/v1 DeviceClass"),
        ((), {"api_versions": ("resource.k8s.io/v1beta1/DeviceClass",)}, "does not serve resource.k8s.io/v1"),
        ((), {"kube_version": "v1.34.1"}, "needs Kubernetes 1.34.2 or later; this cluster runs v1.34.1"),
        ((), {"kube_version": "v1.33.5"}, "needs Kubernetes 1.34.2 or later; this cluster runs v1.33.5"),
        (("clusterPolicy.enabled=true",), {}, "gpuCluster.enabled and clusterPolicy.enabled cannot both be true"),
        (("driver.enabled=true",), {}, "gpuCluster.enabled=true does not manage the GPU driver"),
        (
            ("driver.enabled=true", "driver.nvidiaDriverCRD.enabled=true"),
            {},
            "driver.nvidiaDriverCRD.enabled=true needs the NVIDIADriver API",
        ),
        (("webhook.certificates.mode=secret",), {}, "needs webhook.certificates.secret.name"),
        (
            ("webhook.certificates.mode=secret", "webhook.certificates.secret.name=mine"),
            {},
            "needs webhook.certificates.secret.caBundle",
        ),
        (("webhook.certificates.mode=cert-manager",), {}, "cert-manager.io/v1 is not served"),
        (
            ("webhook.certificates.mode=cert-manager", "webhook.certificates.certManager.issuerType=issuer"),
            {"api_versions": helm.DEVICE_CLASS_API + CERT_MANAGER_API},
            "issuerName is needed when issuerType is issuer or clusterissuer",
        ),
    ],
)
def test_install_time_checks_fail_clearly(flags: tuple[str, ...], kwargs: dict[str, Any], message: str) -> None:
    got = render_error([*DOCS_PREINSTALLED.set_flags, *flags], **kwargs)
    assert got.startswith("execution error at (gpucluster/templates/validations.yaml:"), got
    assert message in got, got


def test_install_time_checks_pass_for_a_good_cluster() -> None:
    render(["driver.enabled=false", "gpuCluster.enabled=true"], kube_version="v1.35.0")
    render(["driver.nvidiaDriverCRD.enabled=true"], api_versions=helm.DEVICE_CLASS_API + NVIDIADRIVER_API)
    # The ClusterPolicy lookup: offline, lookup finds nothing, so the install proceeds (the
    # refusal with a live ClusterPolicy needs a cluster: the end-to-end tests).
    render(DOCS_PREINSTALLED.set_flags, api_versions=(*helm.DEVICE_CLASS_API, "nvidia.com/v1/ClusterPolicy"))


# --- the default GPUCluster ------------------------------------------------------------------------


def prune(node: dict[str, Any]) -> dict[str, Any]:
    """What the chart's gpucluster.prune helper promises: "", None, [] and {} are dropped, recursively."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            inner = prune(value)
            if inner:
                out[key] = inner
        elif isinstance(value, (bool, int, float)) or value:
            out[key] = value
    return out


# Values subtree -> GPUCluster spec field (the contract README states for gpuCluster.* and co).
SPEC_FROM_VALUES = {
    "draDriver": ("gpuCluster", "draDriver"),
    "dcgmExporter": ("dcgmExporter",),
    "dcgm": ("dcgm",),
    "hostPaths": ("hostPaths",),
    "daemonsets": ("daemonsets",),
}


def spec_from_values(values: dict[str, Any]) -> dict[str, Any]:
    spec = {}
    for field_name, path in SPEC_FROM_VALUES.items():
        node: Any = values
        for part in path:
            node = node[part]
        spec[field_name] = node
    return prune(spec)


def leaves(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= leaves(value, f"{path}.{key}")
        return out
    return {path: node}


@pytest.mark.parametrize("recipe", DOCS_RECIPES, ids=RECIPE_IDS)
def test_default_gpucluster_is_the_values_and_the_model_defaults(recipe: Recipe) -> None:
    doc = default_object(render_recipe(recipe), "GPUCluster")
    assert (doc["apiVersion"], doc["kind"], doc.name) == (gc.API_VERSION, gc.KIND, gc.SINGLETON_NAME)
    if doc.template == "templates/gpucluster.yaml":  # a release object: Helm must not delete it itself
        assert doc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert doc["spec"] == spec_from_values(helm.chart().merge_values(helm.set_values(recipe.set_flags)))
    result = validate_gpucluster(dict(doc))
    assert result.ok and not result.warnings, ([str(p) for p in result.problems], result.warnings)
    assert result.obj is not None
    # values.yaml never changes a default of the model: every field the model defaults is the same.
    got = leaves(result.obj.spec.model_dump(mode="json"))
    empty = validate_gpucluster({"apiVersion": gc.API_VERSION, "kind": gc.KIND, "metadata": doc["metadata"]})
    assert empty.obj is not None
    changed = {p: (v, got.get(p)) for p, v in leaves(empty.obj.spec.model_dump(mode="json")).items() if v is not None}
    assert {p: d for p, d in changed.items() if d[0] != d[1]} == {}
    rendered = render_operands(result.obj, ClusterFacts())  # renders without any image environment
    assert any(o["kind"] == "DaemonSet" for o in rendered)


def test_gpucluster_values_reach_the_spec() -> None:
    doc = default_object(
        render_recipe(
            DOCS_PREINSTALLED, "gpuCluster.draDriver.version=v9.9.9", "dcgm.enabled=true", "hostPaths.rootFS=/host"
        ),
        "GPUCluster",
    )
    assert doc["spec"]["draDriver"]["version"] == "v9.9.9"
    assert doc["spec"]["dcgm"]["enabled"] is True and doc["spec"]["hostPaths"]["rootFS"] == "/host"


def test_gpucluster_only_when_enabled() -> None:
    assert "GPUCluster" not in kinds(helm.default_objects(render()))
    assert "GPUCluster" not in kinds(helm.default_objects(render(["driver.enabled=false"])))


# --- webhook configurations -----------------------------------------------------------------------


@pytest.mark.parametrize("namespace", [NAMESPACE, "zeta", "kube-system"])
def test_webhook_configurations_match_the_python_table(namespace: str) -> None:
    objs = render(DOCS_PREINSTALLED.set_flags, namespace=namespace)
    service = one(objs, "Service")
    chart = [o for o in objs if o.kind.endswith("WebhookConfiguration")]
    # The operator's own templates skip the template hook: the identity its pods run as.
    account = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    operator = f"system:serviceaccount:{namespace}:{account}"
    ours = webhook_configurations(namespace=namespace, service=service.name, operator=operator)
    assert [(d["kind"], d["metadata"]["name"]) for d in chart] == [(d["kind"], d["metadata"]["name"]) for d in ours]
    for got, want in zip(chart, ours, strict=True):
        # What certificate injection looks for (Helm relabels managed-by=Helm on install).
        assert got["metadata"]["labels"][CA_INJECTION_LABEL] == "true"
        assert "annotations" not in got["metadata"]
        assert [w["name"] for w in got["webhooks"]] == [w["name"] for w in want["webhooks"]]
        for g, w in zip(got["webhooks"], want["webhooks"], strict=True):
            assert g == w, g["name"]
    assert {h.name for h in HOOKS} == {w["name"] for c in chart for w in c["webhooks"]}


def test_webhook_service_reaches_the_webhook_container() -> None:
    objs = render_recipe(DOCS_PREINSTALLED)
    service, deployment = one(objs, "Service"), one(objs, "Deployment")
    pod = deployment["spec"]["template"]
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    webhook = next(c for c in pod["spec"]["containers"] if c["name"] == "webhook")
    assert port["targetPort"] in {p["name"] for p in webhook["ports"]}
    assert f"--service-name={service.name}" in webhook["args"]


def test_webhook_failure_policy_is_a_value() -> None:
    objs = render_recipe(DOCS_PREINSTALLED, r"webhook.failurePolicy.pods\.mutate\.gpucluster\.nvidia\.com=Fail")
    mutating = one(objs, "MutatingWebhookConfiguration")
    policies = {w["name"]: w["failurePolicy"] for w in mutating["webhooks"]}
    assert policies["pods.mutate.gpucluster.nvidia.com"] == "Fail"


def test_webhook_disabled_renders_no_webhook() -> None:
    objs = render_recipe(DOCS_PREINSTALLED, "webhook.enabled=false")
    assert not {"Service", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} & kinds(objs)
    containers = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["controller"]


def test_certificates_self_managed() -> None:
    objs = render_recipe(DOCS_PREINSTALLED)
    secret = one(objs, "Secret")
    assert secret["type"] == "Opaque" and "data" not in secret
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    rotate = [c for c in pod["initContainers"] + pod["containers"] if c["args"][:2] == ["certs", "rotate"]]
    assert [c["name"] for c in rotate] == ["certs-init", "certs"]
    assert all(f"--secret={secret.name}" in c["args"] for c in rotate)
    assert any(a.startswith("--probe=$(POD_IP):") for a in rotate[1]["args"])
    for config in (o for o in objs if o.kind.endswith("WebhookConfiguration")):
        assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])  # the operator injects it


def test_certificates_cert_manager() -> None:
    objs = render_recipe(DOCS_PREINSTALLED, "webhook.certificates.mode=cert-manager", api_versions=CERT_MANAGER_API)
    certificates = [o for o in objs if o.kind == "Certificate"]
    issuers = [o for o in objs if o.kind == "Issuer"]
    assert "Secret" not in kinds(objs) and len(issuers) == 2
    assert any(c["spec"].get("isCA") for c in certificates)
    assert any(i["spec"] == {"selfSigned": {}} for i in issuers)
    (serving,) = [c for c in certificates if not c["spec"].get("isCA")]
    service = one(objs, "Service")
    assert f"{service.name}.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    for config in (o for o in objs if o.kind.endswith("WebhookConfiguration")):
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{serving.name}"}
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (certs,) = [v for v in pod["volumes"] if v["name"] == "certs"]
    assert certs["secret"]["secretName"] == serving["spec"]["secretName"]


def test_certificates_from_a_secret() -> None:
    objs = render_recipe(
        DOCS_PREINSTALLED,
        "webhook.certificates.mode=secret",
        "webhook.certificates.secret.name=my-tls",
        f"webhook.certificates.secret.caBundle={CA_BUNDLE}",
    )
    assert not {"Secret", "Certificate", "Issuer"} & kinds(objs)
    for config in (o for o in objs if o.kind.endswith("WebhookConfiguration")):
        assert all(w["clientConfig"]["caBundle"] == CA_BUNDLE for w in config["webhooks"])
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (certs,) = [v for v in pod["volumes"] if v["name"] == "certs"]
    assert certs["secret"]["secretName"] == "my-tls"


# --- RBAC -----------------------------------------------------------------------------------------


def allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    return any(
        group in r["apiGroups"]
        and resource in r["resources"]
        and verb in r["verbs"]
        and (not r.get("resourceNames") or (name is not None and name in r["resourceNames"]))
        for r in rules
    )


def operator_rules(objs: list[Manifest]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cluster-wide, operator-namespace) rules of the ServiceAccount the Deployment runs as."""
    subject = {"kind": "ServiceAccount", "name": operator_account(objs), "namespace": NAMESPACE}
    cluster: list[dict[str, Any]] = []
    namespaced: list[dict[str, Any]] = []
    for binding in (o for o in objs if o.kind in ("ClusterRoleBinding", "RoleBinding")):
        if subject not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        (role,) = [o for o in objs if o.kind == ref["kind"] and o.name == ref["name"]]
        if binding.kind == "ClusterRoleBinding":
            cluster += role["rules"]
        else:
            assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == NAMESPACE
            namespaced += role["rules"]
    assert cluster and namespaced
    return cluster, namespaced


def test_rbac_has_no_wildcards() -> None:
    objs = render_recipe(DOCS_OPERATOR_MANAGED)
    assert {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} <= kinds(objs)
    for doc in (o for o in objs if "rules" in o):
        for rule in doc["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert all("*" not in item for item in rule.get(key, [])), (doc.kind, rule)


def full_operand_render() -> list[dict[str, Any]]:
    spec = {
        "draDriver": {"repository": "r.io/x", "image": "d", "version": "v1"},
        "dcgm": {"enabled": True, "repository": "r.io/x", "image": "dcgm", "version": "1"},
        "dcgmExporter": {
            "repository": "r.io/x",
            "image": "e",
            "version": "1",
            "enablePodLabels": True,
            "serviceMonitor": {"enabled": True},
        },
    }
    result = validate_gpucluster(
        {"apiVersion": gc.API_VERSION, "kind": gc.KIND, "metadata": {"name": "gpu-cluster"}, "spec": spec}
    )
    assert result.obj is not None
    return render_operands(result.obj, ClusterFacts(service_monitor_crd=True, env={"VALIDATOR_IMAGE": "r.io/x/v:1"}))


def test_operator_holds_every_permission_it_grants_and_applies() -> None:
    """RBAC escalation prevention: the operator must hold what its operands' roles grant; and it
    must be able to apply (and prune) every kind it renders."""
    cluster, namespaced = operator_rules(render_recipe(DOCS_OPERATOR_MANAGED))
    missing = []
    for obj in full_operand_render():
        if obj["kind"] in ("ClusterRole", "Role"):
            scope = cluster if obj["kind"] == "ClusterRole" else cluster + namespaced
            for rule in obj["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            if not allowed(scope, group, resource, verb):
                                missing.append(f"{obj['kind']}/{obj['metadata']['name']}: {group}/{resource} {verb}")
        group = obj["apiVersion"].rpartition("/")[0]
        resource, is_namespaced = plural(obj["apiVersion"], obj["kind"])
        scope = cluster + namespaced if is_namespaced else cluster
        # What the controller does with a rendered object: watch it, server-side apply it (a PATCH,
        # which creates the object when it is absent: create of that name), prune it, by name.
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            name = None if verb in ("list", "watch") else obj["metadata"]["name"]
            if not allowed(scope, group, resource, verb, name):
                missing.append(f"apply {obj['kind']}: {verb}")
    assert not missing, sorted(set(missing))


def _group_resource(path: str) -> tuple[str, str, bool]:
    """(group, resource, namespaced) of a collection path, /api/v1/... or /apis/g/v/..."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if len(rest) == 3 and rest[0] == "namespaces":
        assert rest[1] == NAMESPACE, path
        return group, rest[2], True
    return group, rest[0], False


def test_operator_can_list_and_watch_what_it_watches() -> None:
    """What the controller's and the webhook's reflectors list and watch, as they ask for it."""
    cluster, namespaced = operator_rules(render_recipe(DOCS_OPERATOR_MANAGED))
    resources = Controller(None, namespace=NAMESPACE)._resources() + [RESOURCES[k] for k in WEBHOOK_KINDS]  # type: ignore[arg-type]
    missing = []
    for resource in resources:
        group, name, is_namespaced = _group_resource(resource.path)
        scope = cluster + namespaced if is_namespaced else cluster
        missing += [f"{verb} {resource.path}" for verb in ("list", "watch") if not allowed(scope, group, name, verb)]
    assert not missing, missing


def test_operator_permissions_for_the_webhook_controller_and_certificates() -> None:
    objs = render_recipe(DOCS_OPERATOR_MANAGED)
    cluster, namespaced = operator_rules(objs)
    secret = one(objs, "Secret").name
    assert allowed(cluster, "resource.k8s.io", "resourceclaimtemplates", "create")  # translated pods
    assert allowed(cluster, "nvidia.com", "gpuclusters/status", "patch")
    assert allowed(cluster, "nvidia.com", "gpuclusters", "patch", gc.SINGLETON_NAME)  # its finalizer
    assert not allowed(cluster, "nvidia.com", "gpuclusters", "delete")  # the hooks' identity deletes it
    assert allowed(cluster, "", "nodes", "patch")
    assert allowed(namespaced, "coordination.k8s.io", "leases", "update")  # leader election
    # Certificates: one Secret by name, our two webhook configurations by name, nothing else.
    assert allowed(namespaced, "", "secrets", "update", secret)
    assert not allowed(namespaced + cluster, "", "secrets", "update", "another-secret")
    assert not allowed(namespaced + cluster, "", "secrets", "create")
    assert not allowed(namespaced + cluster, "", "secrets", "list")
    for config in (o for o in objs if o.kind.endswith("WebhookConfiguration")):
        resource = config.kind.lower() + "s"
        assert allowed(cluster, "admissionregistration.k8s.io", resource, "patch", config.name)
        assert not allowed(cluster, "admissionregistration.k8s.io", resource, "patch", "someone-elses")
        assert not allowed(cluster, "admissionregistration.k8s.io", resource, "list")
    assert allowed(namespaced, "discovery.k8s.io", "endpointslices", "list")
    # The namespace label: only the operator's own namespace.
    assert allowed(cluster, "", "namespaces", "patch", NAMESPACE)
    assert not allowed(cluster, "", "namespaces", "patch", "default")


# --- the rest of the templates ----------------------------------------------------------------------


def test_deployment_runs_webhook_and_controller() -> None:
    objs = render_recipe(DOCS_OPERATOR_MANAGED, "operator.replicas=3", "webhook.translation.mode=audit")
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert containers["controller"]["args"][0] == "controller"
    assert containers["webhook"]["args"][0] == "webhook"
    assert "--translation-mode=audit" in containers["webhook"]["args"]
    env = {e["name"]: e for e in containers["controller"]["env"]}
    assert env["OPERATOR_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["DEFAULT_GPU_ALLOCATION_MODE"]["value"] == "dra"  # operator.env of the recipe
    assert env["DRA_DRIVER_IMAGE"]["value"] == "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.4.1"
    assert {"DCGM_EXPORTER_IMAGE", "DCGM_IMAGE"} <= set(env)
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"] + pod.get("initContainers", []):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, container["name"]
        assert container["image"].endswith("/gpucluster:0.1.0"), container["name"]


def test_validator_image_is_a_value() -> None:
    objs = render_recipe(
        DOCS_PREINSTALLED, "validator.repository=r.io/v", "validator.image=val", "validator.version=v1"
    )
    containers = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert env["VALIDATOR_IMAGE"] == "r.io/v/val:v1"


@pytest.mark.parametrize("recipe", DOCS_RECIPES, ids=RECIPE_IDS)
def test_standard_labels_on_every_object(recipe: Recipe) -> None:
    for obj in render_recipe(recipe):
        labels = obj["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "gpucluster-0.2.0", (obj.kind, obj.name)
        assert labels["app.kubernetes.io/instance"] == helm.RELEASE and labels["app.kubernetes.io/name"] == "gpucluster"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        # Helm sets managed-by=Helm on whatever it installs; the chart says so itself.
        assert labels["app.kubernetes.io/managed-by"] == "Helm", (obj.kind, obj.name)


def test_nvidiadriver_only_operator_managed_and_never_auto_upgrades() -> None:
    assert "NVIDIADriver" not in kinds(helm.default_objects(render_recipe(DOCS_PREINSTALLED)))
    doc = default_object(render_recipe(DOCS_OPERATOR_MANAGED), "NVIDIADriver")
    assert doc["apiVersion"] == "nvidia.com/v1alpha1" and doc["spec"]["upgradePolicy"] == {"autoUpgrade": False}
    assert doc.name == helm.chart().values["driver"]["nvidiaDriverCRD"]["name"]


def _hook_rules(objs: list[Any], account: str) -> tuple[list[Any], list[Any]]:
    """The cluster-wide and release-namespace rules bound to the hooks' ServiceAccount."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    cluster: list[Any] = []
    namespaced: list[Any] = []
    for kind, role_kind, out in (("ClusterRoleBinding", "ClusterRole", cluster), ("RoleBinding", "Role", namespaced)):
        for binding in (o for o in objs if o.kind == kind and subject in o["subjects"]):
            out += next(o for o in objs if o.kind == role_kind and o.name == binding["roleRef"]["name"])["rules"]
    return cluster, namespaced


def test_pre_delete_hook_runs_cleanup_and_refuses_unless_forced() -> None:
    objs = render_recipe(DOCS_OPERATOR_MANAGED)
    (job,) = [o for o in objs if o.hook == "pre-delete" and o.kind == "Job"]
    # A refusal fails the uninstall at once: no retry of the hook's pod.
    assert job["spec"]["backoffLimit"] == 0
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith("/gpucluster:0.1.0")  # the operator image: gpucluster cleanup
    # Only the GPUCluster and NVIDIADriver this release applied: selected by the instance label they carry.
    default = default_object(objs, "GPUCluster")
    instance = default["metadata"]["labels"]["app.kubernetes.io/instance"]
    assert container["args"][:2] == ["cleanup", f"--selector=app.kubernetes.io/instance={instance}"]
    assert (
        f"--driver-selector=app.kubernetes.io/instance={instance},app.kubernetes.io/component=driver"
        in (container["args"])
    )
    assert f"--namespace={NAMESPACE}" in container["args"] and "--force" not in container["args"]
    assert default.name == gc.SINGLETON_NAME
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    rules, namespaced = _hook_rules(objs, account)
    for verb in ("get", "list", "watch", "delete"):
        assert allowed(rules, "nvidia.com", "gpuclusters", verb), verb
        assert allowed(rules, "nvidia.com", "nvidiadrivers", verb), verb
    # It reads which pods hold claims, tells the operands' pods apart, and deletes no pod unless forced.
    assert allowed(rules, "resource.k8s.io", "resourceclaims", "list")
    assert allowed(namespaced, "", "pods", "list")
    assert not allowed(rules, "", "pods", "delete") and not allowed(namespaced, "", "pods", "delete")

    forced = render_recipe(DOCS_OPERATOR_MANAGED, "cleanup.force=true")
    (job,) = [o for o in forced if o.hook == "pre-delete" and o.kind == "Job"]
    assert "--force" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    rules, _ = _hook_rules(forced, account)
    assert allowed(rules, "", "pods", "delete")
    assert "pre-delete" not in {o.hook for o in render_recipe(DOCS_PREINSTALLED, "cleanup.enabled=false")}


def _events(obj: Manifest) -> set[str]:
    return set((obj.hook or "").split(",")) - {""}


@pytest.mark.parametrize(
    ("recipe", "flags"),
    [
        (DOCS_OPERATOR_MANAGED, ()),
        (DOCS_OPERATOR_MANAGED, ("cleanup.force=true",)),
        (DOCS_PREINSTALLED, ("cleanup.enabled=false",)),
        (DOCS_PREINSTALLED, ("gpuCluster.enabled=false",)),
    ],
    ids=["defaults-and-cleanup", "forced-cleanup", "defaults-only", "cleanup-only"],
)
def test_hook_jobs_hold_their_rights_only_while_their_hooks_run(recipe: Recipe, flags: tuple[str, ...]) -> None:
    """The identity and rights of every hook Job are hook objects of the Job's own events, made
    before it and deleted after: no release resource keeps them (cleanup.force's right to delete
    any pod included) for the life of the release."""
    objs = render_recipe(recipe, *flags)
    jobs = [o for o in objs if o.kind == "Job" and o.hook]
    assert jobs
    for job in jobs:
        account = job["spec"]["template"]["spec"]["serviceAccountName"]
        subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        bindings = [o for o in objs if o.kind.endswith("RoleBinding") and subject in (o.get("subjects") or [])]
        assert bindings, job.name
        (identity,) = [o for o in objs if o.kind == "ServiceAccount" and o.name == account]
        job_weight = int(job["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
        covered: set[str] = set()
        for binding in bindings:
            ref = binding["roleRef"]
            (role,) = [o for o in objs if o.kind == ref["kind"] and o.name == ref["name"]]
            for obj in (identity, binding, role):
                annotations = obj["metadata"]["annotations"]
                assert obj.hook is not None, f"{obj.kind} {obj.name} is a release resource"
                assert int(annotations["helm.sh/hook-weight"]) < job_weight, obj.name
                assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"].split(","), obj.name
            # A binding exists only with its role and its account.
            assert _events(binding) <= _events(role) & _events(identity), binding.name
            covered |= _events(binding)
        assert _events(job) <= _events(identity) and _events(job) <= covered, job.name
    forced = "cleanup.force=true" in flags
    pod_deleters = [
        o for o in objs if o.kind.endswith("Role") and any(
            "pods" in r.get("resources", []) and "delete" in r.get("verbs", []) for r in o["rules"]
        ) and "-hooks" in o.name
    ]  # fmt: skip
    assert [(o.kind, _events(o)) for o in pod_deleters] == ([("ClusterRole", {"pre-delete"})] if forced else [])


def test_post_delete_hook_deletes_only_the_operators_lease() -> None:
    objs = render_recipe(DOCS_PREINSTALLED)
    hooks = [o for o in objs if o.hook == "post-delete"]
    assert sorted(o.kind for o in hooks) == ["Job", "Role", "RoleBinding", "ServiceAccount"]
    (role,) = [o for o in hooks if o.kind == "Role"]
    writes = [r for r in role["rules"] if set(r["verbs"]) - {"get", "list", "watch"}]
    assert writes == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [LEASE_NAME],
            "verbs": ["delete"],
        }
    ]
    (job,) = [o for o in hooks if o.kind == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    operator = one(objs, "Deployment")["spec"]["selector"]["matchLabels"]
    selector = next(a for a in args if a.startswith("--leader-lease=")).removeprefix("--leader-lease=")
    assert dict(kv.split("=") for kv in selector.split(",")) == operator
    assert not [o for o in render_recipe(DOCS_PREINSTALLED, "cleanup.enabled=false") if o.hook == "post-delete"]


def test_defaults_hook_runs_after_install_upgrade_and_rollback() -> None:
    (job,) = [o for o in render_recipe(DOCS_PREINSTALLED) if o.kind == "Job" and o.hook and "post-install" in o.hook]
    assert set(job.hook.split(",")) == {"post-install", "post-upgrade", "post-rollback"}


def test_notes_upgrade_command_renders_on_the_default_install() -> None:
    """The command NOTES print after a default install is itself a valid set of values."""
    notes = helm.render_text([])["gpucluster/templates/NOTES.txt"]
    command = notes[notes.index("helm upgrade") : notes.index("\n\n", notes.index("helm upgrade"))]
    flags = [part for part in command.replace("\\\n", " ").split() if "=" in part and not part.startswith("--")]
    assert "gpuCluster.enabled=true" in flags and "driver.enabled=false" in flags
    objs = render_recipe(Recipe("notes", tuple(flags)))
    assert default_object(objs, "GPUCluster").name == gc.SINGLETON_NAME


def test_notes_carry_the_docs_validation_steps() -> None:
    notes = helm.render_text(list(DOCS_PREINSTALLED.set_flags))["gpucluster/templates/NOTES.txt"]
    for command in (
        "kubectl get gpucluster",
        f"kubectl get pods -n {NAMESPACE}",
        "kubectl get deviceclass",
        "kubectl get resourceslices",
    ):
        assert command in notes


def test_upgrade_renders_the_same_objects() -> None:
    install = render_recipe(DOCS_OPERATOR_MANAGED)
    upgrade = render_recipe(DOCS_OPERATOR_MANAGED, is_upgrade=True)
    assert json.dumps(install, sort_keys=True) == json.dumps(upgrade, sort_keys=True)
