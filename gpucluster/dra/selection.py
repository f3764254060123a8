"""A request's device selectors for one node's search: binding conditions, the class's CEL
selectors, then the request's.

The search needs only a verdict per (request, device). How it is reached - CEL evaluation,
the attribute conversion check, kube-scheduler's messages, and the caches that evaluate a device
once for every node that can see it (in :class:`ExplainContext`) and a class once for the
requests of a pod that share it - is kept here, out of the search. A CEL runtime error is not
raised here: it is kept as a :class:`CelFailure`, for the search to raise where upstream's would
meet it.

The devices of a cluster repeat themselves: thousands of GPUs share a few product names, memory
sizes and driver versions, and differ in what selectors rarely read (UUIDs, PCI addresses). So
the selectors' verdict is kept by the values they read (``cel.read_key``: the driver and the
raw values of their constant attribute and capacity lookups) and worked out once per distinct
key; selectors that read more (a whole domain, a whole map, ``device``) are evaluated on every
device. The attribute conversion check is not part of that verdict: Kubernetes fails a device
for an attribute it cannot convert whatever the selectors read, so it is made on every device.
"""

from __future__ import annotations

from typing import Final

from gpucluster.dra.claims import Selector
from gpucluster.dra.pools import Device, Slice
from gpucluster.dra.searchtypes import CelFailure, ExplainContext, Req, Scope, StaticResult

NO_BINDING_CONDITIONS = "binding conditions not supported (DRADeviceBindingConditions is off)"

_CLASS_AND_REQUEST, _CLASS_ONLY, _REQUEST_ONLY = (True, False), (True,), (False,)  # see _evaluate

_UNSEEN: Final = CelFailure("", "")  # no verdict by that key yet (told apart by identity)


class DeviceSelection:
    """Whether a request's selectors select the devices of a slice, cached."""

    __slots__ = ("class_results", "ctx")

    def __init__(self, ctx: ExplainContext) -> None:
        self.ctx = ctx
        self.class_results: dict[tuple[str, Slice], list[StaticResult]] = {}  # see results

    def results(self, req: Req, s: Slice, *, only_request: bool) -> list[StaticResult]:
        """Binding conditions, class selectors, request selectors (``isSelectable``) for every
        device of ``s``, in ``s.devices`` order, cached.

        ``only_request``: the pod has no other request to share the class's verdict with.
        """
        # A slice of one node is seen by that node's search only, which asks once per request:
        # only slices other nodes can see too are worth caching.
        shared = not s.node_name or s.per_device
        cache = self.ctx.selector_cache
        if shared:
            found = cache.get((req.uid, s))
            if found is not None:
                return found
        if only_request:
            results = self._evaluate(req, s, _CLASS_AND_REQUEST, None)
        else:
            by_class = None
            if req.cls.selectors:
                # Requests of one class share its verdict (several requests of a pod).
                class_key = (req.cls.name, s)
                by_class = self.class_results.get(class_key)
                if by_class is None:
                    by_class = self.class_results[class_key] = self._evaluate(req, s, _CLASS_ONLY, None)
            if req.spec.selectors:
                results = self._evaluate(req, s, _REQUEST_ONLY, by_class)
            else:
                results = by_class if by_class is not None else [None] * len(s.devices)
        if s.has_binding_conditions and not self.ctx.semantics.binding_conditions:
            # Checked before any selector: the device's verdict whatever they say.
            results = [
                NO_BINDING_CONDITIONS if d.has_binding_conditions else result
                for d, result in zip(s.devices, results, strict=True)
            ]
        if shared:
            cache[(req.uid, s)] = results
        return results

    def _evaluate(
        self, req: Req, s: Slice, parts: tuple[bool, ...], before: list[StaticResult] | None
    ) -> list[StaticResult]:
        """The class's selectors (``True`` in ``parts``), then the request's (``False``), on every
        device of ``s`` (but those ``before`` has a verdict for already: it is theirs): None when
        all match, else the first that does not."""
        # What is known of these selectors; messages name the class alone, or the claim.
        scope = self.ctx.verdicts.get((req.cls.name,) if parts is _CLASS_ONLY else (req.uid, parts))
        if scope is None:
            scope = self._scope(req, parts)
        selectors = scope.selectors
        if not selectors:
            return list(before) if before is not None else [None] * len(s.devices)
        check = scope.check
        verdicts = scope.verdicts
        keys = scope.keys(s.driver, s.raw["spec"]["devices"]) if scope.keys is not None else None
        results: list[StaticResult] = []
        for i, d in enumerate(s.devices):
            if before is not None and before[i] is not None:
                results.append(before[i])
                continue
            if check is not None:
                # DeviceMatches converts every attribute before evaluating: one it cannot
                # convert fails the first selector, whatever the selectors read.
                bad = d.conversion_error
                if bad is None:
                    bad = d.conversion_error = check(d.attributes)
                if bad:
                    failure = self._cel_failure(
                        req, selectors[0], self.ctx.runtime_error(bad), cls=bool(req.cls.selectors)
                    )
                    results.append(failure)
                    continue
            key = keys[i] if keys is not None else None
            if key is None:
                results.append(self._selectors(req, s, d, parts))
                continue
            found = verdicts.get(key, _UNSEEN)
            if found is _UNSEEN:
                found = verdicts[key] = self._selectors(req, s, d, parts)
            results.append(found)
        return results

    def _scope(self, req: Req, parts: tuple[bool, ...]) -> Scope:
        selectors = tuple(sel for cls in parts for sel in (req.cls.selectors if cls else req.spec.selectors))
        # The device's first selector (the class's, else the request's) is among these?
        first_here = parts[0] or not req.cls.selectors
        read_key = self.ctx.read_key
        scope = Scope(
            selectors,
            self.ctx.conversion_error if first_here else None,
            read_key([sel.program for sel in selectors]) if read_key is not None else None,
        )
        self.ctx.verdicts[(req.cls.name,) if parts is _CLASS_ONLY else (req.uid, parts)] = scope
        return scope

    def _selectors(self, req: Req, s: Slice, d: Device, parts: tuple[bool, ...]) -> StaticResult:
        """The selectors of ``parts``, evaluated on the device's view."""
        views = s.views
        if views is None:
            views = s.views = list(self.ctx.views(s.raw))
        view = views[d.index]
        runtime_error = self.ctx.runtime_error
        for cls in parts:
            for sel in req.cls.selectors if cls else req.spec.selectors:
                try:
                    ok = sel.program.evaluate(view)
                except runtime_error as exc:
                    return self._cel_failure(req, sel, exc, cls=cls)
                if ok is not True:
                    return f"class selector #{sel.index} false" if cls else f"selector #{sel.index} false"
        return None

    def _cel_failure(self, req: Req, sel: Selector, exc: Exception, *, cls: bool) -> CelFailure:
        if cls:
            return CelFailure(
                f"class selector #{sel.index} CEL error: {exc}",
                f"class {req.cls.name}: selector #{sel.index}: CEL runtime error: {exc}",
            )
        return CelFailure(
            f"selector #{sel.index} CEL error: {exc}",
            f"claim {self.ctx.claims[req.claim_index].ref}: selector #{sel.index}: CEL runtime error: {exc}",
        )
