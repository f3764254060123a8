"""Who asks and what an admission hook sees: the per-request values the API semantics (``core``),
the authorizer (``rbac``) and its bootstrap pass around, on their own so that none of those
imports another for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandbox.apiserver.resources import ResourceType

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
