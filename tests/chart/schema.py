"""values.schema.json of the chart, built from the GPUCluster CRD so the two cannot drift.

The values that populate the default GPUCluster (``gpuCluster.draDriver``, ``dcgmExporter``,
``dcgm``, ``hostPaths``, ``daemonsets``) get the CRD's own schema for the matching spec field,
stricter in one way: unknown keys are rejected (the API server would silently drop them). The
other values are described here. ``python -m tests.chart.schema`` rewrites the file; a test
fails when it is stale.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from gpucluster.api.crd import gpucluster_schema
from gpucluster.api.kubefields import LABEL_VALUE, LONG_PREFIX, QUALIFIED_NAME

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpucluster"
SCHEMA_FILE = CHART / "values.schema.json"

Schema = dict[str, Any]

_K8S_ONLY = (
    "default",
    "x-kubernetes-int-or-string",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
)


def _strict(node: Schema) -> Schema:
    """A CRD schema node as a draft-07 schema: no defaults (Helm does not apply them), no
    Kubernetes extensions, and objects with known properties reject unknown keys."""
    node = copy.deepcopy(node)
    for key in _K8S_ONLY:
        node.pop(key, None)
    if "properties" in node:
        node["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
        node["additionalProperties"] = False
    elif isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _strict(node["additionalProperties"])
    if "items" in node:
        node["items"] = _strict(node["items"])
    if "anyOf" in node:
        node["anyOf"] = [_strict(o) for o in node["anyOf"]]
    return dict(sorted(node.items()))


def _obj(properties: dict[str, Schema], description: str = "", required: list[str] | None = None) -> Schema:
    out: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if description:
        out["description"] = description
    if required:
        out["required"] = required
    return out


_NAME_PATTERN = "^$|^[a-z]([-a-z0-9]*[a-z0-9])?$"  # empty, or a DNS-1035 label


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _bool(description: str) -> Schema:
    return {"type": "boolean", "description": description}


# One --feature-gates entry: a gate name and a value strconv.ParseBool accepts.
_GATE = "[A-Za-z0-9]+=(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)"


def build_schema() -> Schema:
    spec = gpucluster_schema()["properties"]["spec"]["properties"]
    kubelet = spec["draDriver"]["properties"]["gpus"]["properties"]["kubeletPlugin"]["properties"]
    resources = _strict(kubelet["resources"])
    pull_policy = _strict(spec["draDriver"]["properties"]["imagePullPolicy"])
    pull_secrets = _strict(spec["draDriver"]["properties"]["imagePullSecrets"])
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    # Label keys and values as the API server validates them (a qualified name; a value of at
    # most 63 characters), so a bad one fails the render, not the API call half-way through.
    label_map = {
        "type": "object",
        "propertyNames": {"pattern": QUALIFIED_NAME, "not": {"pattern": LONG_PREFIX}},
        "additionalProperties": {"type": "string", "pattern": LABEL_VALUE},
    }
    # The chart's own labels (app.kubernetes.io/*, helm.sh/chart) are refused by validations.yaml,
    # with a message that names the value.
    operator_labels = {**label_map, "description": "Extra labels of every object, besides the chart's own."}
    env_var = _obj(
        {
            "name": _str("Name of the environment variable.", minLength=1),
            "value": _str("Value of the environment variable."),
            "valueFrom": {"type": "object", "description": "Source of the value (a Kubernetes EnvVarSource)."},
        },
        required=["name"],
    )
    image = {
        "repository": _str("Image repository (registry and path)."),
        "image": _str("Image name."),
        # What a container image reference takes after ':' or '@' (distribution/reference).
        "version": _str(
            "Image tag, or a sha256: digest.", pattern=r"^$|^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$|^sha256:[a-f0-9]{64}$"
        ),
    }
    tolerations = _strict(spec["daemonsets"]["properties"]["tolerations"])
    webhook_names = sorted(
        [
            "gpuclusters.validate.gpucluster.nvidia.com",
            "clusterpolicies.validate.gpucluster.nvidia.com",
            "nvidiadrivers.validate.gpucluster.nvidia.com",
            "nvidiadrivers.mutate.gpucluster.nvidia.com",
            "resourceclaims.validate.gpucluster.nvidia.com",
            "resourceclaimtemplates.validate.gpucluster.nvidia.com",
            "pods.mutate.gpucluster.nvidia.com",
        ]
    )
    properties: dict[str, Schema] = {
        # Object names (a Service's among them: a DNS-1035 label) are built from these; an invalid one
        # would fail the install half-way and every hook of the uninstall with it.
        "nameOverride": _str("Replaces the chart name in object names.", pattern=_NAME_PATTERN, maxLength=63),
        "fullnameOverride": _str(
            "Replaces the release-chart prefix of object names.", pattern=_NAME_PATTERN, maxLength=63
        ),
        "gpuCluster": _obj(
            {
                "enabled": _bool("Create the default GPUCluster resource, gpu-cluster (enables the DRA model)."),
                "applyTimeoutSeconds": {
                    "type": "integer",
                    "minimum": 10,
                    "description": "How long the install/upgrade hook waits for the webhook to accept the defaults.",
                },
                "draDriver": _strict(spec["draDriver"]),
            },
            "The default GPUCluster resource.",
        ),
        "clusterPolicy": _obj(
            {
                "enabled": _bool(
                    "Never deployed by this chart; true together with gpuCluster.enabled fails the install."
                )
            },
            "The device-plugin model (not deployed by this chart).",
        ),
        "driver": _obj(
            {
                "enabled": _bool("False when the driver is pre-installed on the GPU nodes."),
                "nvidiaDriverCRD": _obj(
                    {
                        "enabled": _bool("Create an NVIDIADriver resource (automatic upgrades off)."),
                        "name": _str("Name of the NVIDIADriver.", minLength=1),
                        "driverType": {"type": "string", "enum": ["gpu", "vgpu", "vgpu-host-manager"]},
                        "nodeSelector": label_map,
                    }
                ),
                **image,
                "imagePullPolicy": pull_policy,
                "imagePullSecrets": pull_secrets,
                "kernelModuleType": {"type": "string", "enum": ["auto", "open", "proprietary"]},
                "usePrecompiled": _bool("Use precompiled driver packages."),
            },
            "The NVIDIA GPU driver: pre-installed, or managed through an NVIDIADriver resource.",
        ),
        "dcgmExporter": _strict(spec["dcgmExporter"]),
        "dcgm": _strict(spec["dcgm"]),
        "hostPaths": _strict(spec["hostPaths"]),
        "daemonsets": _strict(spec["daemonsets"]),
        "validator": _obj(image, "The DRA validator's image (VALIDATOR_IMAGE); empty: the DRA driver's."),
        "operator": _obj(
            {
                **image,
                "imagePullPolicy": pull_policy,
                "imagePullSecrets": pull_secrets,
                "replicas": {"type": "integer", "minimum": 1, "description": "Operator replicas."},
                "env": {"type": "array", "items": env_var, "description": "Extra environment of the controller."},
                "resources": resources,
                "priorityClassName": _str("Priority class of the operator pods."),
                "nodeSelector": label_map,
                "tolerations": tolerations,
                "affinity": {"type": "object", "description": "Affinity of the operator pods."},
                "labels": operator_labels,
                "annotations": string_map,
                "featureGates": _str(
                    "DRA feature gates of the cluster (Name=bool,...) for the webhook's claim checks and the "
                    "controller's explanations; empty: Kubernetes' defaults for the server's version.",
                    pattern=f"^$|^{_GATE}(,{_GATE})*$",
                ),
                "logging": _obj(
                    {
                        "format": {"type": "string", "enum": ["text", "json"]},
                        "level": {"type": "string", "enum": ["debug", "info", "warning", "error"]},
                    }
                ),
                "podDisruptionBudget": _obj({"enabled": _bool("Keep one replica through voluntary disruptions.")}),
                "claimTemplates": _obj(
                    {"gracePeriodSeconds": {"type": "number", "minimum": 0}},
                    "Claim templates of translated pods: kept this long after no pod refers to them.",
                ),
                "strandedPods": _obj(
                    {"delete": _bool("Delete controller-owned pods admitted untranslated, so they are recreated.")}
                ),
            },
            "The gpucluster operator Deployment (controller and webhook).",
        ),
        "webhook": _obj(
            {
                "enabled": _bool("Deploy the admission webhook."),
                "port": {"type": "integer", "minimum": 1024, "maximum": 65535},
                "healthPort": {
                    "type": "integer",
                    "minimum": 1024,
                    "maximum": 65535,
                    "description": "HTTPS port of the probes and metrics (no client certificate, no reviews).",
                },
                "connections": _obj(
                    {
                        "max": {"type": "integer", "minimum": 1},
                        "perPeer": {"type": "integer", "minimum": 1},
                    },
                    "Connection caps of each replica: in total and per peer address.",
                ),
                "translation": _obj({"mode": {"type": "string", "enum": ["auto", "always", "audit", "off"]}}),
                "failurePolicy": {
                    "type": "object",
                    "description": "Failure policy per webhook name.",
                    "propertyNames": {"enum": webhook_names},
                    "additionalProperties": {"type": "string", "enum": ["Fail", "Ignore"]},
                },
                "shutdownDelay": {"type": "number", "minimum": 0},
                "clientAuth": _obj(
                    {
                        "caBundle": _str(
                            "Base64-encoded PEM CA bundle that verifies callers' client certificates.",
                            pattern="^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                        ),
                        "configMap": _str("A ConfigMap in the release namespace with the CA bundle under ca.crt."),
                        "allowedNames": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1, "pattern": "^[^,]+$"},
                            "uniqueItems": True,
                            "description": "Client certificate common names allowed; empty: any the CA verifies.",
                        },
                    },
                    "Caller authentication: reviews only from clients with an allowed certificate from this CA.",
                ),
                "networkPolicy": _obj(
                    {
                        "enabled": _bool("Create a NetworkPolicy restricting the webhook port."),
                        "from": {
                            "type": "array",
                            "items": {"type": "object"},
                            "description": "NetworkPolicyPeers allowed to the webhook port (the API server).",
                        },
                        "apiServerEndpoints": _bool(
                            "With from empty: admit the addresses of the default/kubernetes EndpointSlices."
                        ),
                    }
                ),
                "resources": resources,
                "certificates": _obj(
                    {
                        "mode": {"type": "string", "enum": ["self-managed", "cert-manager", "secret"]},
                        "selfManaged": _obj(
                            {"interval": {"type": "number", "exclusiveMinimum": 0}, "resources": resources}
                        ),
                        "certManager": _obj(
                            {
                                "issuerType": {"type": "string", "enum": ["selfsigned", "issuer", "clusterissuer"]},
                                "issuerName": _str("The Issuer or ClusterIssuer."),
                                "duration": _str("Certificate lifetime, e.g. 8760h.", pattern="^[0-9]+(h|m|s)$"),
                                "renewBefore": _str("Renewal margin, e.g. 720h.", pattern="^[0-9]+(h|m|s)$"),
                                "dnsNames": {"type": "array", "items": {"type": "string"}},
                            }
                        ),
                        "secret": _obj(
                            {
                                "name": _str("A Secret with tls.crt and tls.key."),
                                "caBundle": _str(
                                    "Base64-encoded PEM CA bundle.",
                                    pattern="^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                                ),
                            }
                        ),
                    },
                    "Where the webhook's serving certificate comes from.",
                ),
            },
            "The admission webhook.",
        ),
        "cleanup": _obj(
            {
                "enabled": _bool(
                    "Delete the GPUCluster and wait for its drain before uninstalling; false leaves it and its "
                    "operands running."
                ),
                "force": _bool(
                    "Delete the pods that hold ResourceClaims of the NVIDIA drivers instead of refusing to uninstall."
                ),
                "timeoutSeconds": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Seconds to wait for the drain; above 270, pass helm uninstall a --timeout over it + 30 s.",
                },
                "image": _str(
                    "Unused since chart 0.2.0 (the hook runs the operator image); accepted so older values validate."
                ),
                "imagePullPolicy": {
                    **pull_policy,
                    "description": "Unused since chart 0.2.0; accepted so older values validate.",
                },
            },
            "The pre-delete hook.",
        ),
    }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "gpucluster chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--check":
        return 0 if SCHEMA_FILE.read_text() == render() else 1
    SCHEMA_FILE.write_text(render())
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
