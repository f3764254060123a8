"""Shared building blocks of the API models: the base model and Kubernetes core shapes."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from gpucluster.api import kubefields as kf
from gpucluster.dra.quantity import Quantity

Int32 = Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1, json_schema_extra={"format": "int32"})]
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1, json_schema_extra={"format": "int64"})]
Port = Annotated[StrictInt, Field(ge=1, le=65535, json_schema_extra={"format": "int32"})]
ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
StringMap = dict[StrictStr, StrictStr]


class KubeModel(BaseModel):
    """Base of every API model.

    Strict types, as the API server's schema validation is (``"true"`` is not a boolean);
    fields named as in the JSON; unknown fields kept so that nothing a user wrote is lost on a
    round trip through our code.
    """

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    def to_dict(self) -> dict[str, Any]:
        """The object as Kubernetes JSON: aliases, no unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# A resource quantity as containers take it: never negative.
NonNegativeQuantity = Annotated[
    Annotated[StrictInt, Field(ge=0)]
    | Annotated[StrictStr, Field(max_length=kf.MAX_QUANTITY, pattern=kf.NON_NEGATIVE_QUANTITY)],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]
ResourceList = Annotated[
    dict[StrictStr, NonNegativeQuantity],
    Field(max_length=kf.MAX_RESOURCES, json_schema_extra=kf.resource_map_extra()),
    kf.ResourceNameCheck,
]


class EnvVar(KubeModel):
    """EnvVar represents an environment variable present in a Container."""

    name: kf.EnvName = Field(description="Name of the environment variable: printable ASCII characters but '='.")
    value: StrictStr | None = Field(default=None, description="Value of the environment variable.")


def _quantity(value: int | str) -> Quantity:
    return Quantity.parse(str(value))


def _hugepage_size(name: str) -> Quantity:
    return Quantity.parse(name.removeprefix(kf.HUGEPAGES_PREFIX))


class ResourceRequirements(KubeModel):
    """ResourceRequirements describes the compute resource requirements."""

    model_config = ConfigDict(json_schema_extra=kf.validations(kf.RESOURCE_REQUIREMENTS_RULES))

    limits: ResourceList | None = Field(
        default=None, description="Limits describes the maximum amount of compute resources allowed."
    )
    requests: ResourceList | None = Field(
        default=None,
        description=(
            "Requests describes the minimum amount of compute resources required. If Requests is "
            "omitted for a container, it defaults to Limits if that is explicitly specified."
        ),
    )

    @model_validator(mode="after")
    def _as_containers_take_them(self) -> ResourceRequirements:
        """ValidateResourceRequirements: extended resources in whole numbers, requested as much as
        their limit; other requests at most their limit; hugepages in whole pages, with cpu or memory."""
        limits = {k: _quantity(v) for k, v in (self.limits or {}).items()}
        requests = {k: _quantity(v) for k, v in (self.requests or {}).items()}
        for part, values in (("limits", limits), ("requests", requests)):
            for name, q in values.items():
                if not kf.is_native_resource(name) and q.value.denominator != 1:
                    raise kf.invalid(f'{part}[{name}]: Invalid value: "{q}": must be an integer')
                if name.startswith(kf.HUGEPAGES_PREFIX):
                    size = _hugepage_size(name)
                    if (q.value / size.value).denominator != 1:
                        raise kf.invalid(
                            f'{part}[{name}]: Invalid value: "{q}": {q} is not positive integer multiple of {name}'
                        )
        for name, q in requests.items():
            limit = limits.get(name)
            overcommit = kf.is_native_resource(name) and not name.startswith(kf.HUGEPAGES_PREFIX)
            if limit is None:
                if not overcommit:
                    raise kf.invalid(
                        f"limits: Required value: Limit must be set for non overcommitable resources ({name})"
                    )
            elif not overcommit and q != limit:
                raise kf.invalid(f'requests: Invalid value: "{q}": must be equal to {name} limit of {limit}')
            elif q > limit:
                raise kf.invalid(
                    f'requests: Invalid value: "{q}": must be less than or equal to {name} limit of {limit}'
                )
        names = set(limits) | set(requests)
        if any(n.startswith(kf.HUGEPAGES_PREFIX) for n in names) and not names & {"cpu", "memory"}:
            raise kf.invalid("Forbidden: HugePages require cpu or memory")
        return self


class Toleration(KubeModel):
    """The pod this Toleration is attached to tolerates any taint that matches the triple
    <key,value,effect> using the matching operator <operator>."""

    model_config = ConfigDict(json_schema_extra=kf.validations(kf.TOLERATION_RULES))

    key: Annotated[StrictStr, Field(max_length=kf.MAX_QUALIFIED_NAME)] | None = Field(
        default=None,
        description="Key is the taint key that the toleration applies to, a qualified name. Empty means all keys.",
    )
    # Lt and Gt: kube-apiserver 1.34 refuses them (TaintTolerationComparisonOperators).
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Operator represents a key's relationship to the value. Defaults to Equal."
    )
    value: kf.LabelValue | None = Field(
        default=None, description="Value is the taint value the toleration matches to, a label value."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Effect indicates the taint effect to match. Empty means all effects."
    )
    tolerationSeconds: Int64 | None = Field(
        default=None,
        description="TolerationSeconds is how long a NoExecute taint is tolerated; unset means forever.",
    )

    @model_validator(mode="after")
    def _as_pods_take_it(self) -> Toleration:
        """validateTolerations: a qualified key, or none and Exists; no value with Exists;
        tolerationSeconds only with NoExecute."""
        key = self.key or ""
        if key and not kf.is_qualified_name(key):
            raise kf.invalid(f"key: Invalid value: {json.dumps(key)}: {kf.QUALIFIED_NAME_MESSAGE}")
        if not key and self.operator != "Exists":
            raise kf.invalid(f"operator: {kf.TOLERATION_EMPTY_KEY_MESSAGE}")
        if self.operator == "Exists" and self.value:
            raise kf.invalid(f"value: Invalid value: {json.dumps(self.value)}: {kf.TOLERATION_EXISTS_MESSAGE}")
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise kf.invalid(f"effect: {kf.TOLERATION_SECONDS_MESSAGE}")
        return self


class SeccompProfile(KubeModel):
    """The seccomp options to use by the containers in this pod."""

    model_config = ConfigDict(json_schema_extra=kf.validations(kf.localhost_profile_rules("seccomp")))

    type: Literal["Localhost", "RuntimeDefault", "Unconfined"] = Field(
        description="type indicates which kind of seccomp profile will be applied."
    )
    localhostProfile: Annotated[StrictStr, Field(max_length=kf.MAX_PATH, pattern=kf.LOCAL_DESCENDING_PATH)] | None = (
        Field(
            default=None,
            description="A profile defined in a file on the node, relative to the kubelet's seccomp directory "
            "(no leading '/', no '..'); only with type Localhost.",
        )
    )

    @model_validator(mode="after")
    def _localhost_only(self) -> SeccompProfile:
        kf.check_localhost_profile("seccomp", self.type, self.localhostProfile)
        return self


class AppArmorProfile(KubeModel):
    """The AppArmor options to use by the containers in this pod."""

    model_config = ConfigDict(json_schema_extra=kf.validations(kf.localhost_profile_rules("AppArmor")))

    type: Literal["Localhost", "RuntimeDefault", "Unconfined"] = Field(
        description="type indicates which kind of AppArmor profile will be applied."
    )
    localhostProfile: Annotated[StrictStr, Field(max_length=4095, pattern=kf.UNPADDED)] | None = Field(
        default=None,
        description="A profile loaded on the node (at most 4095 characters, not padded with whitespace); "
        "only with type Localhost.",
    )

    @model_validator(mode="after")
    def _localhost_only(self) -> AppArmorProfile:
        kf.check_localhost_profile("AppArmor", self.type, self.localhostProfile)
        return self


class SELinuxOptions(KubeModel):
    """The SELinux context to be applied to all containers."""

    level: StrictStr | None = Field(default=None, description="Level is SELinux level label.")
    role: StrictStr | None = Field(default=None, description="Role is a SELinux role label.")
    type: StrictStr | None = Field(default=None, description="Type is a SELinux type label.")
    user: StrictStr | None = Field(default=None, description="User is a SELinux user label.")


class Sysctl(KubeModel):
    """Sysctl defines a kernel parameter to be set."""

    name: kf.SysctlName = Field(description="Name of a property to set, e.g. kernel.shm_rmid_forced.")
    value: StrictStr = Field(description="Value of a property to set.")


class PodSecurityContext(KubeModel):
    """Pod-level security attributes and common container settings."""

    runAsUser: kf.UnixID | None = Field(default=None, description="The UID to run the entrypoint of the container.")
    runAsGroup: kf.UnixID | None = Field(default=None, description="The GID to run the entrypoint of the container.")
    runAsNonRoot: StrictBool | None = Field(default=None, description="The container must run as a non-root user.")
    fsGroup: kf.UnixID | None = Field(default=None, description="A supplemental group applied to all containers.")
    fsGroupChangePolicy: Literal["OnRootMismatch", "Always"] | None = Field(
        default=None, description="How ownership and permission of a volume is changed before being exposed."
    )
    supplementalGroups: list[kf.UnixID] | None = Field(
        default=None, description="Groups applied to the first process run in each container."
    )
    supplementalGroupsPolicy: Literal["Merge", "Strict"] | None = Field(
        default=None, description="How supplemental groups of the first container processes are calculated."
    )
    # MountOption needs kube-apiserver's SELinuxMount feature gate, off in 1.34 (which refuses it).
    seLinuxChangePolicy: Literal["Recursive"] | None = Field(
        default=None, description="How the SELinux label is applied to volumes used by the pod."
    )
    seLinuxOptions: SELinuxOptions | None = Field(default=None, description="The SELinux context for all containers.")
    seccompProfile: SeccompProfile | None = Field(default=None, description="The seccomp options of the containers.")
    appArmorProfile: AppArmorProfile | None = Field(default=None, description="The AppArmor options of the containers.")
    sysctls: (
        Annotated[
            list[Sysctl],
            Field(max_length=kf.MAX_LIST_ITEMS, json_schema_extra=kf.LIST_MAP_BY_NAME),
            AfterValidator(kf.unique_names),
        ]
        | None
    ) = Field(default=None, description="Namespaced sysctls used for the pod; each name once.")


class Condition(KubeModel):
    """Condition contains details for one aspect of the current state of this API Resource."""

    type: Annotated[
        StrictStr,
        Field(
            max_length=316,
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ] = Field(description="type of condition in CamelCase or in foo.example.com/CamelCase.")
    status: Literal["True", "False", "Unknown"] = Field(
        description="status of the condition, one of True, False, Unknown."
    )
    observedGeneration: Annotated[StrictInt, Field(ge=0, json_schema_extra={"format": "int64"})] | None = Field(
        default=None, description="The .metadata.generation that the condition was set based upon."
    )
    lastTransitionTime: Annotated[StrictStr, Field(json_schema_extra={"format": "date-time"})] = Field(
        description="The last time the condition transitioned from one status to another."
    )
    reason: Annotated[
        StrictStr, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    ] = Field(description="A programmatic identifier, in CamelCase, for the condition's last transition.")
    message: Annotated[StrictStr, Field(max_length=32768)] = Field(
        description="A human readable message indicating details about the transition. May be empty."
    )


class ObjectMeta(KubeModel):
    """Standard object metadata. Only the fields our rules read are typed; the rest are kept."""

    name: StrictStr | None = None
    generateName: StrictStr | None = None
    namespace: StrictStr | None = None
    uid: StrictStr | None = None
    resourceVersion: StrictStr | None = None
    generation: StrictInt | None = None
    labels: StringMap | None = None
    annotations: StringMap | None = None
