"""A request's device selectors for one node's search: binding conditions, the class's CEL
selectors, then the request's.

The search needs only a verdict per (request, device). How it is reached - CEL evaluation,
the attribute conversion check, kube-scheduler's messages, and the caches that evaluate a device
once for every node that can see it (in :class:`ExplainContext`) and a class once for the
requests of a pod that share it - is kept here, out of the search. A CEL runtime error is not
raised here: it is kept as a :class:`CelFailure`, for the search to raise where upstream's would
meet it.
"""

from __future__ import annotations

from typing import Any

from gpucluster.dra.claims import Selector
from gpucluster.dra.pools import Device, Slice
from gpucluster.dra.searchtypes import CelFailure, ExplainContext, Req, StaticResult

NO_BINDING_CONDITIONS = "binding conditions not supported (DRADeviceBindingConditions is off)"

_CLASS_AND_REQUEST, _CLASS_ONLY, _REQUEST_ONLY = (True, False), (True,), (False,)  # see _evaluate


class DeviceSelection:
    """Whether a request's selectors select a device, cached."""

    __slots__ = ("class_results", "ctx")

    def __init__(self, ctx: ExplainContext) -> None:
        self.ctx = ctx
        self.class_results: dict[tuple[str, Device], StaticResult] = {}  # see check

    def check(self, req: Req, s: Slice, d: Device, *, only_request: bool) -> StaticResult:
        """Binding conditions, class selectors, request selectors (``isSelectable``), cached.

        ``only_request``: the pod has no other request to share the class's verdict with.
        """
        # A slice of one node is seen by that node's search only, which asks once per request:
        # only devices other nodes can see too are worth caching.
        shared = not s.node_name or s.per_device
        key = (req.uid, d)
        cache = self.ctx.selector_cache
        if shared and key in cache:
            return cache[key]
        result: StaticResult = None
        if d.has_binding_conditions and not self.ctx.semantics.binding_conditions:
            result = NO_BINDING_CONDITIONS
        else:
            views = s.views
            if views is None:
                views = s.views = list(self.ctx.views(s.raw))
            view = views[d.index]
            if only_request:
                result = self._evaluate(req, view, d, _CLASS_AND_REQUEST)
            else:
                if req.cls.selectors:
                    # Requests of one class share its verdict (several requests of a pod).
                    class_key = (req.cls.name, d)
                    if class_key in self.class_results:
                        result = self.class_results[class_key]
                    else:
                        result = self.class_results[class_key] = self._evaluate(req, view, d, _CLASS_ONLY)
                if result is None and req.spec.selectors:
                    result = self._evaluate(req, view, d, _REQUEST_ONLY)
        if shared:
            cache[key] = result
        return result

    def _evaluate(self, req: Req, view: Any, d: Device, parts: tuple[bool, ...]) -> StaticResult:
        """The class's selectors (``True`` in ``parts``), then the request's (``False``), on one
        device: None when all match, else the first that does not."""
        runtime_error = self.ctx.runtime_error
        check = self.ctx.conversion_error
        # The device's first selector (the class's, else the request's) is among these?
        if parts[0]:
            first_here = bool(req.cls.selectors) or (len(parts) > 1 and bool(req.spec.selectors))
        else:
            first_here = not req.cls.selectors and bool(req.spec.selectors)
        if check is not None and first_here:
            # DeviceMatches converts every attribute before evaluating: one it cannot convert
            # fails the first selector, whatever the selector reads.
            bad = d.conversion_error
            if bad is None:
                bad = d.conversion_error = check(view)
            if bad:
                cls = bool(req.cls.selectors)
                first = (req.cls.selectors or req.spec.selectors)[0]
                return self._cel_failure(req, first, runtime_error(bad), cls=cls)
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
