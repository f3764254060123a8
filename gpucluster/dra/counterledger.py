"""Shared counters (DRAPartitionableDevices) as one node's search consumes them.

A device that consumes counters takes them from its scope (the slice in 1.34, the pool from
1.35): what other claims' devices leave of each counter set is worked out once per scope, and
what the devices chosen so far consume is kept next to it, so a device is checked against both.
The bound that stops a request when the devices left cannot fit what remains of a counter is
here too: it is arithmetic over the same amounts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from gpucluster.dra.quantity import Quantity
from gpucluster.dra.searchtypes import Entry, ExplainContext, Req

COUNTERS_GATED = "consumes counters, but DRAPartitionableDevices is off"


class CounterLedger:
    """What is left of each counter scope, and what this search's devices consume of it."""

    __slots__ = ("_available", "_consumed", "ctx", "sem")

    def __init__(self, ctx: ExplainContext) -> None:
        self.ctx = ctx
        self.sem = ctx.semantics
        self._consumed: dict[object, dict[tuple[str, str], Fraction]] = {}
        self._available: dict[object, dict[tuple[str, str], Fraction]] = {}

    def scope(self, entry: Entry) -> object:
        """What the entry's counters belong to: 1.34, its slice; 1.35+, its pool."""
        return entry.pool if self.sem.pool_counters else entry.slice

    def available(self, entry: Entry) -> dict[tuple[str, str], Fraction]:
        """What other claims' devices leave of the counters of the entry's scope."""
        scope = self.scope(entry)
        have = self._available.get(scope)
        if have is not None:
            return have
        if self.sem.pool_counters:
            sets = entry.pool.counter_sets
            slices = [*entry.pool.slices, *entry.pool.other_slices]
        else:
            assert entry.slice is not None
            sets = entry.slice.shared_counters
            slices = [entry.slice]
        have = {(set_name, c): v for set_name, counters in sets.items() for c, v in counters.items()}
        in_use = self.ctx.in_use
        shared = self.ctx.shared_allocated if self.sem.counters_once_per_shared_device else frozenset()
        for s in slices:
            for d in s.devices:
                if d.key not in in_use and d.key not in shared:
                    continue
                for set_name, counters in d.consumes:
                    for c, v in counters:
                        if (set_name, c) in have:
                            have[(set_name, c)] -= v
        self._available[scope] = have
        return have

    def alone(self, entry: Entry) -> str:
        """Why the device alone needs more of a counter than other claims left ("" if it fits)."""
        assert entry.device is not None
        if not self.sem.partitionable_devices:
            return COUNTERS_GATED
        have = self.available(entry)
        want: dict[tuple[str, str], Fraction] = {}
        for set_name, counters in entry.device.consumes:
            for c, v in counters:
                want[(set_name, c)] = want.get((set_name, c), Fraction(0)) + v
        for key, available in have.items():
            if available < want.get(key, 0):
                return f"counter {key[0]}/{key[1]} exhausted"
        return ""

    def take(self, entry: Entry) -> str:
        """Reserve the device's counters; on failure nothing stays reserved."""
        assert entry.device is not None
        have = self.available(entry)
        scope = self.scope(entry)
        used = self._consumed.setdefault(scope, {})
        for set_name, counters in entry.device.consumes:
            for c, v in counters:
                used[(set_name, c)] = used.get((set_name, c), Fraction(0)) + v
        for key, available in have.items():
            if available < used.get(key, 0):
                self.release(entry)
                return f"counter {key[0]}/{key[1]} exhausted together with the devices already chosen"
        return ""

    def release(self, entry: Entry) -> None:
        """Give back what :meth:`take` reserved for the device."""
        assert entry.device is not None
        used = self._consumed[self.scope(entry)]
        for set_name, counters in entry.device.consumes:
            for c, v in counters:
                used[(set_name, c)] -= v

    def short(self, req: Req, entries: Sequence[Entry], start: int, need: int) -> str:
        """Why no ``need`` usable entries from ``start`` on fit the shared counters left ("" if
        they may): a lower bound on what they consume, per counter scope.

        A device is checked against every counter of its scope (slice, or pool from 1.35) once
        it consumes any, so for a scope whose consumers must supply ``m`` of the devices (the
        others cannot supply them all), the ``m`` smallest amounts of each counter among its
        consumers must fit what is left of that counter.
        """
        static = req.static
        candidates = 0
        by_scope: dict[object, list[int]] = {}
        consumption = req.consumption
        for i in range(start, len(entries)):
            if static[i] is not None:
                continue
            candidates += 1
            found = consumption.get(i)
            if found is not None:
                by_scope.setdefault(found[0], []).append(i)
        for scope, members in by_scope.items():
            m = need - (candidates - len(members))
            if m <= 0:
                continue
            have = self.available(entries[members[0]])
            used = self._consumed.get(scope, {})
            lefts = {key: available - used.get(key, Fraction(0)) for key, available in have.items()}
            if any(left < 0 for left in lefts.values()):
                return f"counters of {_scope_label(lefts)} exhausted"
            per_key: dict[tuple[str, str], list[Fraction]] = {}
            shares: list[float] = []
            for i in members:
                share = 0.0
                for key, amount in consumption[i][1].items():
                    left = lefts.get(key)
                    if left is None:
                        continue  # a counter the scope does not declare is never checked
                    per_key.setdefault(key, []).append(amount)
                    if amount:
                        share = (share + float(amount / left)) if left else math.inf
                shares.append(share)
            for key, amounts in per_key.items():
                k = m - (len(members) - len(amounts))  # the others take none of this counter
                if k <= 0:
                    continue
                amounts.sort()
                lower = sum(amounts[:k], Fraction(0))
                if lower > lefts[key]:
                    return (
                        f"counter {key[0]}/{key[1]}: {m} more device(s) from here on would consume at least "
                        f"{_amount(lower)}, {_amount(lefts[key])} left"
                    )
            # All counters together: a device's share is the sum over counters of what it takes of
            # what is left (infinite for any of an exhausted one); chosen devices take at most all
            # of each counter, so their shares sum to at most the number of counters. Floats,
            # with a margin far above their rounding error: a near tie is never pruned.
            shares.sort()
            if sum(shares[:m]) > len(lefts) * (1 + 1e-9) + 1e-9:
                return f"counters of {_scope_label(lefts)}: {m} more device(s) from here on do not fit in what is left"
        return ""


def _scope_label(counters: Mapping[tuple[str, str], Any]) -> str:
    """The counter sets of one scope, for messages: ``gpu-0, gpu-1``."""
    return ", ".join(dict.fromkeys(set_name for set_name, _ in counters))


def _amount(x: Fraction) -> str:
    """A counter amount as Kubernetes prints a quantity (160Gi)."""
    return str(Quantity.from_int(x.numerator, "BinarySI")) if x.denominator == 1 else f"{float(x):g}"
