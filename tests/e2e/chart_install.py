"""The install path a cluster admin takes, in the sandbox: real Helm (helm-python-sdk) installs the
chart, the operator runs as its own pods (processes of the installed ``gpucluster``) under its
ServiceAccount with RBAC enforced, and kubectl looks at the result.

Used by the end-to-end tests (tests/e2e/test_helm_*.py) and by ``make try-chart``
(``python -m tools.try_chart``), which leaves the installed sandbox running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import helm_python as helm

from gpucluster.cli.run import NVIDIADRIVER_CRD
from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane
from gpucluster.sandbox.server import SandboxThread
from gpucluster.sandbox.sim import SimulationOptions
from tests.chart.helm import CHART_DIR, DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED, Recipe, set_values
from tests.e2e.backends import SANDBOX, kube_version, operator_images, require_kube

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
NAMESPACE = "gpu-operator"
RELEASE = "gpu-operator"
RECIPES = {r.name: r for r in (DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED)}
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """``probe()`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = probe()
        except (subprocess.CalledProcessError, json.JSONDecodeError) as exc:
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last})")
        time.sleep(interval)


class Cluster:
    """A cluster with simulated GPU nodes, process pods and RBAC, driven by kubectl and Helm: the
    sandbox (``backend="sandbox"``) or the real control plane (``backend="kube"``)."""

    def __init__(
        self,
        *,
        nodes: int = 2,
        gpus_per_node: int = 4,
        kubeconfig: Path | None = None,
        backend: str = SANDBOX,
        version: str | None = None,
        admission_plugins: tuple[str, ...] = (),
    ) -> None:
        """``admission_plugins``: more kube-apiserver admission plugins (the real control plane only)."""
        self.backend = backend
        self.thread: SandboxThread | None = None
        self.plane: ControlPlane | None = None
        if backend == SANDBOX:
            assert not admission_plugins, "the sandbox has no admission plugins to enable"
            options = SimulationOptions(
                nodes=nodes, gpus_per_node=gpus_per_node, restart_backoff=(1.0, 10.0), image_archives=operator_images()
            )
            self.thread = SandboxThread(simulate=options, kubeconfig_path=kubeconfig)
            self.sandbox = self.thread.start()
            self.kubeconfig = str(self.sandbox.kubeconfig_path)
        else:
            version = version or kube_version()
            require_kube(version)
            plane_options = ClusterOptions(
                version=version,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                admission_plugins=admission_plugins,
                image_archives=operator_images(),
            )
            self.plane = ControlPlane(plane_options)
            self.plane.up()
            self.kubeconfig = str(self.plane.admin_kubeconfig)
            if kubeconfig is not None:
                shutil.copyfile(self.kubeconfig, kubeconfig)
                self.kubeconfig = str(kubeconfig)
        self.helm = helm.Config(kubeconfig_path=self.kubeconfig, namespace=NAMESPACE)

    def close(self) -> None:
        """Release Helm, then stop the sandbox or the control plane: each step even if one before it failed."""
        try:
            self.helm.close()
        finally:
            try:
                if self.thread is not None:
                    self.thread.stop()
            finally:
                if self.plane is not None:
                    self.plane.stop()

    def forbidden(self, user_prefix: str) -> list[str]:
        """Requests of users named ``user_prefix...`` that the authorizer refused: the sandbox's
        record of denials, or the real kube-apiserver's audit log."""
        if self.plane is not None:
            return self.plane.forbidden(user_prefix)
        authz = self.sandbox.core.authz
        assert authz is not None
        return [message for user, message in list(authz.denials) if user.startswith(user_prefix)]

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", self.kubeconfig, *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, args, result.stdout, result.stderr)
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def prepare(self, recipe: Recipe) -> None:
        """What the recipe expects the cluster to have first: the NVIDIADriver API for an operator-managed driver."""
        if recipe is DOCS_OPERATOR_MANAGED:
            self.kubectl("create", "-f", "-", stdin=json.dumps(NVIDIADRIVER_CRD))
            wait_for("the NVIDIADriver API", lambda: "nvidiadrivers" in self.kubectl("api-resources"), 30)

    def install(self, recipe: Recipe, *extra: str, wait: str | None = None, timeout: int = 240) -> dict[str, Any]:
        values = set_values(recipe.set_flags + extra)
        return self.helm.install(
            CHART_DIR, RELEASE, values, namespace=NAMESPACE, create_namespace=True, timeout=timeout, wait=wait
        )

    def upgrade(self, recipe: Recipe, *extra: str, timeout: int = 240) -> dict[str, Any]:
        values = set_values(recipe.set_flags + extra)
        return self.helm.upgrade(CHART_DIR, RELEASE, values, namespace=NAMESPACE, timeout=timeout)

    def uninstall(self, timeout: int = 300) -> dict[str, Any]:
        return self.helm.uninstall(RELEASE, timeout=timeout, wait="watcher")

    def gpucluster_state(self) -> str | None:
        found = self.get("gpuclusters")["items"]
        return found[0].get("status", {}).get("state") if found else None

    def wait_ready(self, timeout: float = 180) -> dict[str, Any]:
        wait_for("the GPUCluster to be ready", lambda: self.gpucluster_state() == "ready", timeout)
        return dict(self.get("gpucluster", "gpu-cluster"))

    def operator_pods(self) -> list[dict[str, Any]]:
        pods = self.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"]
        return list(pods)
