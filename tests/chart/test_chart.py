"""The Helm chart, checked structurally (no helm binary here; .ci/run adds helm lint/template where it exists).

Templates are read as text: directive-only lines are dropped and the few inline directives the
checked files use are substituted, which leaves YAML to compare with what the Python code
generates (webhook configurations, CRDs, operand RBAC, GPUCluster spec).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from controller.operands import ClusterFacts, render
from gpucluster.api import gpucluster as gc
from gpucluster.api.crd import generated_files
from gpucluster.api.validation import validate_gpucluster
from gpucluster.kube.paths import plural
from tests.chart import schema
from webhook.admission import HOOKS
from webhook.configurations import webhook_configurations

CHART = schema.CHART
TEMPLATES = CHART / "templates"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())

# The docs' two example installs (--set flags of "helm upgrade --install").
DOCS_OPERATOR_MANAGED = [
    "gpuCluster.enabled=true",
    "driver.nvidiaDriverCRD.enabled=true",
    "operator.env[0].name=DEFAULT_GPU_ALLOCATION_MODE",
    "operator.env[0].value=dra",
]
DOCS_PREINSTALLED = [
    "gpuCluster.enabled=true",
    "driver.enabled=false",
    "operator.env[0].name=DEFAULT_GPU_ALLOCATION_MODE",
    "operator.env[0].value=dra",
]


def helm_set(values: dict[str, Any], flags: list[str]) -> dict[str, Any]:
    """``values`` with Helm ``--set`` flags applied (the forms the docs use: a.b, a[0].b; true/false/ints typed)."""
    out = copy.deepcopy(values)
    for flag in flags:
        key, _, raw = flag.partition("=")
        value: Any = {"true": True, "false": False}.get(raw, int(raw) if raw.isdigit() else raw)
        parts = [p for p in re.split(r"\.|(\[\d+\])", key) if p]
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt: Any = [] if not last and parts[i + 1].startswith("[") else {}
            if part.startswith("["):
                index = int(part[1:-1])
                while len(node) <= index:
                    node.append({})
                if last:
                    node[index] = value
                else:
                    node = node[index]
            elif last:
                node[part] = value
            else:
                if not isinstance(node.get(part), (dict, list)) or (
                    isinstance(nxt, list) and not isinstance(node[part], list)
                ):
                    node[part] = nxt
                node = node[part]
    return out


def template(name: str) -> str:
    return (TEMPLATES / name).read_text()


def yaml_of(text: str, substitutions: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Parse a template as YAML: drop directive-only lines, substitute known inline directives,
    refuse any other directive."""
    text = re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", text, flags=re.S)  # comments
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if re.fullmatch(r"\{\{-?.*?-?\}\}", stripped) and not any(re.search(k, stripped) for k in substitutions or {}):
            continue
        for pattern, replacement in (substitutions or {}).items():
            line = re.sub(pattern, replacement.replace("\\", "\\\\"), line)
        assert "{{" not in line, f"unhandled template directive: {line.strip()}"
        lines.append(line)
    return [d for d in yaml.safe_load_all("\n".join(lines)) if d]


# --- Chart.yaml, values, schema ------------------------------------------------------------------


def test_chart_yaml() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "gpucluster" and chart["version"] == "0.1.0"
    assert chart["kubeVersion"] == ">=1.34.2-0"
    assert chart["appVersion"] and chart["description"] and chart["home"] and chart["sources"]


def test_values_schema_is_draft7_and_current() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert (CHART / "values.schema.json").read_text() == schema.render(), "run: python -m tests.chart.schema"


@pytest.mark.parametrize(
    "flags", [[], DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED], ids=["defaults", "operator-managed", "pre-installed"]
)
def test_values_and_the_docs_installs_validate(flags: list[str]) -> None:
    values = helm_set(VALUES, flags)
    jsonschema.Draft7Validator(SCHEMA).validate(values)
    if flags:
        assert values["gpuCluster"]["enabled"] is True
        assert values["operator"]["env"] == [{"name": "DEFAULT_GPU_ALLOCATION_MODE", "value": "dra"}]


def test_docs_helm_reference_defaults() -> None:
    assert VALUES["gpuCluster"]["enabled"] is False
    assert VALUES["operator"]["env"] == []
    assert VALUES["dcgmExporter"]["enabled"] is True and VALUES["dcgm"]["enabled"] is False
    assert set(VALUES["hostPaths"]) == {"rootFS", "driverInstallDir", "kubeletRootDir"}
    assert {"labels", "annotations", "priorityClassName", "tolerations", "updateStrategy"} <= set(VALUES["daemonsets"])
    assert {"repository", "image", "version", "gpus", "computeDomains", "featureGates"} <= set(
        VALUES["gpuCluster"]["draDriver"]
    )
    assert VALUES["driver"]["enabled"] is True and VALUES["driver"]["nvidiaDriverCRD"]["enabled"] is False
    assert {"repository", "image", "version"} <= set(VALUES["operator"])
    assert VALUES["webhook"]["enabled"] is True and VALUES["webhook"]["translation"]["mode"] == "auto"
    assert VALUES["webhook"]["certificates"]["mode"] == "self-managed"
    assert VALUES["operator"]["replicas"] == 2


@pytest.mark.parametrize(
    "flags",
    [
        ["webhook.translation.mode=sometimes"],
        ["webhook.certificates.mode=vault"],
        ["webhook.failurePolicy.pods.mutate.gpucluster.nvidia.com=Maybe"],
        ["gpuCluster.draDriver.imagePullPolicy=Sometimes"],
        ["gpuCluster.draDriver.typo=1"],
        ["dcgm.hostPort=70000"],
        ["daemonsets.updateStrategy=Recreate"],
        ["operator.replicas=0"],
    ],
)
def test_schema_rejects_bad_values(flags: list[str]) -> None:
    values = helm_set(VALUES, flags)
    if flags[0].startswith("webhook.failurePolicy"):  # a dotted key: --set would need escaping
        values["webhook"]["failurePolicy"] = {"pods.mutate.gpucluster.nvidia.com": "Maybe"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(values)


def test_every_values_path_in_templates_exists() -> None:
    missing = []
    for path in sorted(TEMPLATES.iterdir()):
        for match in re.finditer(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", path.read_text()):
            node: Any = VALUES
            for part in match.group(1).lstrip(".").split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(f"{path.name}: .Values{match.group(1)}")
                    break
                node = node[part]
    assert not missing, missing


def test_crds_are_the_generated_ones() -> None:
    files = generated_files()
    on_disk = {p.name: p.read_text() for p in (CHART / "crds").iterdir()}
    assert on_disk == files, "run: make crds"


# --- the default GPUCluster ------------------------------------------------------------------------


def prune(node: dict[str, Any]) -> dict[str, Any]:
    """Python twin of the chart's gpucluster.prune helper: drop "", None, [] and {}, recursively."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            inner = prune(value)
            if inner:
                out[key] = inner
        elif isinstance(value, (bool, int, float)) or value:
            out[key] = value
    return out


def spec_from_values(values: dict[str, Any]) -> dict[str, Any]:
    text = template("_helpers.tpl")
    block = text[text.index('define "gpucluster.gpuClusterSpec"') :]
    block = block[: block.index("{{- end -}}")]
    mapping = dict(re.findall(r'"(\w+)" \.Values\.([\w.]+)', block))
    assert set(mapping) == {"draDriver", "dcgmExporter", "dcgm", "hostPaths", "daemonsets"}
    spec = {}
    for field_name, path in mapping.items():
        node: Any = values
        for part in path.split("."):
            node = node[part]
        spec[field_name] = node
    return prune(spec)


@pytest.mark.parametrize("flags", [DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED], ids=["operator-managed", "pre-installed"])
def test_default_gpucluster_is_a_valid_gpucluster(flags: list[str]) -> None:
    values = helm_set(VALUES, flags)
    (doc,) = yaml_of(
        template("gpucluster.yaml"), {r'\{\{- include "gpucluster.gpuClusterSpec" \. \| nindent 2 \}\}': "  {}"}
    )
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == (gc.API_VERSION, gc.KIND, gc.SINGLETON_NAME)
    assert doc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    doc["spec"] = spec_from_values(values)
    result = validate_gpucluster(doc)
    assert result.ok and not result.warnings, ([str(p) for p in result.problems], result.warnings)
    assert result.obj is not None
    spec = result.obj.spec
    assert spec.dcgmExporter.enabled and not spec.dcgm.enabled and spec.draDriver.computeDomains.enabled
    assert spec.draDriver.image == values["gpuCluster"]["draDriver"]["image"]
    rendered = render(result.obj, ClusterFacts())  # renders without any image environment
    assert any(o["kind"] == "DaemonSet" for o in rendered)


def test_gpucluster_template_is_conditional_on_gpucluster_enabled() -> None:
    assert template("gpucluster.yaml").lstrip().startswith("{{- if .Values.gpuCluster.enabled }}")


# --- webhook configurations -----------------------------------------------------------------------

SERVICE, NAMESPACE = "SERVICE", "NAMESPACE"


def render_webhooks() -> list[dict[str, Any]]:
    """The webhook configurations template with its helpers resolved for SERVICE in NAMESPACE."""
    text = template("webhook-configurations.yaml")
    # A failure-policy helper call resolves to its default (webhook.failurePolicy is empty).
    text = re.sub(
        r'\{\{ include "gpucluster.failurePolicy" \(list \$ "([^"]+)" "(\w+)"\) \}\}', lambda m: m.group(2), text
    )
    client = "service:\n        name: SERVICE\n        namespace: NAMESPACE\n        path: /{}\n        port: 443"
    return yaml_of(
        text,
        {
            r'\{\{- include "gpucluster.webhookLabels" \. \| nindent 4 \}\}': "app.kubernetes.io/managed-by: gpucluster",
            r'\{\{- include "gpucluster.webhookAnnotations" \. \| nindent 2 \}\}': "",
            r'\{\{- include "gpucluster.clientConfig" \(list \$ "validate" [^)]*\) \| nindent 6 \}\}': client.format(
                "validate"
            ),
            r'\{\{- include "gpucluster.clientConfig" \(list \$ "mutate" [^)]*\) \| nindent 6 \}\}': client.format(
                "mutate"
            ),
            r'\{\{- include "gpucluster.excludedNamespaces" \. \| nindent 12 \}\}': "- NAMESPACE\n            - kube-system",
        },
    )


def test_webhook_configurations_match_the_python_table() -> None:
    chart = render_webhooks()
    ours = webhook_configurations(namespace=NAMESPACE, service=SERVICE)
    assert [(d["kind"], d["metadata"]["name"]) for d in chart] == [(d["kind"], d["metadata"]["name"]) for d in ours]
    for got, want in zip(chart, ours, strict=True):
        assert got["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpucluster"
        assert [w["name"] for w in got["webhooks"]] == [w["name"] for w in want["webhooks"]]
        for g, w in zip(got["webhooks"], want["webhooks"], strict=True):
            assert g == w, g["name"]


def test_webhook_names_and_policies_cover_every_hook() -> None:
    text = template("webhook-configurations.yaml")
    for hook in HOOKS:
        assert f"- name: {hook.name}" in text
        assert f'(list $ "{hook.name}" "{hook.failure_policy}")' in text


def test_excluded_namespaces_are_sorted_like_the_python_side() -> None:
    helper = template("_helpers.tpl")
    assert '(list "kube-system" .Release.Namespace | uniq | sortAlpha)' in helper
    for namespace in ("gpu-operator", "zeta"):
        (validating, _) = webhook_configurations(namespace=namespace)
        values = validating["webhooks"][-1]["namespaceSelector"]["matchExpressions"][0]["values"]
        assert values == sorted({"kube-system", namespace})


def test_certificate_modes_are_wired() -> None:
    helpers = template("_helpers.tpl")
    assert "cert-manager.io/inject-ca-from" in helpers
    assert ".Values.webhook.certificates.secret.caBundle" in helpers
    certs = template("webhook-certificates.yaml")
    for kind in ("kind: Certificate", "kind: Issuer", "kind: Secret", "selfSigned: {}", "isCA: true"):
        assert kind in certs
    deployment = template("deployment.yaml")
    assert "- rotate" in deployment and "--probe=127.0.0.1:" in deployment and "secretName:" in deployment


# --- RBAC -----------------------------------------------------------------------------------------

RBAC_SUBS = {
    r"\{\{ \.Release\.Namespace \| quote \}\}": '"NAMESPACE"',
    r'\{\{ include "gpucluster.certSecret" \. \| quote \}\}': '"CERT-SECRET"',
    r'\{\{ include "gpucluster\.[a-zA-Z]+" \. \}\}': "NAME",
    r"\{\{ \.Release\.Namespace \}\}": "NAMESPACE",
}


def rbac_docs() -> list[dict[str, Any]]:
    return yaml_of(template("rbac.yaml"), RBAC_SUBS)


def rules_of(kind: str) -> list[dict[str, Any]]:
    (doc,) = [d for d in rbac_docs() if d["kind"] == kind]
    rules: list[dict[str, Any]] = doc["rules"]
    return rules


def test_rbac_has_no_wildcards() -> None:
    docs = rbac_docs()
    assert {d["kind"] for d in docs} == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    for doc in docs:
        for rule in doc.get("rules", []):
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (doc["kind"], rule)
                assert all("*" not in item for item in rule.get(key, [])), (doc["kind"], rule)


def allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    return any(
        group in r["apiGroups"]
        and resource in r["resources"]
        and verb in r["verbs"]
        and (not r.get("resourceNames") or (name is not None and name in r["resourceNames"]))
        for r in rules
    )


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
    return render(result.obj, ClusterFacts(service_monitor_crd=True, env={"VALIDATOR_IMAGE": "r.io/x/v:1"}))


def test_operator_holds_every_permission_it_grants_and_applies() -> None:
    """RBAC escalation prevention: the operator must hold what its operands' roles grant; and it
    must be able to apply (and prune) every kind it renders."""
    cluster, namespaced = rules_of("ClusterRole"), rules_of("Role")
    missing = []
    for obj in full_operand_render():
        if obj["kind"] in ("ClusterRole", "Role"):
            for rule in obj["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            scope = cluster if obj["kind"] == "ClusterRole" else cluster + namespaced
                            if not allowed(scope, group, resource, verb):
                                missing.append(f"{obj['kind']}/{obj['metadata']['name']}: {group}/{resource} {verb}")
        group = obj["apiVersion"].rpartition("/")[0]
        resource, is_namespaced = plural(obj["apiVersion"], obj["kind"])
        scope = cluster + namespaced if is_namespaced else cluster
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            if not allowed(scope, group, resource, verb):
                missing.append(f"apply {obj['kind']}: {verb}")
    assert not missing, sorted(set(missing))


def test_operator_permissions_for_the_webhook_controller_and_certificates() -> None:
    cluster, namespaced = rules_of("ClusterRole"), rules_of("Role")
    # What the webhook's cluster view lists and watches (gpucluster.commands.webhook.WEBHOOK_KINDS).
    for group, resource in [
        ("", "namespaces"),
        ("nvidia.com", "clusterpolicies"),
        ("nvidia.com", "gpuclusters"),
        ("nvidia.com", "nvidiadrivers"),
        ("resource.k8s.io", "deviceclasses"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaimtemplates"),
    ]:
        assert allowed(cluster, group, resource, "list") and allowed(cluster, group, resource, "watch"), resource
    assert allowed(cluster, "resource.k8s.io", "resourceclaimtemplates", "create")  # translated pods
    assert allowed(cluster, "nvidia.com", "gpuclusters/status", "update")
    assert allowed(cluster, "nvidia.com", "gpuclusters", "delete")  # the pre-delete hook
    assert allowed(cluster, "", "nodes", "patch")
    assert allowed(namespaced, "coordination.k8s.io", "leases", "update")  # leader election
    # Certificates: one Secret by name, our two webhook configurations by name, nothing else.
    assert allowed(namespaced, "", "secrets", "update", "CERT-SECRET")
    assert not allowed(namespaced + cluster, "", "secrets", "update", "another-secret")
    assert not allowed(namespaced + cluster, "", "secrets", "create")
    assert not allowed(namespaced + cluster, "", "secrets", "list")
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert allowed(cluster, "admissionregistration.k8s.io", kind, "patch", "gpucluster-validating-webhook")
        assert not allowed(cluster, "admissionregistration.k8s.io", kind, "patch", "someone-elses")
        assert not allowed(cluster, "admissionregistration.k8s.io", kind, "list")
    assert allowed(namespaced, "discovery.k8s.io", "endpointslices", "list")
    # The namespace label: only the operator's own namespace.
    assert allowed(cluster, "", "namespaces", "patch", "NAMESPACE")
    assert not allowed(cluster, "", "namespaces", "patch", "default")


# --- the rest of the templates ----------------------------------------------------------------------


def test_validations_fail_clearly() -> None:
    text = template("validations.yaml")
    assert '.Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass"' in text
    assert 'semverCompare ">=1.34.2-0" .Capabilities.KubeVersion.Version' in text
    assert "and .Values.gpuCluster.enabled .Values.clusterPolicy.enabled" in text
    assert 'lookup "nvidia.com/v1" "ClusterPolicy"' in text
    assert text.count("fail ") >= 6


def test_deployment_runs_webhook_and_controller() -> None:
    text = template("deployment.yaml")
    assert "replicas: {{ .Values.operator.replicas }}" in text
    for arg in ("- controller", "- webhook", "--translation-mode={{ .Values.webhook.translation.mode }}"):
        assert arg in text
    assert "name: OPERATOR_NAMESPACE" in text and 'include "gpucluster.operatorEnv"' in text
    helpers = template("_helpers.tpl")
    for env in ("DRA_DRIVER_IMAGE", "DCGM_EXPORTER_IMAGE", "DCGM_IMAGE", "VALIDATOR_IMAGE", ".Values.operator.env"):
        assert env in helpers
    assert "readOnlyRootFilesystem: true" in helpers and "runAsNonRoot: true" in text


def test_standard_labels() -> None:
    helpers = template("_helpers.tpl")
    for label in (
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    ):
        assert label in helpers


def test_nvidiadriver_never_auto_upgrades() -> None:
    (doc,) = yaml_of(
        template("nvidiadriver.yaml"),
        {r"\{\{ \.Values\.[\w.]+ \| quote \}\}": '"1"', r"\{\{ (\.Values\.[\w.]+|\.) \}\}": "x"},
    )
    assert doc["kind"] == "NVIDIADriver" and doc["spec"]["upgradePolicy"] == {"autoUpgrade": False}
    assert "driver.nvidiaDriverCRD.enabled" in template("nvidiadriver.yaml").splitlines()[0]


def test_pre_delete_hook_deletes_the_gpucluster_and_waits() -> None:
    text = template("cleanup-gpucluster.yaml")
    assert "helm.sh/hook: pre-delete" in text
    assert "- gpuclusters.nvidia.com" in text and "- gpu-cluster" in text and "- --wait" in text


def test_notes_carry_the_docs_validation_steps() -> None:
    notes = template("NOTES.txt")
    for command in (
        "kubectl get gpucluster",
        "kubectl get pods -n {{ .Release.Namespace }}",
        "kubectl get deviceclass",
        "kubectl get resourceslices",
    ):
        assert command in notes
