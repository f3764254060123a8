"""The simulated GPU cluster: controllers that run inside the sandbox next to its API server.

``SimulatedCluster(core, SimulationOptions(...))`` registers the GPU nodes and starts, each
switchable off:

* ``slices`` - ``kubelet.SlicePublisher``: nodes publish NVIDIA ResourceSlices while a pod of
  the DRA kubelet-plugin DaemonSet runs there (with the pod pipeline below switched off: while
  the DaemonSet selects them);
* ``kubelet`` - ``kubelet.Kubelet``: bound pods become Running, deleted pods stop within their
  grace period; with ``processes`` (``process.ProcessRuntime``) pods of the project's own image and
  of ``registry.k8s.io/kubectl`` run as local processes;
* ``jobs`` - ``jobs.JobController``: batch/v1 Jobs (pods, completions, deadlines, TTL);
* ``endpoints`` - ``endpoints.EndpointSliceController``: EndpointSlices of Services with selectors;
* ``workloads`` - ``workloads.Workloads``: DaemonSet, Deployment and ReplicaSet controllers
  (real pods, rollouts, status from the pods; serves ``apps/v1 replicasets``);
* ``resourceclaims`` - ``resourceclaim.ResourceClaimController``: claims from templates;
* ``scheduler`` - ``scheduler.Scheduler``: DRA allocation, binding, FailedScheduling events.

All of them act through ``ApiCore`` (admission included), so clients see ordinary writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpucluster.sandbox.apiserver.core import ApiCore
from gpucluster.sandbox.sim.base import Controller
from gpucluster.sandbox.sim.endpoints import EndpointSliceController, ensure_endpointslices
from gpucluster.sandbox.sim.images import ImageStore
from gpucluster.sandbox.sim.jobs import JobController
from gpucluster.sandbox.sim.kubelet import Kubelet, NodePlan, SlicePublisher, parse_mix, plan_nodes, register_nodes
from gpucluster.sandbox.sim.process import ApiEndpoint, LogFile, ProcessRuntime, RuntimeOptions, core_access
from gpucluster.sandbox.sim.resourceclaim import ResourceClaimController
from gpucluster.sandbox.sim.scheduler import Scheduler
from gpucluster.sandbox.sim.workloads import Workloads, ensure_replicasets

__all__ = ["SimulatedCluster", "SimulationOptions"]


@dataclass(frozen=True)
class SimulationOptions:
    nodes: int = 3
    gpus_per_node: int = 8
    mix: str = "h100"
    """Comma-separated models, node ``i`` gets entry ``i % len``: h100, a100, l4, gb200, each
    optionally ``-mig`` (every other GPU MIG-partitioned) and ``:<gpus>``."""
    seed: int = 0
    node_prefix: str = "gpu-node"
    slices: bool = True
    kubelet: bool = True
    workloads: bool = True
    resourceclaims: bool = True
    scheduler: bool = True
    jobs: bool = True
    endpoints: bool = True
    processes: bool = True
    """Run pods of the project's image and of registry.k8s.io/kubectl as local processes (needs kubelet)."""
    process_root: Path | None = None
    """Where process pods get their directories (default: a new directory in the system temp dir)."""
    restart_backoff: tuple[float, float] = (10.0, 300.0)
    """Crash-loop back-off of process containers and the Job controller's delay before replacing a
    failed pod: first delay and cap (the kubelet's 10 s / 300 s; the Job controller's cap is 360 s)."""
    process_images: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More images to run as processes: repository -> argv standing for the image's entrypoint."""
    image_archives: tuple[Path, ...] = ()
    """OCI image archives the nodes hold (``make image``): their pods run from the images' root
    filesystems (``gpucluster.sandbox.sim.container``)."""

    def plans(self) -> list[NodePlan]:
        return plan_nodes(self.nodes, self.gpus_per_node, parse_mix(self.mix), prefix=self.node_prefix)


class SimulatedCluster:
    def __init__(
        self, core: ApiCore, options: SimulationOptions | None = None, *, kubernetes_version: str = "1.34"
    ) -> None:
        self.core = core
        self.options = options or SimulationOptions()
        self.plans = self.options.plans()
        self.controllers: list[Controller] = []
        opts = self.options
        # Slices follow the kubelet-plugin pods when they can run: created, scheduled, started.
        self.pods_run = opts.workloads and opts.scheduler and opts.kubelet
        if opts.slices:
            self.controllers.append(SlicePublisher(core, self.plans, seed=opts.seed, follow_pods=self.pods_run))
        if opts.workloads:
            ensure_replicasets(core.registry)
            self.controllers.append(Workloads(core))
        if opts.resourceclaims:
            self.controllers.append(ResourceClaimController(core))
        if opts.scheduler:
            # kube-scheduler allocates devices as its own version does (gates at their defaults).
            self.controllers.append(Scheduler(core, kubernetes_version=kubernetes_version))
        self.runtime: ProcessRuntime | None = None
        if opts.kubelet:
            if opts.processes:
                base, cap = opts.restart_backoff
                self.runtime = ProcessRuntime(
                    *core_access(core),
                    RuntimeOptions(
                        root=opts.process_root,
                        backoff_base=base,
                        backoff_max=cap,
                        entrypoints=opts.process_images,
                        images=ImageStore(list(opts.image_archives)) if opts.image_archives else None,
                    ),
                )
            self.controllers.append(Kubelet(core, self.runtime))
        if opts.jobs and self.pods_run:
            base, cap = opts.restart_backoff
            self.controllers.append(JobController(core, backoff_base=base, backoff_max=cap))
        if opts.endpoints:
            ensure_endpointslices(core.registry)
            self.controllers.append(EndpointSliceController(core))

    def controller(self, name: str) -> Controller | None:
        return next((c for c in self.controllers if c.name == name), None)

    async def start(self, api: ApiEndpoint | None = None) -> None:
        """``api``: the sandbox's URL and CA, for process pods' in-cluster configuration."""
        if api is not None and self.runtime is not None:
            self.runtime.api = api
        await register_nodes(self.core, self.plans, seed=self.options.seed)
        for c in self.controllers:
            c.start()

    async def stop(self) -> None:
        for c in self.controllers:
            await c.stop()

    def pod_log(self, namespace: str, name: str, container: str, previous: bool) -> LogFile | None:
        """A process pod container's log file (None: not a process pod, or nothing logged yet)."""
        if self.runtime is None:
            return None
        return self.runtime.log_file(namespace, name, container, previous=previous)

    def idle(self) -> bool:
        return all(c.idle() for c in self.controllers)

    async def settle(self, timeout: float = 10.0, quiet: float = 0.05) -> None:
        """Wait until every controller has had nothing to do for ``quiet`` seconds (tests)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        calm_since: float | None = None
        while True:
            now = loop.time()
            if self.idle():
                calm_since = calm_since if calm_since is not None else now
                if now - calm_since >= quiet:
                    return
            else:
                calm_since = None
            if now > deadline:
                busy = [c.name for c in self.controllers if not c.idle()]
                raise TimeoutError(f"simulated controllers still busy: {', '.join(busy)}")
            await asyncio.sleep(0.005)
