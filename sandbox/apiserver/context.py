"""Who asks and what an admission hook sees: the per-request values the API semantics (``core``),
the authorizer (``rbac``) and its bootstrap pass around, and the part of the semantics those two
use (``Semantics``), on their own so that neither imports ``core``, which imports them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpucluster.sandbox.apiserver.resources import Registry, ResourceType
from gpucluster.sandbox.apiserver.store import Store

Obj = dict[str, Any]


@dataclass
class Context:
    """Who asks and how: the per-request options the semantics depend on."""

    user: Obj = field(
        default_factory=lambda: {"username": "sandbox-admin", "groups": ["system:masters", "system:authenticated"]}
    )
    dry_run: bool = False
    field_manager: str = ""
    user_agent: str = ""
    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)
    options: Obj = field(default_factory=dict)
    """The CreateOptions/UpdateOptions fields the request set (dryRun, fieldManager, fieldValidation),
    as admission (and so webhooks' ``request.options``) sees them."""

    def manager(self) -> str:
        if self.field_manager:
            return self.field_manager
        agent = self.user_agent.split("/", 1)[0].strip()
        return agent[:128] or "unknown"


@dataclass
class Attributes:
    """What an admission hook sees (``object`` may be replaced by a mutating hook)."""

    operation: str  # CREATE | UPDATE | DELETE
    resource: ResourceType
    subresource: str
    namespace: str
    name: str
    object: Obj | None
    old_object: Obj | None
    dry_run: bool
    options: Obj
    user: Obj
    warnings: list[str]


AdmissionHook = Callable[[Attributes], Awaitable[None]]


@dataclass
class Admission:
    """Hook points where the admission chain plugs in; no-ops by default."""

    mutating: list[AdmissionHook] = field(default_factory=list)
    validating: list[AdmissionHook] = field(default_factory=list)

    async def mutate(self, attrs: Attributes) -> None:
        for hook in self.mutating:
            await hook(attrs)

    async def validate(self, attrs: Attributes) -> None:
        for hook in self.validating:
            await hook(attrs)


class Semantics(Protocol):
    """What the authorizer and its bootstrap use of the API semantics (``core.ApiCore``)."""

    store: Store
    registry: Registry
    admission: Admission

    async def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        ctx: Context,
        *,
        managed: bool = True,
        authorize_create: bool = False,
    ) -> Obj: ...

    async def update(
        self, rt: ResourceType, namespace: str, name: str, body: Obj, ctx: Context, *, subresource: str = ""
    ) -> Obj: ...
