"""The per-node search of the structured allocator, instrumented to explain itself.

Semantics follow ``Allocator.Allocate`` of k8s.io/dynamic-resource-allocation/structured, in the
implementation kube-scheduler runs for the version and gates (:func:`gpucluster.dra.model.variant`),
checked case by case against that code (tests/oracle):

- claims are allocated one after the other, each request after the other, one device after the
  other, trying every eligible device in pool/slice/device order and backtracking on failure
  (first solution wins);
- within one request devices are chosen as combinations in entry order (1.36 does so; 1.34 and
  1.35 walk ordered selections, and where every constraint is a property of the set the first
  ordered selection that succeeds is the first combination). Where the order matters upstream -
  its distinctAttribute remembers one value per request, its counters stay taken by a device a
  taint or constraint refuses (1.34, 1.35), 1.34 checks capacity against the device at the
  request's device index - the search walks ordered selections, unpruned, as upstream does;
- ``firstAvailable`` tries subrequests in order; a subrequest that would exceed the 32-results
  limit of a claim makes the search try the next one; in 1.34 and 1.35, when the first two both ask for
  All devices, the second gets the devices the first one's class and selectors match (upstream
  checks it under the first one's key of its device-match cache), and in 1.34 an All subrequest after
  the first keeps only its first device, the first subrequest going on from there (upstream's
  recursion drops the subrequest index);
- ``allocationMode: All`` fixes the devices up front; one of them in use, tainted or out of
  counters means no solution, one violating a claim constraint is an error;
- a device in use (allocated to another claim, or being allocated for this pod) is skipped
  before selectors are evaluated; requests with ``adminAccess`` ignore other claims' use;
- selectors: the class ones first, then the request ones; a CEL runtime error aborts, and so
  does a device attribute CEL cannot convert (``DeviceMatches`` converts them all first);
- DRAConsumableCapacity: every device is checked against a request's ``capacity.requests``; a
  device that allows multiple allocations is never "in use" in the search and serves requests
  while its capacity lasts (with what other claims' ``shareID`` results consume), one request
  several times in 1.34 and 1.35 (1.36 goes on after the device chosen); its counters are
  consumed by its first allocation only;
- partitionable devices consume shared counters (per slice in 1.34, per pool from 1.35);
- taints must be tolerated (1.35+: only NoSchedule/NoExecute matter);
- ``matchAttribute`` / ``distinctAttribute`` constraints, scoped by ``requests``; with
  DRAListTypeAttributes on (1.36 alpha, upstream's "experimental" allocator) a value is a set (a
  list attribute, or a scalar as one element): ``matchAttribute`` needs an element common to all
  chosen devices, ``distinctAttribute`` pairwise disjoint sets. Where the node has no device
  with a list (or otherwise non-scalar) value for the attribute the two are the same, and the
  scalar constraint, with its pruning, is used.

Besides the answer, every considered device gets the first reason it cannot be used.

The search is pruned where upstream's would only fail more slowly: a request stops as soon as the
devices left in entry order (statically usable, and for a ``matchAttribute`` already fixed, with
that value) cannot fill the remaining count, a device that would fix a ``matchAttribute``
value too few remaining devices share is passed over, and devices consuming shared counters stop
when the fewest of them that must still be chosen cannot fit what is left of a counter, or of
all counters of their scope together. With shared devices, a request starts only when the
capacity left on the usable devices can host the allocations the pod still needs (each device
counted at the smallest amount any of those requests asks of it); a ``matchAttribute`` that
every device a request may take meets with one value, and binds no other request, is left out.
Pruning never hides a CEL runtime error
upstream would meet: where the skipped part of the search holds a device whose selector fails,
the search fails with that error as upstream does. Every node's search also has a deadline (the
scheduler's filter timeout): past it the node's answer says "gave up after N ms on node X".

This module holds the search itself: the order devices are tried in, allocating a device and
taking it back, backtracking. What it asks along the way lives in modules of its own:
the selectors (:mod:`gpucluster.dra.selection`),
the constraints (:mod:`gpucluster.dra.constraints`), shared counters and consumable capacity
(:mod:`gpucluster.dra.counterledger`, :mod:`gpucluster.dra.capacityledger`), the pruning bounds
(:mod:`gpucluster.dra.pruning`) and the explanation recorder (:mod:`gpucluster.dra.explanation`).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from itertools import repeat
from operator import attrgetter

from gpucluster.dra import capacity
from gpucluster.dra.capacityledger import CapacityLedger
from gpucluster.dra.claims import ClaimSpec, RequestSpec
from gpucluster.dra.constraints import (
    Constraint,
    DistinctAttribute,
    MatchAttribute,
    NodeValues,
    constraint_for_node,
    static_reason,
)
from gpucluster.dra.counterledger import COUNTERS_GATED, CounterLedger
from gpucluster.dra.explanation import NodeOutcome, Recorder
from gpucluster.dra.model import ALLOCATION_RESULTS_MAX_SIZE, DeviceKey, NodeInfo
from gpucluster.dra.pools import Device, Pool
from gpucluster.dra.pruning import Pruning
from gpucluster.dra.searchtypes import CelFailure, Entry, ExplainContext, FatalError, Req, StaticResult, request_uid
from gpucluster.dra.selection import NO_BINDING_CONDITIONS, DeviceSelection

_KNOWN_TAINT_EFFECTS = ("NoSchedule", "NoExecute")

_IDENT = attrgetter("ident")


class _MaxSizeExceeded(Exception):
    pass


class _StepsExceeded(Exception):
    pass


class _DeadlineExceeded(Exception):
    pass


class NodeSearch:
    """Allocate the claims of one pod on one node, and explain the outcome."""

    def __init__(self, ctx: ExplainContext, node: NodeInfo, pools: list[Pool], notes: list[str]) -> None:
        self.ctx = ctx
        self.sem = ctx.semantics
        self.node = node
        self.pools = pools
        self.notes = notes
        entries: list[Entry] = []
        skip_unusable = self.sem.skip_unusable_pools
        for pool in pools:
            if pool.incomplete or pool.invalid:
                if skip_unusable:
                    continue
                if pool.invalid:
                    entries.append(Entry(len(entries), pool, None, None, pool.id))
                    continue
            for s in pool.slices:
                # Entry(index, pool, slice, device, device.ident) for every device, built in C.
                start = len(entries)
                entries.extend(
                    map(
                        Entry,
                        range(start, start + len(s.devices)),
                        repeat(pool),
                        repeat(s),
                        s.devices,
                        map(_IDENT, s.devices),
                    )
                )
        self.entries = entries
        # DRAConsumableCapacity: a device that allows multiple allocations is never "in use" by
        # this search; it serves requests while its capacity lasts, one request more than once.
        if self.sem.consumable_capacity:
            self.shared = [e.device is not None and e.device.multi for e in entries]
        else:
            self.shared = [False] * len(entries)
        self.any_shared = True in self.shared
        # Upstream's counter leak (Semantics.counters_leak) makes the search's result depend on
        # every device it visits, in its order: then the search is upstream's plain depth-first
        # one, without the pruning that skips visits, and a device refused by a taint or a
        # constraint after its counters were taken keeps them.
        leak = self.sem.counters_leak and self.sem.partitionable_devices
        consumers = [e.device for e in entries if e.device is not None and e.device.consumes] if leak else []
        self.leaky = (
            leak
            and bool(consumers)
            and (
                any(c.constraints for c in ctx.claims) or (self.sem.device_taints and any(d.taints for d in consumers))
            )
        )
        self.leak_on_visit: set[tuple[int, int]] = set()  # (request uid, entry index)
        # Semantics.capacity_wrong_device with DRAConsumableCapacity on: the capacity check
        # depends on the device's place in the request, so it is made as each device is tried.
        self.wrong_device = self.sem.capacity_wrong_device and self.sem.consumable_capacity
        # Upstream's plain search, unpruned, where its answer depends on the order of visits.
        self.plain_search = self.leaky or self.wrong_device
        # Where the order of a request's devices can change the answer (upstream's
        # distinctAttribute remembers the last value per request; leaked counters), 1.34 and
        # 1.35 are searched as upstream does: every ordered selection, not only combinations.
        self.permute = False
        self.reqs: list[Req] = []
        self.groups: list[list[list[Req]]] = []  # claim -> request -> alternatives
        self.constraints: list[list[Constraint]] = []
        # The attribute values the constraints read, per entry (built with the requests).
        self.values: NodeValues | None = None
        self.selection = DeviceSelection(ctx)
        self.recorder = Recorder()  # why devices were refused, for the explanation
        self.counters = CounterLedger(ctx)
        self.capacity = CapacityLedger(ctx, entries)
        self.pruning = Pruning(ctx, entries, self.shared, self.groups, self.counters, self.capacity, self.recorder)
        self.steps = 0
        self.give_up_at = float("inf")
        self.started = 0.0
        # The search's state: what is being allocated (counters and capacity used: the ledgers).
        self.allocating: dict[DeviceKey, set[int]] = {}
        self.holder: dict[DeviceKey, Req] = {}
        self.selected: dict[tuple[int, int], int] = {}
        self.results: list[list[tuple[Req, Entry, capacity.Demand | None]]] = [[] for _ in self.ctx.claims]

    # -- setup ---------------------------------------------------------------------------------

    def _capacity_id(self, uid: int, spec: RequestSpec) -> int:
        if spec.capacity is None:
            return 0
        found = self.ctx.capacity_by_request.get(uid)
        if found is None:
            ids = self.ctx.capacity_ids
            found = ids.get(spec.capacity)
            if found is None:
                found = ids[spec.capacity] = len(ids) + 1
            self.ctx.capacity_by_request[uid] = found
        return found

    def _build_requests(self) -> None:
        devices: list[Device] | None = None
        for ci, claim in enumerate(self.ctx.claims):
            if claim.constraints and self.values is None:
                self.values = self.pruning.values = NodeValues([e.device for e in self.entries])
                # The set forms look at every device of the node (DRAListTypeAttributes).
                if self.sem.list_type_attributes:
                    devices = [e.device for e in self.entries if e.device is not None]
            constraints = (
                [constraint_for_node(c, self.sem, devices or []) for c in claim.constraints]
                if claim.constraints
                else []
            )
            self.constraints.append(constraints)
            claim_groups: list[list[Req]] = []
            for ri, group in enumerate(claim.requests):
                alternatives = []
                for si, spec in enumerate(group.alternatives):
                    req = Req(
                        claim_index=ci,
                        request_index=ri,
                        sub_index=si,
                        spec=spec,
                        cls=self.ctx.classes[spec.class_name],
                        uid=request_uid(ci, ri, si),
                        is_sub=group.exactly is None,
                        constraints=[c for c in constraints if c.spec.applies_to(spec)] if constraints else [],
                        capacity_id=self._capacity_id(request_uid(ci, ri, si), spec),
                    )
                    self.reqs.append(req)
                    alternatives.append(req)
                if (
                    self.sem.second_all_subrequest_reuses_first
                    and len(alternatives) > 1
                    and alternatives[0].spec.mode == alternatives[1].spec.mode == "All"
                ):
                    first, second = alternatives[0], alternatives[1]
                    second.matched_as = first
                    self.notes.append(
                        f"request {second.spec.full_name}: Kubernetes {self.sem.version} gives it the devices the class and "
                        f"selectors of {first.spec.full_name} match (both ask for all devices), its own are not "
                        "evaluated"
                    )
                claim_groups.append(alternatives)
            self.groups.append(claim_groups)

    # -- static reasons --------------------------------------------------------------------------

    def _taint_reason(self, req: Req, d: Device) -> str:
        if not self.sem.device_taints:
            return ""  # DRADeviceTaints off: the allocator does not look at taints
        for taint in d.taints:
            if self.sem.only_known_taint_effects and taint.effect not in _KNOWN_TAINT_EFFECTS:
                continue
            if not any(t.tolerates(taint.key, taint.value, taint.effect) for t in req.spec.tolerations):
                return f"taint {taint} not tolerated"
        return ""

    def _static(self, req: Req, entry: Entry, all_mode: bool, verdicts: list[StaticResult]) -> StaticResult:
        """The first reason a device can never serve ``req`` on this node, whatever else is chosen
        (``verdicts``: the selectors', for the devices of the entry's slice).

        The order is the allocator's: in use (for ExactCount), binding conditions, class
        selectors, request selectors, per-device node selection, then (allocateDevice) in use
        (for All), counters, taints, constraints.
        """
        d, s = entry.device, entry.slice
        if d is None or s is None:
            return f"pool invalid: {entry.pool.invalid}"
        in_use = self.ctx.in_use
        check_use = not req.spec.admin_access and d.key in in_use
        if check_use and not all_mode:
            return f"in use by {in_use[d.key]}"
        result = verdicts[d.index]
        if req.matched_as is not None and isinstance(result, str) and result != NO_BINDING_CONDITIONS:
            result = f"subrequest {req.matched_as.spec.name}'s {result}"
        if all_mode:
            req.selected[entry.index] = result  # _prepare_all's members
        if result is not None:
            return result
        if self.sem.consumable_capacity and not all_mode:
            reason = self.capacity.reason(req, entry)
            if reason:
                return reason
        if s.per_device and not d.available_on(self.node):
            return "not available on this node (perDeviceNodeSelection)"
        if check_use:
            return f"in use by {in_use[d.key]}"
        if not d.plain:
            reason = self.counters.alone(entry) if d.consumes and not self._counters_taken(entry) else ""
            if reason:
                return reason
            reason = self._taint_reason(req, d)
            if reason:
                if self.leaky and d.consumes:
                    self.leak_on_visit.add((req.uid, entry.index))
                return reason
        if req.constraints:
            reason = static_reason(req.constraints, d)
            if reason and self.leaky and d.consumes:
                self.leak_on_visit.add((req.uid, entry.index))
            return reason or None
        return None

    def _counters_taken(self, entry: Entry) -> bool:
        """Whether a shared device's counters are consumed already: once by the first of its
        allocations (``allocateDevice`` skips the check while some of its capacity is in use)."""
        d = entry.device
        assert d is not None
        if not self.sem.counters_once_per_shared_device:
            return False
        return self.shared[entry.index] and (d.key in self.ctx.consumed or self.capacity.shares.get(d.key, 0) > 0)

    # -- allocation of one device ------------------------------------------------------------------

    def _note_in_use(self, req: Req, entry: Entry) -> None:
        assert entry.device is not None
        holder = self.holder.get(entry.device.key)
        if holder is not None and holder is not req:
            self.recorder.note(req, entry, f"chosen for request {holder.spec.full_name}")

    def _allocate_device(self, req: Req, entry: Entry, must: bool, slot: int = 0) -> bool:
        """``allocateDevice``: availability, counters, taints, constraints, capacity; records the device.

        ``must`` is for allocationMode All, where the devices were not filtered by
        :meth:`_static` and a violated constraint is an error.
        """
        d = entry.device
        assert d is not None
        ci = req.claim_index
        shared = self.shared[entry.index]
        if self.wrong_device and shared and not must:
            # allocateOne checks the device's own capacity, with this search's allocations of it,
            # before allocateDevice (whose check reads another device).
            why = self.capacity.over_now(req, entry)
            if why:
                self.recorder.note(req, entry, why + " after the allocations already chosen")
                return False
        if must:
            if shared:
                # Never marked as being allocated; only a claim holding it whole keeps it.
                busy = not req.spec.admin_access and d.key in self.ctx.in_use
            else:
                claims = self.allocating.get(d.key)
                if req.spec.admin_access:
                    busy = claims is not None and ci in claims
                else:
                    busy = bool(claims) or d.key in self.ctx.in_use
            if busy:
                self._note_in_use(req, entry)
                return False
        counters = bool(d.consumes) and not self._counters_taken(entry)
        if counters:
            reason = self.counters.take(entry) if self.sem.partitionable_devices else COUNTERS_GATED
            if reason:
                self.recorder.note(req, entry, reason)
                return False
        elif d.consumes and not self.sem.partitionable_devices:
            return False
        if must and d.taints:
            reason = self._taint_reason(req, d)
            if reason:
                if counters and not self.leaky:
                    self.counters.release(entry)
                return False
        constraints = req.constraints
        for i, c in enumerate(constraints):
            reason = c.add(d, req.request_index)
            if reason:
                for prev in constraints[:i]:
                    prev.remove(d, req.request_index)
                if counters and not self.leaky:
                    self.counters.release(entry)
                if must:
                    claim = self.ctx.claims[ci]
                    raise FatalError(
                        f"claim {claim.ref}, request {req.spec.name}: cannot add device {entry.id} "
                        "because a claim constraint would not be satisfied"
                    )
                self.recorder.note(req, entry, reason)
                return False
        if self.wrong_device:
            reason = self.capacity.wrong_device(req, entry, slot)
            if reason:
                for c in constraints:
                    c.remove(d, req.request_index)
                if counters and not self.leaky:
                    self.counters.release(entry)
                self.recorder.note(req, entry, reason)
                return False
        taken: capacity.Demand | None = None
        if shared:
            taken, reason = self.capacity.take(req, entry)
            if taken is None:
                for c in constraints:
                    c.remove(d, req.request_index)
                if counters:
                    self.counters.release(entry)
                self.recorder.note(req, entry, reason)
                return False
        else:
            claims = self.allocating.get(d.key)
            if claims is None:
                self.allocating[d.key] = {ci}
            else:
                claims.add(ci)
            self.holder[d.key] = req
        self.results[ci].append((req, entry, taken))
        return True

    def _deallocate(self, req: Req, entry: Entry) -> None:
        d = entry.device
        assert d is not None
        for c in req.constraints:
            c.remove(d, req.request_index)
        taken = self.results[req.claim_index].pop()[2]
        if taken is not None:
            self.capacity.release(entry, taken)
            if d.consumes and not self._counters_taken(entry):
                self.counters.release(entry)  # its last allocation in this search
        else:
            self.allocating[d.key].discard(req.claim_index)
            if self.holder.get(d.key) is req:
                del self.holder[d.key]
            if d.consumes:
                self.counters.release(entry)

    # -- the recursion ---------------------------------------------------------------------------

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        """``allocateOne``: find a device for slot ``di`` of request ``ri`` (subrequest ``si``)."""
        self.steps += 1
        if self.steps > self.ctx.max_steps:
            raise _StepsExceeded
        if not self.steps & 255 and time.perf_counter() > self.give_up_at:
            raise _DeadlineExceeded
        if ci >= len(self.groups):
            return True
        if ri >= len(self.groups[ci]):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, 0)
            except _MaxSizeExceeded:
                # Another subrequest choice in an earlier claim may need fewer devices.
                return False
        alternatives = self.groups[ci][ri]
        req = alternatives[si]
        if req.is_sub and not in_sub:
            all_exceeded = True
            for sub_index in range(len(alternatives)):
                try:
                    done = self._allocate_one(ci, ri, sub_index, di, True, 0)
                except _MaxSizeExceeded:
                    continue
                all_exceeded = False
                if done:
                    self.selected[(ci, ri)] = sub_index
                    return True
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        all_mode = req.spec.mode == "All"
        if all_mode and not req.all_devices:
            return False
        if di >= req.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + req.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded
        if (
            self.any_shared
            and di == 0
            and not all_mode
            and not self.plain_search
            and self.pruning.slots_short(ci, ri, req, di, self.allocating, len(self.results[ci]))
        ):
            return False  # checked as each request starts: where several requests multiply the work

        if all_mode:
            entry = req.all_devices[di]
            if not self._allocate_device(req, entry, must=True, slot=di):
                return False
            # 1.34: the next device is looked for as the first subrequest's (Semantics).
            next_si = 0 if self.sem.all_subrequest_goes_on_as_first else si
            try:
                done = self._allocate_one(ci, ri, next_si, di + 1, in_sub, 0)
            except BaseException:
                self._deallocate(req, entry)
                raise
            if not done:
                self._deallocate(req, entry)
            return done

        entries = self.entries
        static = req.static
        allocating = self.allocating
        shared = self.shared
        admin = req.spec.admin_access
        need = req.num_devices - di
        usable = req.usable
        # matchAttribute values fixed by devices already chosen, and constraints this device fixes.
        fixed: list[list[int]] = []
        unfixed: list[int] = []
        if req.by_value:
            for k, positions in req.by_value.items():
                c = req.constraints[k]
                assert isinstance(c, MatchAttribute)
                if c.count:
                    fixed.append(positions.get(c.value, []) if c.value is not None else [])
                else:
                    unfixed.append(k)
        if req.consumption and need > 1 and start < len(entries) and not self.plain_search:
            why = self.counters.short(req, entries, start, need)
            if why:
                self.pruning.pruned(ci, req, start, allocating)
                for i in req.consumption:
                    if i >= start:
                        self.recorder.note(req, entries[i], why)
                return False
        for index in range(start, len(entries)):
            short = usable[index] < need and not self.plain_search
            if fixed and not short and not self.plain_search:
                for p in fixed:
                    if len(p) - bisect_left(p, index) < need:
                        short = True
                        break
            if short:
                self.pruning.pruned(ci, req, index, allocating)
                if fixed:
                    self.recorder.note_mismatches(req, entries, index)
                break
            entry = entries[index]
            d = entry.device
            if d is None:
                # 1.34: reaching an invalid pool aborts.
                raise FatalError(f"pool {entry.pool.name} is invalid: {entry.pool.invalid}")
            # In use? Devices of other claims are "in use" in ``static`` already.
            claims = allocating.get(d.key)
            if claims and (not admin or ci in claims):
                self._note_in_use(req, entry)
                continue
            result = static[index]
            if result is not None:
                if type(result) is CelFailure:
                    raise FatalError(result.message)
                if self.leaky and (req.uid, index) in self.leak_on_visit and not shared[index]:
                    self.counters.take(entry)  # upstream keeps them when the refusal comes later
                continue
            if unfixed and need > 1 and not self.plain_search:
                why = self.pruning.too_few_share(req, index, need, unfixed)
                if why:
                    self.recorder.note(req, entry, why)
                    self.pruning.pruned(ci, req, index + 1, allocating)
                    continue
            # Device.plain: nothing to check (no taints, no counters, no multiple allocations).
            full = not d.plain or bool(req.constraints) or self.wrong_device
            if full and not self._allocate_device(req, entry, must=False, slot=di):
                continue
            if not full:
                # Nothing to check: record it (the fast path of _allocate_device).
                if claims is None:
                    allocating[d.key] = {ci}
                else:
                    claims.add(ci)
                self.holder[d.key] = req
                self.results[ci].append((req, entry, None))
            try:
                # 1.34 and 1.35 try every device again for the next one of the request, so a
                # shared device may serve it too; 1.36 goes on after the device just chosen.
                again = shared[index] and not self.sem.combinations
                after = 0 if self.permute else index if again else index + 1
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, after)
            except BaseException:
                self._deallocate(req, entry)
                raise
            if done:
                return True
            self._deallocate(req, entry)
        return False

    # -- driver ------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """``Allocate`` before the search: requests, "All" devices, the 32-results limit."""
        # Explanations first: they never raise, CEL errors are kept for when the search meets them.
        for req in self.reqs:
            all_mode = req.spec.mode == "All"
            if all_mode:
                req.selected = [None] * len(self.entries)
            req.static = self._statics(req, all_mode)
            if not all_mode:
                self.pruning.index(req)
        for claim in self.ctx.claims:
            for group in claim.requests:
                if group.exactly is None and not self.sem.prioritized_list:
                    raise FatalError(
                        f"claim {claim.ref}, request {group.name}: has subrequests, but the DRAPrioritizedList "
                        "feature is disabled"
                    )
                for spec in group.alternatives:
                    if spec.capacity is not None and not self.sem.consumable_capacity and self.sem.sharing_code:
                        which = f"subrequest {spec.name}" if spec.parent else f"request {spec.name}"
                        raise FatalError(
                            f"claim {claim.ref}, {which}: has capacity requests, but the DRAConsumableCapacity "
                            "feature is disabled"
                        )
                    if spec.admin_access_set and not self.sem.admin_access:
                        raise FatalError(
                            f"claim {claim.ref}, request {spec.name}: admin access is requested, but the feature "
                            "is disabled"
                        )
            if not self.sem.sharing_code:
                for i, constraint in enumerate(claim.constraints):
                    if constraint.kind == "distinctAttribute":
                        # An implementation without the DRAConsumableCapacity code knows only
                        # matchAttribute.
                        raise FatalError(
                            f"claim {claim.ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                        )
        for ci, claim in enumerate(self.ctx.claims):
            minimum = 0
            for alternatives in self.groups[ci]:
                fewest: int | None = None
                for req in alternatives:
                    if req.spec.mode == "All":
                        self._prepare_all(claim, req)
                        self.pruning.drop_settled(req, [e.index for e in req.all_devices])
                    else:
                        req.num_devices = req.spec.count
                    fewest = req.num_devices if fewest is None else min(fewest, req.num_devices)
                minimum += fewest or 0
            if minimum > ALLOCATION_RESULTS_MAX_SIZE:
                raise FatalError(
                    f"claim {claim.ref}: number of requested devices {minimum} exceeds the claim limit "
                    f"of {ALLOCATION_RESULTS_MAX_SIZE}"
                )

    def _statics(self, req: Req, all_mode: bool) -> list[StaticResult]:
        """:meth:`_static` of every entry, the selectors' verdicts a slice at a time (a slice's
        devices are consecutive entries, in slice order)."""
        static: list[StaticResult] = []
        entries = self.entries
        only_request = len(self.reqs) == 1
        # Where _static would say what the selectors say, then what the constraints do: no
        # device in use, nothing about the request or the semantics that looks at more.
        quick = (
            req.matched_as is None
            and not self.sem.consumable_capacity
            and (not self.ctx.in_use or req.spec.admin_access)
        )
        constraints = req.constraints
        # The constraints' static reasons of every entry at once (None: no device has one).
        reasons = self.values.static_reasons(constraints) if quick and constraints and self.values else None
        i = 0
        while i < len(entries):
            s = entries[i].slice
            if s is None:
                static.append(self._static(req, entries[i], all_mode, []))
                i += 1
                continue
            verdicts = self.selection.results(req.matched_as or req, s, only_request=only_request)
            if quick and s.plain and not s.per_device:
                # Plain devices: no counters, taints or shares to look at.
                if all_mode:
                    req.selected[i : i + len(verdicts)] = verdicts  # _prepare_all's members
                if reasons is not None:
                    for j, verdict in enumerate(verdicts, i):
                        static.append(verdict if verdict is not None else reasons[j] or None)
                else:
                    static.extend(verdicts)
            else:
                for e in entries[i : i + len(verdicts)]:
                    static.append(self._static(req, e, all_mode, verdicts))
            i += len(verdicts)
        return static

    def _prepare_all(self, claim: ClaimSpec, req: Req) -> None:
        for pool in self.pools:
            if pool.incomplete:
                raise FatalError(
                    f"claim {claim.ref}, request {req.spec.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently being updated"
                )
            if pool.invalid:
                raise FatalError(
                    f"claim {claim.ref}, request {req.spec.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently invalid"
                )
        members = []
        for entry in self.entries:
            assert entry.device is not None and entry.slice is not None
            result = req.selected[entry.index]  # the selectors' verdict, from _static
            if isinstance(result, CelFailure):
                raise FatalError(result.message)
            if result is not None:
                continue
            if entry.slice.per_device and not entry.device.available_on(self.node):
                continue
            if self.sem.consumable_capacity and self.capacity.reason(req, entry):
                continue  # validateDeviceRequest: "all" means all devices that can serve it
            members.append(entry)
        req.all_devices = members
        req.num_devices = len(members)

    def _search(self) -> bool:
        try:
            return self._allocate_one(0, 0, 0, 0, False, 0)
        except _MaxSizeExceeded:
            return False

    def run(self) -> NodeOutcome:
        self._build_requests()
        self.permute = not self.sem.combinations and (
            self.plain_search
            or (any(self.constraints) and any(isinstance(c, DistinctAttribute) for cs in self.constraints for c in cs))
        )
        fatal = ""
        gave_up = ""
        done = False
        reasons = list(self.notes)
        self.started = time.perf_counter()
        if self.ctx.deadline_ms is not None:
            self.give_up_at = self.started + self.ctx.deadline_ms / 1000
        try:
            self._prepare()
            done = self._search()
        except FatalError as exc:
            fatal = str(exc)
        except _StepsExceeded:
            gave_up = f"timed out trying to allocate devices (search stopped after {self.ctx.max_steps} steps)"
            reasons.append(gave_up)
        except _DeadlineExceeded:
            elapsed = (time.perf_counter() - self.started) * 1000
            gave_up = f"gave up after {elapsed:.0f} ms on node {self.node.name}"
            reasons.append(gave_up)
        if fatal:
            reasons.append(fatal)
        elif not done and self.recorder.slot_note:
            reasons.append(self.recorder.slot_note)
        if not fatal and not done and self.sem.skip_unusable_pools and any(p.invalid for p in self.pools):
            reasons.append("invalid resource pools were encountered")
        if not self.entries and not fatal and not done:
            reasons.append("no devices are published for this node")
        satisfied = done and not fatal
        allocation: list[list[tuple[str, str, str, str, dict[str, str] | None]]] = []
        if satisfied:
            for chosen in self.results:
                allocation.append(
                    [
                        (req.spec.full_name, *entry.device.key, taken.consumed_capacity() if taken else None)
                        for req, entry, taken in chosen
                        if entry.device
                    ]
                )
        return NodeOutcome(
            node=self.node.name,
            satisfiable=satisfied,
            allocation=allocation,
            reasons=reasons,
            requests=self.recorder.reports(self.ctx, self.reqs, self.entries, self.selected, satisfied),
            fatal=fatal,
            steps=self.steps,
            gave_up=gave_up,
            elapsed_ms=(time.perf_counter() - self.started) * 1000,
        )
