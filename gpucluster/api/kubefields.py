"""Values that reach an operand object, refused as kube-apiserver refuses them there.

The GPUCluster copies labels, annotations, tolerations, a priority class, a pod security context,
environment variables and resource requirements into DaemonSets, Deployments, Services and a
ServiceMonitor. kube-apiserver validates those objects (pkg/apis/core/validation,
apimachinery's IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain); what it would refuse
there is refused in the GPUCluster already, by the CRD (patterns, bounds and CEL rules that use
only standard CEL, so the sandbox's celpy evaluates them too) and by the model (the webhook and
``gpucluster validate``), each with the field path and a message saying what is allowed.

Each rule is written twice on purpose, as a CEL rule for the CRD and as a Python check for the
model; tests evaluate both on the same values and the real kube-apiserver judges the CRD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, cast

from pydantic import AfterValidator, Field, StrictInt, StrictStr
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

# --- names and values (k8s.io/apimachinery/pkg/util/validation) ---------------------------------

_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# IsQualifiedName: [DNS-subdomain prefix '/'] name; the name part at most 63 characters.
QUALIFIED_NAME = rf"^({_PREFIX}/)?{_NAME}$"
# Annotation keys are checked lower-cased: the prefix may have capitals.
ANNOTATION_KEY = rf"^({_PREFIX.replace('a-z0-9', 'A-Za-z0-9')}/)?{_NAME}$"
# A prefix over 253 characters (what the pattern above cannot bound).
LONG_PREFIX = r"^[^/]{254,}/"
# IsValidLabelValue: empty, or at most 63 alphanumerics, '-', '_', '.', alphanumeric at both ends.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# IsDNS1123Subdomain (at most 253 characters): priority class names.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# IsEnvVarName as 1.34 relaxes it: printable ASCII but '='.
ENV_NAME = r"^[ -<>-~]+$"
# IsValidSysctlName (at most 253 characters).
SYSCTL_NAME = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"

QUALIFIED_NAME_MESSAGE = (
    "must be a qualified name: at most 63 alphanumerics, '-', '_' or '.', starting and ending with an "
    "alphanumeric, optionally after a DNS subdomain prefix of at most 253 characters and '/' (e.g. example.com/name)"
)
LABEL_VALUE_MESSAGE = (
    "a label value must be empty or at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)

MAX_MAP_ENTRIES = 256
MAX_LIST_ITEMS = 64
MAX_INT32 = 2**31 - 1
# A qualified name: a 253-character prefix, '/', a 63-character name.
MAX_QUALIFIED_NAME = 253 + 1 + 63
# Paths (PATH_MAX less the terminating NUL); bounds the cost of the CEL rules reading them.
MAX_PATH = 4095
# Resource names of one container and the length of a quantity: bounds for the CEL cost estimate.
MAX_RESOURCES = 32
MAX_QUANTITY = 64


def invalid(message: str) -> PydanticCustomError:
    """A model error whose message is shown as is (validation._message)."""
    return PydanticCustomError("kube_invalid", "{message}", {"message": message})


def validations(rules: Sequence[Mapping[str, Any]]) -> JsonDict:
    """The ``json_schema_extra`` of a model or field carrying these CRD rules."""
    return cast(JsonDict, {"x-kubernetes-validations": [dict(r) for r in rules]})


def _go_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_qualified_name(key: str, *, annotation: bool = False) -> bool:
    pattern = ANNOTATION_KEY if annotation else QUALIFIED_NAME
    return re.match(pattern, key) is not None and re.match(LONG_PREFIX, key) is None


def _cel_qualified(var: str, *, annotation: bool = False) -> str:
    pattern = ANNOTATION_KEY if annotation else QUALIFIED_NAME
    return f"({var}.matches(r'{pattern}') && !{var}.matches(r'{LONG_PREFIX}'))"


# --- label and annotation maps --------------------------------------------------------------------


def _label_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not is_qualified_name(key):
            raise invalid(f"Invalid value: {_go_quote(key)}: label keys {QUALIFIED_NAME_MESSAGE}")
    return value


def _annotation_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not is_qualified_name(key, annotation=True):
            raise invalid(f"Invalid value: {_go_quote(key)}: annotation keys {QUALIFIED_NAME_MESSAGE}")
    return value


LabelValue = Annotated[StrictStr, Field(max_length=63, pattern=LABEL_VALUE)]
LabelMap = Annotated[
    dict[StrictStr, LabelValue],
    Field(
        max_length=MAX_MAP_ENTRIES,
        json_schema_extra=validations(
            [{"rule": f"self.all(k, {_cel_qualified('k')})", "message": f"label keys {QUALIFIED_NAME_MESSAGE}"}]
        ),
    ),
    AfterValidator(_label_keys),
]
AnnotationMap = Annotated[
    dict[StrictStr, StrictStr],
    Field(
        max_length=MAX_MAP_ENTRIES,
        json_schema_extra=validations(
            [
                {
                    "rule": f"self.all(k, {_cel_qualified('k', annotation=True)})",
                    "message": f"annotation keys {QUALIFIED_NAME_MESSAGE}",
                }
            ]
        ),
    ),
    # After the Field: pydantic writes max_length as maxProperties only when it comes first.
    AfterValidator(_annotation_keys),
]

PriorityClassName = Annotated[StrictStr, Field(max_length=253, pattern=DNS_SUBDOMAIN)]
EnvName = Annotated[StrictStr, Field(pattern=ENV_NAME)]
SysctlName = Annotated[StrictStr, Field(max_length=253, pattern=SYSCTL_NAME)]
# A user or group ID (IsValidUserID / IsValidGroupID).
UnixID = Annotated[StrictInt, Field(ge=0, le=MAX_INT32, json_schema_extra={"format": "int64"})]


def unique_names(items: list[Any]) -> list[Any]:
    """A list map keyed by ``name`` (sysctls): no name twice, as kube-apiserver requires."""
    seen: set[str] = set()
    for item in items:
        name = str(getattr(item, "name", ""))
        if name in seen:
            raise invalid(f"Duplicate value: {_go_quote(name)}: names must be unique")
        seen.add(name)
    return items


LIST_MAP_BY_NAME: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}


# --- resource requirements (validateContainerResourceName, ValidateResourceRequirements) ------------

# A non-negative quantity (the apimachinery Quantity grammar without a minus sign).
NON_NEGATIVE_QUANTITY = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
_HUGEPAGES = r"^hugepages-(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE])?$"
# "requests." + name must be a qualified name too: the prefix at most 244 characters.
_LONG_EXTENDED_PREFIX = r"^[^/]{245,}/"
RESOURCE_NAME_MESSAGE = (
    "resource names must be cpu, memory, ephemeral-storage, hugepages-<size> or a qualified name with a domain "
    "(e.g. example.com/device)"
)


def is_native_resource(name: str) -> bool:
    """helper.IsNativeResource: no domain, or a kubernetes.io one (overcommit allowed but for hugepages)."""
    return "/" not in name or "kubernetes.io/" in name


def resource_name_ok(name: str) -> bool:
    if "/" not in name:
        return name in STANDARD_CONTAINER_RESOURCES or re.match(_HUGEPAGES, name) is not None
    if not is_qualified_name(name):
        return False
    if is_native_resource(name):
        return True
    return not name.startswith("requests.") and re.match(_LONG_EXTENDED_PREFIX, name) is None


RESOURCE_NAME_RULE = (
    "self.all(k, k.contains('/') ? "
    f"({_cel_qualified('k')} && (k.contains('kubernetes.io/') || "
    f"(!k.startsWith('requests.') && !k.matches(r'{_LONG_EXTENDED_PREFIX}')))) : "
    f"(k in {list(STANDARD_CONTAINER_RESOURCES)!r} || k.matches(r'{_HUGEPAGES}')))"
)


def _check_resource_names(value: Mapping[str, Any]) -> Mapping[str, Any]:
    for name in value:
        if not resource_name_ok(name):
            raise invalid(f"Invalid value: {_go_quote(name)}: {RESOURCE_NAME_MESSAGE}")
    return value


def resource_map_extra() -> JsonDict:
    return validations([{"rule": RESOURCE_NAME_RULE, "message": RESOURCE_NAME_MESSAGE}])


ResourceNameCheck = AfterValidator(_check_resource_names)


_EXTENDED = "(k.contains('/') && !k.contains('kubernetes.io/'))"
_OVERCOMMIT = "(k.contains('/') ? k.contains('kubernetes.io/') : !k.startsWith('hugepages-'))"


def _q(var: str) -> str:
    return f"quantity(string({var}))"


def _whole_numbers(part: str) -> dict[str, Any]:
    value = f"self.{part}[k]"
    return {
        "rule": f"!has(self.{part}) || self.{part}.all(k, !{_EXTENDED} || !isQuantity(string({value})) || "
        f"{_q(value)}.isInteger())",
        "message": "must be an integer for extended resources (a domain other than kubernetes.io)",
        "fieldPath": f".{part}",
    }


RESOURCE_REQUIREMENTS_RULES = [
    _whole_numbers("limits"),
    _whole_numbers("requests"),
    {
        "rule": "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
        "!isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k])) || "
        f"({_OVERCOMMIT} ? {_q('self.requests[k]')}.compareTo({_q('self.limits[k]')}) <= 0 : "
        f"{_q('self.requests[k]')}.compareTo({_q('self.limits[k]')}) == 0))",
        "message": "a request must be less than or equal to its limit, and equal to it for hugepages and "
        "extended resources",
        "fieldPath": ".requests",
    },
    {
        "rule": f"!has(self.requests) || self.requests.all(k, {_OVERCOMMIT} || (has(self.limits) && k in self.limits))",
        "message": "Limit must be set for non overcommitable resources (hugepages and resources with a domain "
        "other than kubernetes.io)",
        "fieldPath": ".limits",
        "reason": "FieldValueRequired",
    },
    {
        "rule": "!((has(self.limits) && self.limits.exists(k, k.startsWith('hugepages-'))) || "
        "(has(self.requests) && self.requests.exists(k, k.startsWith('hugepages-')))) || "
        "(has(self.limits) && ('cpu' in self.limits || 'memory' in self.limits)) || "
        "(has(self.requests) && ('cpu' in self.requests || 'memory' in self.requests))",
        "message": "HugePages require cpu or memory",
        "reason": "FieldValueForbidden",
    },
]


# --- tolerations (validateTolerations) -----------------------------------------------------------

TOLERATION_EMPTY_KEY_MESSAGE = 'operator must be Exists when key is empty, which means "match all values and all keys"'
TOLERATION_EXISTS_MESSAGE = "value must be empty when operator is Exists"
TOLERATION_SECONDS_MESSAGE = "effect must be NoExecute when tolerationSeconds is set"
TOLERATION_RULES = [
    {
        "rule": f"!has(self.key) || self.key == '' || {_cel_qualified('self.key')}",
        "message": f"key {QUALIFIED_NAME_MESSAGE}",
        "fieldPath": ".key",
    },
    {
        "rule": "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        "message": TOLERATION_EMPTY_KEY_MESSAGE,
        "fieldPath": ".operator",
    },
    {
        "rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "message": TOLERATION_EXISTS_MESSAGE,
        "fieldPath": ".value",
    },
    {
        "rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "message": TOLERATION_SECONDS_MESSAGE,
        "fieldPath": ".effect",
    },
]


# --- seccomp and AppArmor profiles (validateSeccompProfileField, validateAppArmorProfileField) ------

# validateLocalDescendingPath: relative, no '..' element.
LOCAL_DESCENDING_PATH = r"(?s)^([^/].*)?$"
_BACKSTEP = r"(^|/)\.\.(/|$)"
UNPADDED = r"(?s)^[^\t\n\v\f\r ](.*[^\t\n\v\f\r ])?$"


def localhost_profile_rules(what: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {
            "rule": "self.type != 'Localhost' || has(self.localhostProfile)",
            "message": f"must be set when {what} type is Localhost",
            "fieldPath": ".localhostProfile",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "self.type == 'Localhost' || !has(self.localhostProfile)",
            "message": f"can only be set when {what} type is Localhost",
            "fieldPath": ".localhostProfile",
        },
    ]
    if what == "seccomp":
        rules.append(
            {
                "rule": f"!has(self.localhostProfile) || !self.localhostProfile.matches(r'{_BACKSTEP}')",
                "message": "must not contain '..'",
                "fieldPath": ".localhostProfile",
            }
        )
    return rules


def check_localhost_profile(what: str, kind: str, profile: str | None) -> None:
    if kind == "Localhost" and profile is None:
        raise invalid(f"localhostProfile: Required value: must be set when {what} type is Localhost")
    if kind != "Localhost" and profile is not None:
        raise invalid(
            f"localhostProfile: Invalid value: {_go_quote(profile)}: can only be set when {what} type is Localhost"
        )
    if what == "seccomp" and profile is not None and re.search(_BACKSTEP, profile):
        raise invalid(f"localhostProfile: Invalid value: {_go_quote(profile)}: must not contain '..'")


# --- paths -----------------------------------------------------------------------------------------

# What the renderer puts in hostPath volumes and shell-sourced files (controller.operands.common).
HOST_PATH = r"^/[A-Za-z0-9._/+@:=,~-]*$"
HOST_PATH_MESSAGE = "must be a plain absolute path (letters, digits and . _ - + @ : = , ~; no spaces or quotes)"
# A hostPath volume's path: absolute here, and no '..' element (validatePathNoBacksteps).
ABSOLUTE_PATH_WITHOUT_BACKSTEPS = r"^/"
BACKSTEP = _BACKSTEP


# --- the ServiceMonitor (prometheus-operator's CRD) --------------------------------------------------

PROMETHEUS_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
