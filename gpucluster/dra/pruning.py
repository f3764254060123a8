"""The bounds that let one node's search skip what cannot succeed (the module docstring of
:mod:`gpucluster.dra.search` says which), and what they need to know of each request, worked
out before the search starts (:meth:`Pruning.index`).

Kept apart from the search because none of it decides which answer is found: it decides which
visits can be left out, and still raises the CEL runtime errors upstream would meet in them
(:meth:`Pruning.pruned`). The bound on shared counters is with the counters
(:meth:`gpucluster.dra.counterledger.CounterLedger.short`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate, repeat
from operator import is_
from typing import Any

from gpucluster.dra.capacityledger import CapacityLedger
from gpucluster.dra.constraints import MISSING, MatchAttribute, NodeValues, show_value
from gpucluster.dra.counterledger import CounterLedger
from gpucluster.dra.explanation import Recorder
from gpucluster.dra.model import ALLOCATION_RESULTS_MAX_SIZE, DeviceKey
from gpucluster.dra.searchtypes import CelFailure, Entry, ExplainContext, FatalError, Req

_SHARED_WEIGHT = 1 << 20
"""What a usable shared device counts for in the count bound: more than any request needs."""


@dataclass(slots=True, eq=False)
class _Rest:
    """A request and the later ones of the pod, for the capacity bound: ``later_need`` devices
    after this request (``own_later`` of them in its claim), and per usable entry (for any of
    them) what each of those requests would take of it if it is shared (empty: allocated whole)."""

    later_need: int
    own_later: int
    # (entry index, None for a device allocated whole, else (the smallest amount any of them
    # takes per capacity, the device's capacities, how many of them can use it))
    users: list[tuple[int, tuple[dict[str, Fraction], Mapping[str, Fraction], int] | None]]


class Pruning:
    """The bounds of one node's search: ``groups`` is the search's claim -> request ->
    alternatives, filled as it builds its requests."""

    __slots__ = (
        "any_shared",
        "capacity",
        "counters",
        "ctx",
        "entries",
        "groups",
        "recorder",
        "rests",
        "sem",
        "shared",
        "values",
    )

    def __init__(
        self,
        ctx: ExplainContext,
        entries: Sequence[Entry],
        shared: Sequence[bool],
        groups: list[list[list[Req]]],
        counters: CounterLedger,
        capacity: CapacityLedger,
        recorder: Recorder,
    ) -> None:
        self.ctx = ctx
        self.sem = ctx.semantics
        self.entries = entries
        self.shared = shared
        self.any_shared = True in shared
        self.groups = groups
        self.counters = counters
        self.capacity = capacity
        self.recorder = recorder
        self.rests: dict[int, _Rest | None] = {}  # request uid -> see _rest
        # The constraints' attribute values per entry: set by the search with its requests
        # (a request with a constraint has them).
        self.values: NodeValues | None = None

    def drop_settled(self, req: Req, usable: Sequence[int]) -> None:
        """Leave out of the search a matchAttribute constraint every device the request may take
        (``usable``: entry indices) satisfies with one value, when no other request of the claim
        is bound by it: it can never fail there, so it only costs time."""
        if not any(isinstance(c, MatchAttribute) for c in req.constraints):
            return
        assert self.values is not None
        others = [r for alts in self.groups[req.claim_index] for r in alts if r.request_index != req.request_index]
        kept = []
        for c in req.constraints:
            if isinstance(c, MatchAttribute) and not any(c in r.constraints for r in others):
                name = c.spec.attribute
                if usable and self.values.settled_value(name) is not None:
                    continue  # every device of the node has the one value: decided once per node
                column = self.values.column(name)
                values: set[Any] = set()
                for i in usable:
                    values.add(column[i])
                    if len(values) > 1:
                        break
                if len(values) <= 1 and None not in values and MISSING not in values:
                    continue
            kept.append(c)
        req.constraints = kept

    def index(self, req: Req) -> None:
        """Work out what the bounds need to know of an ExactCount request before the search."""
        statics = req.static
        if req.constraints:
            self.drop_settled(req, [i for i, r in enumerate(statics) if r is None])
        any_shared = False
        if self.any_shared:
            usable = [0] * (len(statics) + 1)
            shared = self.shared
            for i in range(len(statics) - 1, -1, -1):
                if statics[i] is None and shared[i]:
                    any_shared = True
                    usable[i] = usable[i + 1] + _SHARED_WEIGHT  # may fill every remaining slot
                else:
                    usable[i] = usable[i + 1] + (statics[i] is None)
        else:
            # usable[i] = usable[i + 1] + (statics[i] is None), summed from the end in C.
            usable = list(accumulate(map(is_, reversed(statics), repeat(None)), initial=0))
            usable.reverse()
        req.usable = usable
        entries = self.entries
        all_usable = statics.count(None) == len(statics)
        if all_usable:
            req.cel_failures = []  # every entry usable (a device, no CEL error): nothing to look for
        else:
            req.cel_failures = [i for i, r in enumerate(statics) if type(r) is CelFailure or entries[i].device is None]
        if any_shared:
            # The counter and matchAttribute bounds count devices, each chosen once: a device
            # serving several allocations breaks them, so only the count bound above applies.
            return
        if self.sem.partitionable_devices:
            for i, r in enumerate(statics):
                d = entries[i].device
                if r is None and d is not None and d.consumes:
                    want: dict[tuple[str, str], Fraction] = {}
                    for set_name, counters in d.consumes:
                        for name, v in counters:
                            want[(set_name, name)] = want.get((set_name, name), Fraction(0)) + v
                    if any(v < 0 for v in want.values()):
                        req.consumption = {}  # the bounds assume amounts >= 0: no pruning
                        break
                    req.consumption[i] = (self.counters.scope(entries[i]), want)
        for k, c in enumerate(req.constraints):
            if not isinstance(c, MatchAttribute):
                continue
            assert self.values is not None
            name = c.spec.attribute
            column = self.values.column(name)
            groups = self.values.groups[name]
            if groups is not None and all_usable:
                # Every entry usable: the node's groups by value are the request's (read only).
                req.by_value[k] = groups
                req.value_at[k] = self.values.known(name)
                continue
            positions: dict[tuple[str, Any], list[int]] = {}
            values: list[tuple[str, Any] | None] = [None] * len(statics)
            for i, r in enumerate(statics):
                if r is None:
                    value = column[i]
                    if value is not None and value is not MISSING:
                        values[i] = value
                        found = positions.get(value)
                        if found is None:
                            positions[value] = [i]
                        else:
                            found.append(i)
            req.by_value[k] = positions
            req.value_at[k] = values

    def _rest(self, ci: int, ri: int, req: Req) -> _Rest | None:
        """What this request and every later one of the pod ask for, when the capacity bound
        applies to them (see :meth:`slots_short`); None when it does not."""
        key = req.uid
        if key in self.rests:
            return self.rests[key]
        rest: _Rest | None = None
        later = self.groups[ci][ri + 1 :]
        later_claims = [alts for groups in self.groups[ci + 1 :] for alts in groups]
        own_later = sum(alts[0].num_devices for alts in later if len(alts) == 1)
        reqs = [req, *(alts[0] for alts in later + later_claims if len(alts) == 1)]
        plain = len(reqs) == 1 + len(later) + len(later_claims) and all(
            r.spec.mode != "All" and not r.spec.admin_access and not r.cel_failures for r in reqs
        )
        # The search below must end in "no" (never at the results limit, which subrequests of
        # earlier claims react to): every later claim within the limit on its own.
        plain = plain and all(
            sum(alts[0].num_devices for alts in groups) <= ALLOCATION_RESULTS_MAX_SIZE
            for groups in self.groups[ci + 1 :]
        )
        if plain:
            users: list[tuple[int, tuple[dict[str, Fraction], Mapping[str, Fraction], int] | None]] = []
            for index, entry in enumerate(self.entries):
                usable = [r for r in reqs if r.static[index] is None]
                if not usable:
                    continue
                if not self.shared[index]:
                    users.append((index, None))
                    continue
                lows: dict[str, Fraction] = {}
                totals: Mapping[str, Fraction] = {}
                for r in usable:
                    found = self.capacity.demand(r, entry)
                    assert not isinstance(found, str)  # a static reason otherwise
                    totals = found.totals
                    for name, amount in found.amounts.items():
                        low = lows.get(name)
                        if low is None or amount < low:
                            lows[name] = amount
                users.append((index, ({k: v for k, v in lows.items() if v > 0}, totals, len(usable))))
            rest = _Rest(sum(r.num_devices for r in reqs[1:]), own_later, users)
        self.rests[key] = rest
        return rest

    def slots_short(
        self, ci: int, ri: int, req: Req, di: int, allocating: Mapping[DeviceKey, set[int]], chosen: int
    ) -> bool:
        """Whether the devices cannot host the allocations the pod still needs (this request's
        remaining devices and every later request's), counting for each usable device how many
        more allocations its capacity left can take at least at the smallest amount asked of it
        (a device allocated whole takes one). Only where shared devices make the count bounds
        give up; constraints and counters are ignored, so this never rules out a solution."""
        rest = self._rest(ci, ri, req)
        if rest is None:
            return False
        need = req.num_devices - di + rest.later_need
        if chosen + req.num_devices - di + rest.own_later > ALLOCATION_RESULTS_MAX_SIZE:
            return False  # the results limit decides first
        slots = 0
        once = self.sem.combinations  # 1.36: a request takes a shared device once
        for index, share in rest.users:
            d = self.entries[index].device
            assert d is not None
            if share is None:
                if not allocating.get(d.key):
                    slots += 1
            else:
                lows, totals, users = share
                if not lows:
                    return False  # nothing limits this device
                used = self.capacity.used.get(d.key) or self.ctx.consumed.get(d.key) or {}
                fit: int | None = None
                for key, low in lows.items():
                    left = totals[key] - used[key] if key in used else totals[key]
                    n = int(left // low)
                    fit = n if fit is None or n < fit else fit
                assert fit is not None
                slots += max(0, min(fit, users) if once else fit)
            if slots >= need:
                return False
        self.recorder.slot_note = (
            f"the capacity left on the usable devices takes at most {slots} more allocation(s), "
            f"{need} needed by claim {self.ctx.claims[ci].ref}, request {req.spec.full_name} and the requests after it"
        )
        for index, _ in rest.users:
            entry = self.entries[index]
            if req.static[index] is not None or not self.shared[index]:
                continue
            assert entry.device is not None
            found = self.capacity.demand(req, entry)
            taken = self.capacity.used.get(entry.device.key) or self.ctx.consumed.get(entry.device.key)
            why = found.over(taken) if not isinstance(found, str) else found
            self.recorder.note(
                req, entry, why + " after the allocations already chosen" if why else self.recorder.slot_note
            )
        return True

    def pruned(self, ci: int, req: Req, index: int, allocating: Mapping[DeviceKey, set[int]]) -> None:
        """Entries from ``index`` on are not tried: raise the CEL error upstream would meet there."""
        failures = req.cel_failures
        if not failures:
            return
        for i in range(bisect_left(failures, index), len(failures)):
            entry = self.entries[failures[i]]
            if entry.device is None:
                raise FatalError(f"pool {entry.pool.name} is invalid: {entry.pool.invalid}")
            claims = allocating.get(entry.device.key)
            if claims and (not req.spec.admin_access or ci in claims):
                continue  # upstream skips a device in use before evaluating its selectors
            result = req.static[failures[i]]
            assert isinstance(result, CelFailure)
            raise FatalError(result.message)

    def too_few_share(self, req: Req, index: int, need: int, unfixed: list[int]) -> str:
        """Why entry ``index`` cannot start the rest of the request: it would fix a
        matchAttribute value too few of the remaining devices share ("" if it can)."""
        for k in unfixed:
            value = req.value_at[k][index]
            same = req.by_value[k].get(value, []) if value is not None else []
            have = len(same) - bisect_left(same, index)
            if have < need:
                label = req.constraints[k].label
                # The same few values (PCIe roots, NUMA nodes) on every node: each message once.
                # (1 and True are equal keys; None: a value of unknown type)
                key = (label, value, type(value[1]) if value is not None else None, have, need)
                messages = self.ctx.messages
                message = messages.get(key)
                if message is None:
                    message = messages[key] = (
                        f"{label} (only {have} usable device(s) from here on share {show_value(value)}, need {need})"
                    )
                return message
        return ""
