"""What the API server serves, as the GPUCluster reconciler needs it (I/O, cached a while)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from gpucluster.controller.plan import Prerequisites
from gpucluster.dra.semver import Semver, SemverError
from gpucluster.kube.client import Kube, KubeError

log = logging.getLogger("gpucluster.controller")

MIN_VERSION = (1, 34, 2)


@dataclass
class PrerequisiteCheck:
    """DeviceClass API served (resource.k8s.io/v1), server >= v1.34.2; ServiceMonitor CRD served?
    Asked of the server at most every ``ttl`` seconds."""

    ttl: float = 60.0
    checked_at: float = -1e9
    found: Prerequisites = field(default_factory=Prerequisites)

    async def check(self, kube: Kube) -> Prerequisites:
        if time.monotonic() - self.checked_at < self.ttl:
            return self.found
        problem = None
        version = None
        try:
            group = await kube.get("/apis/resource.k8s.io")
            versions = {v.get("version") for v in group.get("versions") or []}
            if "v1" not in versions:
                problem = (
                    "the resource.k8s.io/v1 API (DeviceClass) is not served: DRA needs Kubernetes v1.34.2 or later "
                    "with resource.k8s.io/v1 enabled"
                )
        except KubeError as exc:
            if exc.status != 404:
                raise
            problem = "the resource.k8s.io API group is not served: DRA needs Kubernetes v1.34.2 or later"
        info = await kube.get("/version")
        version = str(info.get("gitVersion") or "")
        try:
            parsed = Semver.parse(version.split("+")[0].split("-")[0], normalize=True)
            if (parsed.major, parsed.minor, parsed.patch) < MIN_VERSION:
                problem = problem or f"Kubernetes {version} is too old: DRA with GPUCluster needs v1.34.2 or later"
        except SemverError:
            log.warning("cannot parse the server version %r; assuming it is recent enough", version)
        try:
            await kube.get("/apis/monitoring.coreos.com/v1")
            service_monitor = True
        except KubeError:
            service_monitor = False
        self.checked_at, self.found = time.monotonic(), Prerequisites(problem, version, service_monitor)
        return self.found
