"""Can these ResourceClaims be allocated, on which node, and if not, why not.

``explain(claims, cluster)`` runs the structured-parameters allocator of kube-scheduler
(k8s.io/dynamic-resource-allocation/structured, Kubernetes 1.34 by default, 1.35 and 1.36 on
request) over every node of ``cluster`` - a mixed list of ResourceSlice, DeviceClass, Node and
ResourceClaim dicts - and explains, per node and request, which devices were considered and the
first reason each rejected device could not be used. Pure: no I/O.

Claims are allocated together on one node, like the claims of one pod. ResourceClaimTemplates are
accepted in place of claims (their ``spec.spec``). ResourceClaims in ``cluster`` with
``status.allocation`` hold their devices (except results with ``adminAccess: true``).

Fatal problems - a CEL runtime error, an invalid pool reached in 1.34, asking for "All" devices of
an incomplete pool, more than 32 devices in one claim - end in ``errors`` with kube-scheduler's
message (for example ``claim default/x: selector #0: CEL runtime error: no such key: foo``) and
make the answer unsatisfiable, because the scheduler aborts the pod's scheduling on them. Input
the API server would reject raises :class:`AllocatorInputError`.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from operator import itemgetter
from types import MappingProxyType
from typing import Any

from gpucluster.dra import capacity, cel
from gpucluster.dra.claims import (
    ClaimSpec,
    DeviceClassInfo,
    SelectorCompiler,
    parse_claim,
    parse_device_class,
)
from gpucluster.dra.explanation import RequestReport
from gpucluster.dra.model import (
    AllocatorInputError,
    DeviceKey,
    NodeInfo,
    Semantics,
    node_from_object,
    object_ref,
    parse_quantity,
)
from gpucluster.dra.pools import Pool, Slice, check_slice_for_version, gather_pools, parse_slice
from gpucluster.dra.search import NodeSearch
from gpucluster.dra.searchtypes import DEFAULT_DEADLINE_MS, DEFAULT_MAX_STEPS, ExplainContext

__all__ = [
    "AllocatedDevice",
    "AllocatorInputError",
    "Explanation",
    "Fit",
    "NodeResult",
    "RequestReport",
    "SelectorBackend",
    "explain",
    "fit",
]

_NO_CAPACITY: Mapping[str, str] = MappingProxyType({})

_ORDER, _SLICE = itemgetter(0), itemgetter(1)  # of (input position, slice)

_TEXT_DEVICE_LINES = 10  # per request and node in to_text(); to_json() has all of them


@dataclass(frozen=True, slots=True)
class SelectorBackend:
    """The CEL implementation: :mod:`gpucluster.dra.cel` unless a test injects another."""

    compile: SelectorCompiler
    views: Callable[[Mapping[str, Any]], Sequence[Any]]
    compile_error: type[Exception]
    runtime_error: type[Exception]
    # Why evaluating any selector on a device with these raw attributes fails before it starts
    # (Kubernetes converts every attribute first), "" if it does not; None: never.
    conversion_error: Callable[[Mapping[str, Any]], str] | None = None
    # The key of the values some programs read from a raw device (cel.read_key): devices with
    # equal keys get the same verdicts, so each distinct key is evaluated once. None: evaluate
    # every device.
    read_key: Callable[[Sequence[Any]], cel.ReadKey | None] | None = None


def default_backend() -> SelectorBackend:
    """The CEL backend for one call: its views share one cel.Shapes (the call's slices split
    attribute names into domains once per distinct set of names)."""
    return SelectorBackend(
        compile=cel.compile_selector,
        views=functools.partial(cel.slice_views, shapes=cel.Shapes()),
        compile_error=cel.CelCompileError,
        runtime_error=cel.CelRuntimeError,
        conversion_error=cel.attributes_conversion_error,
        read_key=cel.read_key,
    )


@dataclass(slots=True)
class AllocatedDevice:
    request: str  # "gpu" or "gpu/subrequest", as in status.allocation.devices.results[].request
    driver: str
    pool: str
    device: str
    claim: str = ""  # namespace/name of the claim the device is for
    # DRAConsumableCapacity: one allocation of a device that allows multiple allocations (the
    # scheduler gives it a shareID), and what it consumes by capacity name as the device publishes it.
    shared: bool = False
    consumed_capacity: Mapping[str, str] = field(default_factory=lambda: _NO_CAPACITY)

    def as_result(self) -> dict[str, Any]:
        """The fields of a ``status.allocation.devices.results`` entry this device gives."""
        out: dict[str, Any] = {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}
        if self.consumed_capacity:
            out["consumedCapacity"] = dict(self.consumed_capacity)
        return out

    def to_json(self) -> dict[str, Any]:
        """``explain -o json``'s entry: the result, and which claim it is for."""
        return {"claim": self.claim, **self.as_result()}


@dataclass(slots=True)
class NodeResult:
    """One node's answer. ``allocation`` and ``reasons`` are built when first read: most of a
    thousand nodes' answers are never looked at one by one."""

    node: str
    satisfiable: bool
    requests: list[RequestReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # node-level lines of ``reasons`` (pools, errors)
    error: str = ""  # a fatal error met on this node
    steps: int = 0  # search steps (upstream: numAllocateOneInvocations)
    gave_up: str = ""  # the search stopped without an answer ("gave up after N ms on node X")
    elapsed_ms: float = 0.0  # time spent deciding this node
    multi: bool = False  # several claims: lines name the claim
    # per claim: (its ref, [(request, driver, pool, device, consumedCapacity or None)])
    picks: list[tuple[str, list[tuple[str, str, str, str, dict[str, str] | None]]]] = field(default_factory=list)
    _allocation: list[AllocatedDevice] | None = None
    _reasons: list[str] | None = None

    @property
    def allocation(self) -> list[AllocatedDevice]:
        if self._allocation is None:
            self._allocation = [
                AllocatedDevice(
                    request,
                    driver,
                    pool,
                    device,
                    claim=ref,
                    shared=used is not None,
                    consumed_capacity=used or _NO_CAPACITY,
                )
                for ref, chosen in self.picks
                for request, driver, pool, device, used in chosen
            ]
        return self._allocation

    @property
    def reasons(self) -> list[str]:
        """The notes, then per request its summary and every rejected device's first reason."""
        if self._reasons is None:
            reasons = list(self.notes)
            for report in self.requests:
                reasons.append(_summary(report, self.multi))
                label = _request_label(report.claim, report.request, self.multi)
                reasons.extend(f"{label}: {device}: {reason}" for device, reason in report.rejections)
            self._reasons = reasons
        return self._reasons

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "satisfiable": self.satisfiable,
            "allocation": [a.to_json() for a in self.allocation],
            "reasons": list(self.reasons),
        }


@dataclass(slots=True)
class Explanation:
    satisfiable: bool
    nodes: list[NodeResult]
    errors: list[str]
    kubernetes_version: str = "1.34"
    feature_gates: dict[str, bool] = field(default_factory=dict)  # the gates this answer assumed

    @property
    def gave_up(self) -> str:
        """Why there is no answer: no node fits, and on some node the search gave up ("" if none)."""
        if self.satisfiable or self.errors:
            return ""
        return next((n.gave_up for n in self.nodes if n.gave_up), "")

    def to_json(self) -> dict[str, Any]:
        return {
            "satisfiable": self.satisfiable,
            "nodes": [n.to_json() for n in self.nodes],
            "errors": list(self.errors),
            "kubernetesVersion": self.kubernetes_version,
            "featureGates": dict(self.feature_gates),
        }

    def one_line(self) -> str:
        """Why the claims cannot be allocated anywhere, summed over nodes, for events and warnings.

        For example ``0/24 devices usable for request gpu on 3 nodes: 16 selector #0 false
        (productName ...), 8 in use``. Empty when some node fits.
        """
        if self.satisfiable:
            return ""
        if self.errors:
            return self.errors[0]
        if self.gave_up:
            return f"no node fits so far: {self.gave_up}"
        totals: dict[tuple[str, str], list[Any]] = {}
        for n in self.nodes:
            for report in n.requests:
                entry = totals.setdefault(
                    (report.claim, report.request), [0, 0, Counter(), dict(report.selectors), report.mode, report.count]
                )
                entry[0] += report.considered
                entry[1] += report.usable
                entry[2].update(_category(reason) for _, reason in report.rejections)
        if not totals:
            notes = [note for n in self.nodes for note in n.notes]
            return notes[0] if notes else f"no node offers devices for the claims ({len(self.nodes)} nodes)"
        multi = len({claim for claim, _ in totals}) > 1
        parts = []
        for (claim, request), (considered, usable, counts, selectors, mode, count) in totals.items():
            line = f"{usable}/{considered} devices usable for {_request_label(claim, request, multi)}"
            line += f" on {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}"
            if mode != "All":
                line += f", need {count} on one node"
            reasons = []
            for category, count in counts.most_common(3):
                reason = f"{count} {category}"
                expression = selectors.get(category.removesuffix(" false"))
                if expression is not None:
                    reason += f" ({_shorten(_DEVICE_PREFIX.sub('', expression), 48)})"
                reasons.append(reason)
            if reasons:
                line += ": " + ", ".join(reasons)
            parts.append(line)
        return "; ".join(parts)

    def to_text(self, *, wide: bool = False) -> str:
        """The answer for a terminal: per node, what fits or why not, with the first rejected
        devices of a node that does not fit; ``wide`` (``-o wide``) lists every rejected device, on
        the nodes that fit too (the devices the allocation passed over, and why)."""
        fits = [n for n in self.nodes if n.satisfiable]
        lines = []
        if self.satisfiable:
            lines.append(
                f"satisfiable on {len(fits)} of {len(self.nodes)} node(s) (Kubernetes {self.kubernetes_version})"
            )
        else:
            lines.append(
                f"not satisfiable: {len(fits)} of {len(self.nodes)} node(s) fit (Kubernetes {self.kubernetes_version})"
            )
        for error in self.errors:
            lines.append(f"error: {error}")
        multi = len({r.claim for n in self.nodes for r in n.requests}) > 1
        for n in self.nodes:
            if n.satisfiable:
                groups: dict[tuple[str, str, str], list[str]] = {}
                for a in n.allocation:
                    label = _request_label(a.claim, a.request, multi)
                    groups.setdefault((label, a.driver, a.pool), []).append(a.device)
                picks = "; ".join(
                    f"{label} -> {', '.join(devices)} ({driver}/{pool})"
                    for (label, driver, pool), devices in groups.items()
                )
                lines.append(f"{n.node}: fits: {picks}" if picks else f"{n.node}: fits")
            else:
                lines.append(f"{n.node}: does not fit")
            for note in n.notes:
                lines.append(f"  {note}")
            for report in n.requests:
                lines.append(f"  {_summary(report, multi, text=True)}")
                if n.satisfiable and not wide:
                    continue
                shown = report.rejections if wide else report.rejections[:_TEXT_DEVICE_LINES]
                for device, reason in shown:
                    lines.append(f"    {device}: {reason}")
                extra = len(report.rejections) - len(shown)
                if extra > 0:
                    lines.append(f"    ... and {extra} more (see -o wide or -o json)")
        return "\n".join(lines) + "\n"


def _request_label(claim: str, request: str, multi: bool) -> str:
    return f"claim {claim}, request {request}" if multi else f"request {request}"


@functools.lru_cache(maxsize=4096)  # the same few reasons on every node
def _category(reason: str) -> str:
    if reason.startswith("in use by "):
        return "in use"
    if reason.startswith("chosen for request "):
        return "chosen for another request"
    return reason.split(" (", 1)[0]


def _summary(report: RequestReport, multi: bool, *, text: bool = False) -> str:
    need = f"all {report.count} matching" if report.mode == "All" else str(report.count)
    line = (
        f"{_request_label(report.claim, report.request, multi)}: "
        f"{report.usable}/{report.considered} devices usable, need {need}"
    )
    if report.chosen is not None:
        line += ", chosen" if report.chosen else ", not chosen"
    if report.rejections:
        # Counter.most_common's order (by count, then first seen), without a Counter per node.
        counts: dict[str, int] = {}
        for _, reason in report.rejections:
            category = _category(reason)
            counts[category] = counts.get(category, 0) + 1
        expressions = dict(report.selectors)
        parts = []
        for category, n in sorted(counts.items(), key=itemgetter(1), reverse=True):
            part = f"{n} {category}"
            expr = expressions.get(category.removesuffix(" false"))
            if text and expr is not None:
                part += f" ({_shorten(expr)})"
            parts.append(part)
        line += "; " + ", ".join(parts)
    return line


# device.attributes["gpu.nvidia.com"].productName -> productName, for one-line summaries.
_DEVICE_PREFIX = re.compile(r"""device\.(?:attributes|capacity)\[["'][^"']*["']\]\.""")


def _shorten(expression: str, limit: int = 80) -> str:
    flat = " ".join(expression.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------


def _kind(obj: Any, index: int, what: str) -> str:
    if type(obj) is not dict and not isinstance(obj, Mapping):  # dict first: the ABC check costs more
        raise AllocatorInputError(f"{what} #{index}: expected a Kubernetes object, got {type(obj).__name__}")
    kind = obj.get("kind")
    return kind if isinstance(kind, str) else ""


def _claim_key(obj: Mapping[str, Any]) -> str:
    return object_ref(obj)


def _in_use(
    allocated: Sequence[Mapping[str, Any]], skip: set[str], consumable: bool
) -> tuple[dict[DeviceKey, str], set[DeviceKey], dict[DeviceKey, dict[str, Fraction]]]:
    """Devices held by allocated claims, and (DRAConsumableCapacity) what their shared
    allocations consume, as kube-scheduler gathers its allocated state: an admin-access result
    holds nothing; with the gate on, a result with a ``shareID`` is one allocation of a shared
    device and adds its ``consumedCapacity``; any other result holds the device whole."""
    held: dict[DeviceKey, str] = {}
    shared: set[DeviceKey] = set()
    consumed: dict[DeviceKey, dict[str, Fraction]] = {}
    for claim in allocated:
        ref = _claim_key(claim)
        if ref in skip:
            continue
        status = claim.get("status")
        allocation = status.get("allocation") if isinstance(status, Mapping) else None
        devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
        results = devices.get("results") if isinstance(devices, Mapping) else None
        if not isinstance(results, list):
            continue
        for i, result in enumerate(results):
            if not isinstance(result, Mapping):
                raise AllocatorInputError(
                    f"ResourceClaim {ref}: status.allocation.devices.results[{i}]: must be an object"
                )
            if result.get("adminAccess") is True:
                continue
            key = (result.get("driver"), result.get("pool"), result.get("device"))
            if not all(isinstance(k, str) and k for k in key):
                raise AllocatorInputError(
                    f"ResourceClaim {ref}: status.allocation.devices.results[{i}]: driver, pool and device are required"
                )
            device_key = (str(key[0]), str(key[1]), str(key[2]))
            if consumable and result.get("shareID") is not None:
                where = f"ResourceClaim {ref}: status.allocation.devices.results[{i}].consumedCapacity"
                shared.add(device_key)
                amounts = result.get("consumedCapacity")
                if amounts is None:
                    continue
                if not isinstance(amounts, Mapping):
                    raise AllocatorInputError(f"{where}: must map capacity names to quantities")
                used = consumed.setdefault(device_key, {})
                for name, value in amounts.items():
                    full = capacity.qualified(str(name), device_key[0])
                    used[full] = used.get(full, Fraction(0)) + parse_quantity(value, f"{where}.{name}")
                continue
            held.setdefault(device_key, ref)
    return held, shared, consumed


def _pool_notes(pools: Sequence[Pool], semantics: Semantics) -> list[str]:
    notes = []
    for pool in pools:
        if pool.invalid:
            if semantics.skip_unusable_pools:
                notes.append(f"pool {pool.id}: invalid ({pool.invalid}), not used")
            else:
                notes.append(f"pool {pool.id}: invalid ({pool.invalid}); the search aborts when it reaches it")
        elif pool.incomplete:
            if semantics.skip_unusable_pools:
                notes.append(
                    f"pool {pool.id}: incomplete ({pool.seen_slices} of {pool.expected_slices} slices), not used"
                )
            else:
                notes.append(
                    f"pool {pool.id}: incomplete ({pool.seen_slices} of {pool.expected_slices} slices), used "
                    "anyway except for allocationMode All (Kubernetes 1.34)"
                )
    return notes


def _split_cluster(
    cluster: Sequence[Any], semantics: Semantics
) -> tuple[list[tuple[int, Slice]], dict[str, Mapping[str, Any]], dict[str, NodeInfo], list[Mapping[str, Any]]]:
    slices: list[tuple[int, Slice]] = []
    class_objects: dict[str, Mapping[str, Any]] = {}
    node_infos: dict[str, NodeInfo] = {}
    allocated: list[Mapping[str, Any]] = []
    for index, obj in enumerate(cluster):
        kind = _kind(obj, index, "cluster object")
        if kind == "ResourceSlice":
            parsed = parse_slice(obj, index)
            # GatherPools with DRAPartitionableDevices off skips slices with per-device node
            # selection. In 1.34 the devices of a slice with shared counters that consume none
            # stay allocatable; from 1.35 a counter-set slice (devices of its own it has none) is
            # not used but still counts towards its pool being complete.
            if not semantics.partitionable_devices and parsed.per_device:
                continue
            check_slice_for_version(parsed, semantics)
            slices.append((index, parsed))
        elif kind == "DeviceClass":
            class_objects[object_ref(obj, default_namespace=None)] = obj
        elif kind == "Node":
            info = node_from_object(obj, index)
            node_infos.setdefault(info.name, info)
        elif kind == "ResourceClaim":
            allocated.append(obj)
    return slices, class_objects, node_infos, allocated


def explain(
    claims: list[dict[str, Any]],
    cluster: list[dict[str, Any]],
    *,
    node: str | None = None,
    kubernetes_version: str = "1.34",
    selectors: SelectorBackend | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    deadline_ms: float | None = DEFAULT_DEADLINE_MS,
    assume_empty: bool = False,
    feature_gates: Mapping[str, bool] | None = None,
) -> Explanation:
    """Decide, node by node, whether ``claims`` can be allocated together, and explain why.

    ``selectors`` replaces the CEL implementation (tests); ``max_steps`` and ``deadline_ms``
    bound the search per node like the scheduler's filter timeout: a node whose search stops
    there has ``gave_up`` set, and so has the answer if no other node fits. ``assume_empty``
    answers "would it fit on an empty node?": ResourceClaims allocated in ``cluster`` hold no
    devices. ``feature_gates`` changes the version's default gates (:mod:`gpucluster.dra.gates`).
    """
    try:
        semantics = Semantics.for_version(kubernetes_version, feature_gates)
    except AllocatorInputError as exc:
        raise AllocatorInputError(str(exc), "") from None
    backend = selectors or default_backend()
    if selectors is None and semantics.consumable_capacity:
        backend = SelectorBackend(
            compile=functools.partial(cel.compile_selector, consumable_capacity=True),
            views=backend.views,
            compile_error=backend.compile_error,
            runtime_error=backend.runtime_error,
            conversion_error=backend.conversion_error,
            read_key=backend.read_key,
        )
    if selectors is None and semantics.list_type_attributes:
        # DRAListTypeAttributes: list attributes convert (views) and `includes` compiles.
        backend = SelectorBackend(
            compile=functools.partial(
                cel.compile_selector, consumable_capacity=semantics.consumable_capacity, list_type_attributes=True
            ),
            views=functools.partial(cel.slice_views, shapes=cel.Shapes(), list_type_attributes=True),
            compile_error=backend.compile_error,
            runtime_error=backend.runtime_error,
            conversion_error=cel.list_attributes_conversion_error,
            read_key=backend.read_key,
        )
    gates = dict(semantics.gates)
    if not semantics.filter_timeout:
        deadline_ms = None

    try:
        slices, class_objects, node_infos, allocated = _split_cluster(cluster, semantics)
    except AllocatorInputError as exc:
        raise AllocatorInputError(str(exc), "cluster") from None

    specs: list[ClaimSpec] = []
    for index, obj in enumerate(claims):
        try:
            _kind(obj, index, "claim")
            specs.append(parse_claim(obj, index, backend.compile, backend.compile_error))
        except AllocatorInputError as exc:
            raise AllocatorInputError(str(exc), "claims") from None

    # kube-scheduler's PreFilter: every class must exist, or the pod is unschedulable everywhere.
    classes: dict[str, DeviceClassInfo] = {}
    errors: list[str] = []
    for claim in specs:
        for group in claim.requests:
            for spec in group.alternatives:
                if spec.class_name in classes:
                    continue
                raw = class_objects.get(spec.class_name)
                if raw is None:
                    message = f"request {spec.full_name}: device class {spec.class_name} does not exist"
                    if message not in errors:
                        errors.append(message)
                    continue
                try:
                    classes[spec.class_name] = parse_device_class(raw, backend.compile, backend.compile_error)
                except AllocatorInputError as exc:
                    raise AllocatorInputError(str(exc), "cluster") from None

    # Nodes: the Node objects, then nodes that only slices name.
    for _, s in slices:
        if s.node_name and s.node_name not in node_infos:
            node_infos[s.node_name] = NodeInfo(name=s.node_name, labels={}, synthetic=True)
        if s.per_device:
            for d in s.devices:
                if d.node_name and d.node_name not in node_infos:
                    node_infos[d.node_name] = NodeInfo(name=d.node_name, labels={}, synthetic=True)
    targets = list(node_infos.values())
    if node is not None:
        if node not in node_infos:
            raise AllocatorInputError(f"node {node!r} not found: no Node object or ResourceSlice names it")
        targets = [node_infos[node]]

    if errors:
        return Explanation(False, [], errors, kubernetes_version, gates)
    if not targets:
        return Explanation(
            False,
            [],
            ["no nodes: the cluster has no Node objects and no ResourceSlice names a node"],
            kubernetes_version,
            gates,
        )

    # Index the slices once: per node, shared (no nodeName or, 1.35+, counter sets), per pool.
    by_node: dict[str, list[tuple[int, Slice]]] = {}
    shared: list[tuple[int, Slice]] = []
    by_pool: dict[tuple[str, str], list[Slice]] = {}
    for order, s in slices:
        if semantics.pool_counters:  # gather_pools reads them from 1.35 only
            by_pool.setdefault(s.pool_id, []).append(s)
        if s.node_name and not (semantics.pool_counters and s.shared_counters):
            by_node.setdefault(s.node_name, []).append((order, s))
        else:
            shared.append((order, s))

    try:  # the allocated claims are the cluster's
        held, held_shares, consumed = (
            ({}, set(), {})
            if assume_empty
            else _in_use(allocated, {c.ref for c in specs if c.kind == "ResourceClaim"}, semantics.consumable_capacity)
        )
    except AllocatorInputError as exc:
        raise AllocatorInputError(str(exc), "cluster") from None
    ctx = ExplainContext(
        claims=specs,
        classes=classes,
        semantics=semantics,
        in_use=held,
        shared_allocated=held_shares,
        consumed=consumed,
        views=backend.views,
        runtime_error=backend.runtime_error,
        conversion_error=backend.conversion_error,
        read_key=backend.read_key,
        max_steps=max_steps,
        deadline_ms=deadline_ms,
    )
    results: list[NodeResult] = []
    fatal: list[str] = []
    multi = len(specs) > 1
    for info in targets:
        own = by_node.get(info.name, [])
        candidates = list(map(_SLICE, sorted(own + shared, key=_ORDER) if shared else own))
        pools = gather_pools(candidates, info, semantics, by_pool)
        outcome = NodeSearch(ctx, info, pools, _pool_notes(pools, semantics)).run()
        if outcome.fatal and outcome.fatal not in fatal:
            fatal.append(outcome.fatal)
        results.append(
            NodeResult(
                node=info.name,
                satisfiable=outcome.satisfiable,
                picks=[(specs[ci].ref, chosen) for ci, chosen in enumerate(outcome.allocation)],
                multi=multi,
                requests=outcome.requests,
                notes=outcome.reasons,
                error=outcome.fatal,
                steps=outcome.steps,
                gave_up=outcome.gave_up,
                elapsed_ms=outcome.elapsed_ms,
            )
        )
    satisfiable = not fatal and any(r.satisfiable for r in results)
    return Explanation(satisfiable, results, fatal, kubernetes_version, gates)


@dataclass(slots=True)
class Fit:
    """Does it fit now, and would it fit on an empty node (nothing allocated)?

    ``when_empty`` is ``now`` itself when nothing in the cluster holds a device or the claims
    fit now. For the controller's explanations and the webhook's warning: a claim that fits no
    empty node waits forever; one that fits an empty node waits for devices to be freed.
    """

    now: Explanation
    when_empty: Explanation

    @property
    def fits_now(self) -> bool:
        return self.now.satisfiable

    @property
    def fits_when_empty(self) -> bool:
        return self.when_empty.satisfiable

    def empty_nodes(self) -> list[str]:
        """The nodes where the claims would fit if nothing were allocated."""
        return [n.node for n in self.when_empty.nodes if n.satisfiable]

    def one_line(self) -> str:
        """``""`` when it fits now; otherwise why not now, and whether an empty node would do."""
        if self.fits_now:
            return ""
        if self.now.errors or self.now.gave_up:
            return self.now.one_line()
        if self.fits_when_empty:
            nodes = self.empty_nodes()
            shown = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
            return f"{self.now.one_line()}; would fit once devices are freed on {shown}"
        if self.when_empty.gave_up:
            return f"{self.now.one_line()}; on empty nodes: {self.when_empty.one_line()}"
        # What holds now (its counts: devices in use are in use), then why no empty node helps.
        return f"{self.now.one_line()}; does not fit even on an empty node: {self.when_empty.one_line()}"


def fit(claims: list[dict[str, Any]], cluster: list[dict[str, Any]], **options: Any) -> Fit:
    """:func:`explain` now and, if that fails and some device is allocated, on empty nodes."""
    now = explain(claims, cluster, **options)
    if now.satisfiable or now.errors or not _holds_devices(cluster):
        return Fit(now, now)
    return Fit(now, explain(claims, cluster, **{**options, "assume_empty": True}))


def _holds_devices(cluster: Sequence[Any]) -> bool:
    for obj in cluster:
        if isinstance(obj, Mapping) and obj.get("kind") == "ResourceClaim":
            status = obj.get("status")
            if isinstance(status, Mapping) and status.get("allocation"):
                return True
    return False
