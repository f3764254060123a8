"""Shared pieces of the structured allocator: input errors, version semantics, quantities, nodes.

Pure functions of plain data. The allocator itself lives in :mod:`gpucluster.dra.allocator`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from typing import Any

from gpucluster.dra import gates as g

# Re-exported: the allocator's callers import them from here.
from gpucluster.dra.inputerror import SUPPORTED_VERSIONS as SUPPORTED_VERSIONS
from gpucluster.dra.inputerror import AllocatorInputError as AllocatorInputError
from gpucluster.dra.quantity import QuantityError, parse_cached
from gpucluster.nodeselector import parse_int64, requirement_matches

# resourceapi.AllocationResultsMaxSize (k8s.io/api/resource/v1).
ALLOCATION_RESULTS_MAX_SIZE = 32

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): what Kubernetes calls a DeviceID."""


@dataclass(frozen=True, slots=True)
class Semantics:
    """What differs between the Kubernetes releases the allocator emulates.

    Each flag names the upstream behaviour (k8s.io/dynamic-resource-allocation/structured).
    NewAllocator runs the most stable of its three implementations ("stable", "incubating",
    "experimental") that supports every DRA feature the scheduler enables (:func:`variant`), and
    they differ: the order of pools, how a request walks its devices, whether capacity requests,
    shares, distinctAttribute and binding conditions are known at all.
    """

    version: str
    # The implementation NewAllocator picks for these gates (see variant()).
    variant: str
    # The implementation orders slices and pools with binding conditions after the others
    # (whatever DRADeviceBindingConditions says).
    binding_order: bool
    # The implementation has the DRAConsumableCapacity code: with the gate off a capacity
    # request is an error and distinctAttribute is supported. Without it capacity requests are
    # not read at all and distinctAttribute is an "empty constraint".
    sharing_code: bool
    # 1.34: distinctAttribute compares the attribute values' pointers, so only the same device
    # (a shared one chosen again) counts as a duplicate. 1.35 compares the values.
    distinct_by_identity: bool
    # 1.34 (alpha DRAConsumableCapacity): allocateDevice checks a request's capacity against the
    # device at the request's device index in the chosen device's slice, not the chosen device
    # (and panics where the slice has no such device); 1.35 checks the chosen device.
    capacity_wrong_device: bool
    # 1.35+: a shared device's counters are taken once, by its first allocation, and count as
    # consumed while other claims hold shares of it. 1.34 takes them at every allocation and
    # counts only devices allocated whole (AllocatedDevices).
    counters_once_per_shared_device: bool
    # 1.34 and 1.35: allocateDevice takes a device's counters before it checks taints and
    # constraints and keeps them when one of those refuses the device (until the node's search
    # ends). 1.36 gives them back (countersReserved).
    counters_leak: bool
    # 1.35+: incomplete and invalid pools are skipped when searching ExactCount devices, and a
    # node where allocation failed while some pool was invalid reports "invalid resource pools
    # were encountered". 1.34 allocates from incomplete pools and aborts on reaching an invalid
    # pool ("pool X is invalid: ...").
    skip_unusable_pools: bool
    # 1.35+: counter sets live in their own slices and are shared by the whole pool; a slice may
    # have devices or sharedCounters, not both. 1.34: counters are per ResourceSlice.
    pool_counters: bool
    # 1.35+: only the NoSchedule and NoExecute effects prevent allocation ("None" and unknown
    # effects are ignored). 1.34 requires every taint to be tolerated.
    only_known_taint_effects: bool
    # 1.36: pools are searched sorted by (driver, pool) and slices sorted by name, pools with
    # binding conditions last. Before: the order in which the informer lists them (we use
    # the input order).
    sorted_order: bool
    # 1.36: within one request, devices are tried as combinations (the next device comes after
    # the previous one), not permutations.
    combinations: bool
    # DRADeviceBindingConditions (on by default from 1.36): devices with bindingConditions can be
    # allocated. Off, such devices are never selected.
    binding_conditions: bool
    # 1.34 and 1.35: when the first two subrequests of a firstAvailable list both ask for All devices, the
    # second one gets the devices the first one's class and selectors match (upstream checks the
    # second subrequest under the first one's key of its device-match cache); its own class and
    # selectors are never evaluated. Fixed in 1.36.
    second_all_subrequest_reuses_first: bool
    # 1.34: an All subrequest after the first, once it has its first device, goes on as the first
    # subrequest of its list from the second device on (upstream's recursion for the next device
    # drops the subrequest index): it keeps one device and the first subrequest supplies the rest,
    # if it can. Fixed in 1.35.
    all_subrequest_goes_on_as_first: bool
    # The other feature gates (gpucluster.dra.gates), in effect for this explanation.
    admin_access: bool = True
    prioritized_list: bool = True
    device_taints: bool = True
    partitionable_devices: bool = True
    consumable_capacity: bool = True
    filter_timeout: bool = True
    # DRAListTypeAttributes (alpha in 1.36, off by default): attributes may hold lists; the
    # allocator is then upstream's "experimental" variant, which differs from "incubating" only there.
    list_type_attributes: bool = False
    gates: tuple[tuple[str, bool], ...] = ()  # every gate and its value, for reports

    @staticmethod
    def for_version(version: str, feature_gates: Mapping[str, bool] | None = None) -> Semantics:
        """``version``'s semantics with its default feature gates, changed by ``feature_gates``."""
        enabled = g.resolve(version, feature_gates)
        minor = int(version.split(".")[1])
        implementation = variant(version, enabled)
        newest_code = implementation != "stable" and (minor >= 36 or implementation == "experimental")
        # 1.36's incubating and experimental sort pools and walk combinations; 1.36's stable is
        # 1.35's incubating code and does neither.
        modern = minor >= 36 and implementation != "stable"
        return Semantics(
            version=version,
            variant=implementation,
            binding_order=newest_code,
            sharing_code=newest_code,
            counters_leak=minor <= 35,
            distinct_by_identity=minor == 34,
            capacity_wrong_device=minor == 34,
            counters_once_per_shared_device=minor >= 35,
            skip_unusable_pools=minor >= 35,
            pool_counters=minor >= 35,
            only_known_taint_effects=minor >= 35,
            sorted_order=modern,
            combinations=modern,
            binding_conditions=enabled[g.BINDING_CONDITIONS],
            second_all_subrequest_reuses_first=minor <= 35,
            all_subrequest_goes_on_as_first=minor == 34,
            admin_access=enabled[g.ADMIN_ACCESS],
            prioritized_list=enabled[g.PRIORITIZED_LIST],
            device_taints=enabled[g.DEVICE_TAINTS],
            partitionable_devices=enabled[g.PARTITIONABLE_DEVICES],
            consumable_capacity=enabled[g.CONSUMABLE_CAPACITY],
            filter_timeout=enabled[g.FILTER_TIMEOUT],
            list_type_attributes=enabled.get(g.LIST_TYPE_ATTRIBUTES, False),
            gates=tuple(enabled.items()),
        )


def variant(version: str, enabled: Mapping[str, bool]) -> str:
    """The allocator implementation kube-scheduler ``version`` runs with these gates.

    NewAllocator takes the first of stable, incubating, experimental whose SupportedFeatures
    cover the enabled features. 1.34: the scheduler always enables DeviceStatus
    (DRAResourceClaimDeviceStatus, beta and on), which only experimental supports. 1.35: stable
    supports nothing, incubating admin access, prioritized list, partitionable devices and
    taints; binding conditions or consumable capacity need experimental. 1.36: stable supports
    those four, incubating adds binding conditions and consumable capacity, experimental list
    attributes.
    """
    minor = int(version.split(".")[1])
    on = {name for name, value in enabled.items() if value and name != g.FILTER_TIMEOUT}
    basic = {g.ADMIN_ACCESS, g.PRIORITIZED_LIST, g.PARTITIONABLE_DEVICES, g.DEVICE_TAINTS}
    sharing = {g.BINDING_CONDITIONS, g.CONSUMABLE_CAPACITY}
    if minor <= 34:
        return "experimental"
    if minor == 35:
        if not on:
            return "stable"
        return "incubating" if on <= basic else "experimental"
    if on <= basic:
        return "stable"
    return "incubating" if on <= basic | sharing else "experimental"


# ---------------------------------------------------------------------------------------------
# Quantities (k8s.io/apimachinery resource.Quantity), exact, for counters.


def parse_quantity(value: Any, where: str) -> Fraction:
    """The exact value of a Kubernetes quantity string (or JSON number), as ``ParseQuantity`` reads it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise AllocatorInputError(f"{where}: quantity must be a string or a number, not {value!r}")
    text = value if isinstance(value, str) else str(value)
    try:
        return parse_cached(text).value
    except QuantityError as exc:
        raise AllocatorInputError(f"{where}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Nodes and NodeSelectors (k8s.io/component-helpers/scheduling/corev1/nodeaffinity).


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    synthetic: bool = False  # named by a ResourceSlice, no Node object given


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches_label(self, labels: Mapping[str, str]) -> bool:
        return requirement_matches(self.key, self.operator, self.values, labels)

    def matches_field(self, node: NodeInfo) -> bool:
        # Only metadata.name is supported, with In / NotIn and exactly one value.
        if self.operator == "In":
            return node.name in self.values
        return node.name not in self.values


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A parsed v1.NodeSelector: terms are ORed, requirements within a term ANDed."""

    terms: tuple[tuple[tuple[_Requirement, ...], tuple[_Requirement, ...]], ...]

    def matches(self, node: NodeInfo) -> bool:
        for expressions, fields in self.terms:
            if not expressions and not fields:
                continue  # an empty term matches nothing
            if all(r.matches_label(node.labels) for r in expressions) and all(r.matches_field(node) for r in fields):
                return True
        return False


_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _parse_requirement(raw: Any, where: str, field: bool) -> _Requirement:
    if not isinstance(raw, Mapping):
        raise AllocatorInputError(f"{where}: must be an object")
    key = raw.get("key")
    operator = raw.get("operator")
    values = raw.get("values") or []
    if not isinstance(key, str) or not key:
        raise AllocatorInputError(f"{where}.key: required")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise AllocatorInputError(f"{where}.values: must be a list of strings")
    if field:
        if key != "metadata.name":
            raise AllocatorInputError(f"{where}.key: only metadata.name is supported in matchFields, not {key!r}")
        if operator not in ("In", "NotIn"):
            raise AllocatorInputError(f"{where}.operator: must be In or NotIn for matchFields, not {operator!r}")
        if len(values) != 1:
            raise AllocatorInputError(f"{where}.values: must have exactly one value for matchFields")
    else:
        if operator not in _LABEL_OPERATORS:
            raise AllocatorInputError(
                f"{where}.operator: unsupported operator {operator!r} (one of {', '.join(_LABEL_OPERATORS)})"
            )
        if operator in ("In", "NotIn") and not values:
            raise AllocatorInputError(f"{where}.values: must be non-empty for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise AllocatorInputError(f"{where}.values: must be empty for {operator}")
        if operator in ("Gt", "Lt"):
            if len(values) != 1:
                raise AllocatorInputError(f"{where}.values: must have exactly one value for {operator}")
            if parse_int64(values[0]) is None:
                raise AllocatorInputError(f"{where}.values[0]: must be an integer for {operator}")
    assert isinstance(operator, str)
    return _Requirement(key, operator, tuple(values))


def parse_node_selector(raw: Any, where: str) -> NodeSelector:
    if not isinstance(raw, Mapping):
        raise AllocatorInputError(f"{where}: must be an object")
    terms_raw = raw.get("nodeSelectorTerms")
    if not isinstance(terms_raw, list):
        raise AllocatorInputError(f"{where}.nodeSelectorTerms: required list")
    terms = []
    for t_index, term in enumerate(terms_raw):
        t_where = f"{where}.nodeSelectorTerms[{t_index}]"
        if not isinstance(term, Mapping):
            raise AllocatorInputError(f"{t_where}: must be an object")
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not isinstance(exprs, list) or not isinstance(fields, list):
            raise AllocatorInputError(f"{t_where}: matchExpressions and matchFields must be lists")
        terms.append(
            (
                tuple(
                    _parse_requirement(r, f"{t_where}.matchExpressions[{i}]", field=False) for i, r in enumerate(exprs)
                ),
                tuple(_parse_requirement(r, f"{t_where}.matchFields[{i}]", field=True) for i, r in enumerate(fields)),
            )
        )
    return NodeSelector(tuple(terms))


def node_from_object(obj: Mapping[str, Any], index: int) -> NodeInfo:
    """A Node's name and labels (``index``: its position in the input, for unnamed Nodes)."""
    meta = obj.get("metadata")
    if (
        (type(meta) is not dict and not isinstance(meta, Mapping))
        or not isinstance(meta.get("name"), str)
        or not meta.get("name")
    ):
        raise AllocatorInputError(f"Node #{index}: metadata.name: required")
    labels = meta.get("labels") or {}
    # One type check over all keys and values, in C (a generator per label is a tenth of a first
    # explanation of a 1,000-node cluster).
    if (type(labels) is not dict and not isinstance(labels, Mapping)) or not _STR_ONLY.issuperset(
        map(type, chain(labels, labels.values()))
    ):
        raise AllocatorInputError(f"Node {meta['name']}: metadata.labels: must map strings to strings")
    return NodeInfo(meta["name"], labels)  # not copied: nothing changes them while a call reads them


_STR_ONLY = frozenset((str,))


def object_ref(obj: Mapping[str, Any], default_namespace: str | None = "default") -> str:
    """``namespace/name`` as klog.KObj prints it (cluster-scoped objects: ``name``)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        name = "<unnamed>"
    if not isinstance(namespace, str) or not namespace:
        namespace = default_namespace
    return f"{namespace}/{name}" if namespace else name
