"""CustomResourceDefinition manifests generated from the API models.

The models are the single source of truth; ``charts/gpucluster/crds/`` holds their output and a
test fails when the two differ. Regenerate with ``make crds``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from gpucluster.api import gpucluster as gc
from gpucluster.manifests import dump_yaml_stream

JsonSchema = dict[str, Any]
CRD_DIR = Path("charts/gpucluster/crds")


class _DefaultFactoryAsEmptyObject(GenerateJsonSchema):
    """A nested object built by ``default_factory`` gets the default ``{}`` in the CRD.

    The API server then creates the object and applies the nested field defaults inside it, the
    same result the model gives.
    """

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        if "default_factory" in schema:
            return {}
        return schema.get("default", NoDefault)


_DROP = {"title", "$defs"}


_FORMAT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _is_format_range(node: JsonSchema) -> bool:
    """True when minimum/maximum only restate the integer format, which the format already says."""
    bounds = _FORMAT_RANGES.get(node.get("format", ""))
    return bounds is not None and (node.get("minimum"), node.get("maximum")) == bounds


def _structural(node: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    """Turn one pydantic JSON-schema node into a Kubernetes structural schema node."""
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        target = _structural(defs[ref.rsplit("/", 1)[-1]], defs)
        node = {**target, **{k: v for k, v in node.items() if k in ("description", "default")}}
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o != {"type": "null"}]
        if node.get("default", NoDefault) is None:
            del node["default"]
        if len(options) == 1:
            inner = _structural(options[0], defs)
            node = {**inner, **node}
        else:
            int_or_string = node.pop("x-kubernetes-int-or-string", False) or any(
                o.get("x-kubernetes-int-or-string") for o in options
            )
            if not int_or_string:
                raise ValueError(f"cannot express union {options} in a structural schema")
            # The branches' own checks move up: a pattern applies to strings only, bounds to numbers only.
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            node["x-kubernetes-int-or-string"] = True
            for check in ("pattern", "maxLength"):
                value = next((o[check] for o in options if o.get("type") == "string" and check in o), None)
                if value is not None:
                    node[check] = value
            for bound in ("minimum", "maximum"):
                value = next((o[bound] for o in options if o.get("type") == "integer" and bound in o), None)
                if value is not None:
                    node[bound] = value
    if node.get("default", NoDefault) is None:
        del node["default"]
    for key in _DROP:
        node.pop(key, None)
    if _is_format_range(node):
        del node["minimum"], node["maximum"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "properties" in node:
        node["properties"] = {k: _structural(v, defs) for k, v in sorted(node["properties"].items())}
        if node.get("additionalProperties") is True:
            del node["additionalProperties"]
        if not node.get("required"):
            node.pop("required", None)
        else:
            node["required"] = sorted(node["required"])
    elif isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"], defs)
    if "items" in node:
        node["items"] = _structural(node["items"], defs)
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    return dict(sorted(node.items()))


def gpucluster_schema() -> JsonSchema:
    """The openAPIV3Schema of the GPUCluster CRD."""
    raw = gc.GPUCluster.model_json_schema(by_alias=True, schema_generator=_DefaultFactoryAsEmptyObject)
    defs = raw.get("$defs", {})
    schema = _structural(raw, defs)
    props = schema["properties"]
    # apiVersion and kind are set by clients and checked by the API server, not defaulted by it;
    # metadata is validated by the API server itself.
    for key in ("apiVersion", "kind"):
        props[key] = {"description": props[key]["description"], "type": "string"}
    props["metadata"] = {"type": "object"}
    props["status"]["required"] = ["state"]
    schema.pop("default", None)
    schema["x-kubernetes-validations"] = [
        {"message": gc.SINGLETON_MESSAGE, "rule": f"self.metadata.name == '{gc.SINGLETON_NAME}'"}
    ]
    return schema


def gpucluster_crd() -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of GPUCluster."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{gc.PLURAL}.{gc.GROUP}",
            "labels": {"app.kubernetes.io/name": "gpucluster", "app.kubernetes.io/part-of": "gpucluster"},
        },
        "spec": {
            "group": gc.GROUP,
            "names": {
                "kind": gc.KIND,
                "listKind": f"{gc.KIND}List",
                "plural": gc.PLURAL,
                "singular": gc.KIND.lower(),
                "shortNames": ["gc"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": gc.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": gpucluster_schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Status", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                        {"name": "Nodes", "type": "integer", "jsonPath": ".status.inventory.nodes", "priority": 1},
                        {"name": "GPUs", "type": "integer", "jsonPath": ".status.inventory.gpus", "priority": 1},
                        {"name": "MIG", "type": "integer", "jsonPath": ".status.inventory.migDevices", "priority": 1},
                        {
                            "name": "Allocated",
                            "type": "integer",
                            "jsonPath": ".status.inventory.allocated",
                            "priority": 1,
                        },
                    ],
                }
            ],
        },
    }


def generated_files() -> dict[str, str]:
    """File name -> content of every generated CRD manifest."""
    crd = gpucluster_crd()
    return {f"{gc.GROUP}_{gc.PLURAL}.yaml": dump_yaml_stream([crd])}


def main(argv: list[str] | None = None) -> int:
    """Write the CRDs into the directory given (default charts/gpucluster/crds)."""
    out = Path((argv if argv is not None else sys.argv[1:] or [str(CRD_DIR)])[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in generated_files().items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
