"""The node reconciler: labels GPU nodes for the DRA model, one node per key (I/O).

Keyed by node name on its own work queue, synced by a few workers at once (bounded
concurrency), so labelling 10,000 nodes is 10,000 small keys, not one long reconcile; a node's
event costs a label check of that node, not a pass over the cluster, and its heartbeat not even
that (the reflector drops an event that changes nothing cached: controller/transforms.py). What a node needs is decided
by :func:`controller.nodes.label_patch` (pure). Nodes are labelled only while the GPUCluster
reconciler has rendered operands (``active``); ``pending`` is the GPU nodes not yet as they
should be, which keeps the GPUCluster not ready until they are.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.clusterstate import ClusterState, KubeObject, metadata
from gpucluster.controller.nodes import label_patch, nodes_with_claims
from gpucluster.controller.transforms import trim_node
from gpucluster.kube.client import KubeError

log = logging.getLogger("gpucluster.controller.nodes")

Write = Callable[..., Awaitable[KubeObject]]


def _in_use(state: ClusterState) -> set[str]:
    return state.derived("nodes-with-claims", lambda s: nodes_with_claims(s.list("ResourceClaim")), ["ResourceClaim"])


@dataclass
class NodeLabeller:
    state: ClusterState
    write: Write
    env: Mapping[str, str] = field(default_factory=dict)
    active: Callable[[], bool] = lambda: False
    pending: set[str] = field(default_factory=set)
    on_settled: Callable[[], None] = lambda: None  # the last pending node was labelled
    # Nodes whose last label write failed, and why (the GPUCluster's status names them).
    errors: dict[str, tuple[int | None, str]] = field(default_factory=dict)  # name -> (HTTP status, error)

    def needs(self, node: Mapping[str, Any]) -> dict[str, str | None]:
        name = str(metadata(node).get("name"))
        return label_patch(node, self.env.get("DEFAULT_GPU_ALLOCATION_MODE"), name in _in_use(self.state))

    def wants(self, name: str) -> bool:
        """Whether node ``name`` should be synced (and counts as pending until it is)."""
        node = self.state.get("Node", name)
        if node is None or not self.active() or not self.needs(node):
            self._settle(name)
            return False
        self.pending.add(name)
        return True

    async def sync(self, name: str) -> None:
        node = self.state.get("Node", name)
        if node is None or not self.active():
            self._settle(name)
            return
        patch = self.needs(node)
        if patch:
            try:
                result = await self.write(
                    "PATCH", f"/api/v1/nodes/{name}", body={"metadata": {"labels": patch}},
                    content_type="application/merge-patch+json",
                )  # fmt: skip
            except Exception as exc:
                self.errors[name] = (exc.status if isinstance(exc, KubeError) else None, str(exc) or repr(exc))
                raise
            result.setdefault("kind", "Node")
            self.state.upsert("Node", trim_node(result))  # as the reflector caches it
            log.debug("labelled node=%s labels=%s", name, patch)
        self._settle(name)

    def forget_except(self, names: set[str]) -> None:
        """Nodes a relist no longer shows are not waited for."""
        for name in [n for n in self.pending if n not in names]:
            self._settle(name)

    def _settle(self, name: str) -> None:
        self.errors.pop(name, None)
        if name in self.pending:
            self.pending.discard(name)
            if not self.pending:
                self.on_settled()
