"""Consumable capacity (DRAConsumableCapacity) as one node's search uses it.

:mod:`gpucluster.dra.capacity` says what one allocation takes of a device; this keeps what
the allocations of one search take, next to what other claims' shared allocations consume,
so the search can ask whether one more allocation fits, and take it back when it backtracks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from gpucluster.dra import capacity
from gpucluster.dra.model import DeviceKey
from gpucluster.dra.pools import has_request_policy
from gpucluster.dra.searchtypes import Entry, ExplainContext, FatalError, Req


class CapacityLedger:
    """What one node's search has allocated of shared devices' capacity."""

    __slots__ = ("consumed", "demands", "entries", "entry_at", "reasons", "shares", "used", "version")

    def __init__(self, ctx: ExplainContext, entries: Sequence[Entry]) -> None:
        self.entries = entries
        self.version = ctx.semantics.version
        # What other claims' shared allocations consume of a device, by capacity name.
        self.consumed: Mapping[DeviceKey, Mapping[str, Fraction]] = ctx.consumed
        # (capacity requests, entry index) -> what one allocation takes of the device, or why
        # none can.
        self.demands: dict[tuple[int, int], capacity.Demand | str] = {}
        self.reasons: dict[tuple[int, int], str] = {}  # the same key: reason
        self.used: dict[DeviceKey, dict[str, Fraction]] = {}  # shared devices
        self.shares: dict[DeviceKey, int] = {}  # shared device -> allocations chosen in this search
        self.entry_at: dict[tuple[int, int], Entry] | None = None  # see wrong_device

    def demand(self, req: Req, entry: Entry) -> capacity.Demand | str:
        # Requests asking the same capacity share what one allocation takes of a device.
        key = (req.capacity_id, entry.index)
        found = self.demands.get(key)
        if found is None:
            s, d = entry.slice, entry.device
            assert s is not None and d is not None
            found = self.demands[key] = capacity.demand(s.raw["spec"]["devices"][d.index], s.driver, req.spec.capacity)
        return found

    def reason(self, req: Req, entry: Entry) -> str:
        """Why one allocation of the device cannot serve the request's capacity next to what other
        claims' shared allocations consume (``CmpRequestOverCapacity``, DRAConsumableCapacity on)."""
        d = entry.device
        assert d is not None
        if not d.multi and req.spec.capacity is None:
            policies = d.capacity_policies
            if policies is None:
                s = entry.slice
                assert s is not None
                policies = d.capacity_policies = has_request_policy(s.raw["spec"]["devices"][d.index].get("capacity"))
            if not policies:
                return ""  # takes every capacity whole, and nothing else shares the device: it fits
        key = (req.capacity_id, entry.index)
        reason = self.reasons.get(key)
        if reason is None:
            found = self.demand(req, entry)
            reason = found if isinstance(found, str) else found.over(self.consumed.get(d.key))
            self.reasons[key] = reason
        return reason

    def over_now(self, req: Req, entry: Entry) -> str:
        """Why one more allocation of the device cannot serve the request next to what other
        claims' allocations and this search's consume of it (``CmpRequestOverCapacity`` with the
        allocating capacity), "" if it can."""
        d = entry.device
        assert d is not None
        found = self.demand(req, entry)
        if isinstance(found, str):
            return found
        used = self.used.get(d.key)
        return found.over(used if used is not None else self.consumed.get(d.key))

    def take(self, req: Req, entry: Entry) -> tuple[capacity.Demand | None, str]:
        """Reserve what this allocation of a shared device consumes; (None, why) if it does not fit."""
        d = entry.device
        assert d is not None
        found = self.demand(req, entry)
        if isinstance(found, str):
            return None, found
        used = self.used.get(d.key)
        if used is None:
            used = self.used[d.key] = dict(self.consumed.get(d.key, {}))
        why = found.over(used)
        if why:
            return None, why + " after the allocations already chosen"
        for key, amount in found.amounts.items():
            used[key] = used.get(key, Fraction(0)) + amount
        self.shares[d.key] = self.shares.get(d.key, 0) + 1
        return found, ""

    def wrong_device(self, req: Req, entry: Entry, slot: int) -> str:
        """1.34's capacity check, made against device ``slot`` of the chosen device's slice (the
        request's device index), with what that device's allocations consume."""
        s = entry.slice
        assert s is not None
        raw = s.raw["spec"]["devices"]
        if slot >= len(raw):
            raise FatalError(
                f"kube-scheduler {self.version} panics here: its capacity check reads device #{slot} of "
                f"ResourceSlice {s.name}, which has {len(raw)} (upstream's CmpRequestOverCapacity)"
            )
        if self.entry_at is None:
            self.entry_at = {
                (id(e.slice), e.device.index): e for e in self.entries if e.slice is not None and e.device is not None
            }
        other = self.entry_at.get((id(s), slot))
        if other is None:
            return ""
        why = self.over_now(req, other)
        if not why:
            return ""
        return f"{why} (Kubernetes {self.version} checks the capacity of {other.id}, device #{slot} of the slice)"

    def release(self, entry: Entry, taken: capacity.Demand) -> None:
        """Give back what :meth:`take` reserved for this allocation."""
        assert entry.device is not None
        used = self.used[entry.device.key]
        for key, amount in taken.amounts.items():
            used[key] -= amount
        self.shares[entry.device.key] -= 1
