"""The explanation recorder: why each device could not serve each request on one node.

The search refuses devices for two kinds of reasons: static ones (the device can never serve
the request on this node, kept on :class:`Req`) and the ones it meets while choosing (chosen
for another request, a constraint the devices already chosen fix, counters or capacity used
up). The recorder keeps the first of the latter per (request, device), as the search meets
them, and turns both into the :class:`RequestReport` of each request; :class:`NodeOutcome`
is the node's whole answer. Apart from the search so that what it records for the explanation
stays out of the search's own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpucluster.dra.constraints import MISSING, MatchAttribute, show_value, value_of
from gpucluster.dra.searchtypes import CelFailure, Entry, ExplainContext, Req


@dataclass(slots=True)
class RequestReport:
    """What became of one request's devices on one node."""

    claim: str
    request: str  # gpu or gpu/sub
    mode: str
    count: int  # wanted (All: the number of matching devices)
    considered: int
    usable: int
    rejections: list[tuple[str, str]]  # (driver/pool/device, first reason)
    selectors: tuple[tuple[str, str], ...]  # (label, expression) to explain "selector #i false"
    chosen: bool | None = None  # subrequests: whether this alternative was used


@dataclass(slots=True)
class NodeOutcome:
    """One node's answer: the allocation found, or why there is none."""

    node: str
    satisfiable: bool
    # per claim: (request, driver, pool, device, consumedCapacity of a shared allocation, else None)
    allocation: list[list[tuple[str, str, str, str, dict[str, str] | None]]]
    reasons: list[str]
    requests: list[RequestReport]
    fatal: str = ""
    steps: int = 0  # calls of allocateOne, upstream's numAllocateOneInvocations (after pruning)
    gave_up: str = ""  # "gave up after N ms on node X" or the steps limit: no answer for this node
    elapsed_ms: float = 0.0  # time spent on this node (selectors, search, explanation)


class Recorder:
    """The first reason the search met for each (request, device), as it searches one node."""

    __slots__ = ("reasons", "slot_note")

    def __init__(self) -> None:
        self.reasons: dict[tuple[int, int], str] = {}  # (req uid, entry index) -> first reason
        self.slot_note = ""  # why the capacity bound stopped the search

    def note(self, req: Req, entry: Entry, reason: str) -> None:
        """Keep ``reason`` for the device, unless it has one already."""
        key = (req.uid, entry.index)
        if key not in self.reasons:
            self.reasons[key] = reason

    def note_mismatches(self, req: Req, entries: Sequence[Entry], index: int) -> None:
        """Explain the devices a fixed matchAttribute value rules out (the search does not try them)."""
        for c in req.constraints:
            if not isinstance(c, MatchAttribute) or not c.count:
                continue
            for i in range(index, len(entries)):
                entry = entries[i]
                if req.static[i] is not None or entry.device is None:
                    continue
                value = value_of(entry.device, c.spec.attribute)
                if value is None or value is MISSING or value != c.value:
                    self.note(
                        req,
                        entry,
                        f"{c.label} ({show_value(None if value is MISSING else value)} differs from "
                        f"{show_value(c.value)} of the devices already chosen)",
                    )

    def reports(
        self,
        ctx: ExplainContext,
        reqs: Sequence[Req],
        entries: Sequence[Entry],
        selected: Mapping[tuple[int, int], int],
        satisfied: bool,
    ) -> list[RequestReport]:
        """Per request: how many devices were considered and usable, and the first reason each
        other device was refused (only the static reasons when the claims are ``satisfied``)."""
        reports = []
        for req in reqs:
            spec = req.spec
            rejections: list[tuple[str, str]] = []
            usable = 0
            considered = 0
            statics = req.static or [None] * len(entries)
            if (satisfied or not self.reasons) and statics.count(None) == len(entries):
                considered = usable = len(entries)  # every device usable (so no invalid pool): nothing to say
                statics = []
            for entry, result in zip(entries, statics, strict=False):
                if entry.device is None:
                    rejections.append((entry.id, f"pool invalid: {entry.pool.invalid}"))
                    continue
                considered += 1
                if result is None:
                    usable += 1
                    if not satisfied and self.reasons:
                        dynamic = self.reasons.get((req.uid, entry.index))
                        if dynamic:
                            rejections.append((entry.id, dynamic))
                    continue
                rejections.append((entry.id, result.reason if isinstance(result, CelFailure) else result))
            chosen: bool | None = None
            if req.is_sub:
                chosen = satisfied and selected.get((req.claim_index, req.request_index)) == req.sub_index
            reports.append(
                RequestReport(
                    claim=ctx.claims[req.claim_index].ref,
                    request=spec.full_name,
                    mode=spec.mode,
                    count=req.num_devices if spec.mode == "All" else spec.count,
                    considered=considered,
                    usable=usable,
                    rejections=rejections,
                    selectors=_selector_labels(ctx, req),
                    chosen=chosen,
                )
            )
        return reports


def _selector_labels(ctx: ExplainContext, req: Req) -> tuple[tuple[str, str], ...]:
    """(label, expression) of the request's selectors, the class's first, cached by request."""
    labels = ctx.selector_labels.get(req.uid)
    if labels is None:
        labels = ctx.selector_labels[req.uid] = tuple(
            (f"class selector #{s.index}", s.expression) for s in req.cls.selectors
        ) + tuple((f"selector #{s.index}", s.expression) for s in req.spec.selectors)
    return labels
