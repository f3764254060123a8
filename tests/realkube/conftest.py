"""Fixtures of the real-control-plane tier: ``kube`` (the real control plane, one per module),
``sandbox_api`` and ``kube_api`` (raw clients of the two backends, see :mod:`tests.realkube.api`),
and ``apis`` (both, for cases that must agree)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane
from gpucluster.sandbox.server import SandboxThread
from tests.e2e.backends import kube_version, require_kube
from tests.realkube.api import Api


@pytest.fixture(scope="module")
def kube() -> Iterator[ControlPlane]:
    """The real control plane with two simulated GPU nodes of four GPUs."""
    require_kube()
    plane = ControlPlane(ClusterOptions(version=kube_version(), nodes=2, gpus_per_node=4))
    plane.up()
    try:
        yield plane
    finally:
        plane.stop()


def kube_client(plane: ControlPlane) -> Api:
    assert plane.pki is not None
    return Api(
        "kube", plane.server, plane.pki.ca_file, admin_cert=plane.admin_cert(),
        webhook_client_ca=plane.pki.webhook_client_ca_file,
    )  # fmt: skip


@pytest.fixture(scope="module")
def kube_api(kube: ControlPlane) -> Api:
    return kube_client(kube)


@pytest.fixture(scope="module")
def sandbox_api() -> Iterator[Api]:
    """A plain sandbox (RBAC on, no simulated cluster)."""
    runner = SandboxThread()
    sandbox = runner.start()
    assert sandbox.pki is not None
    try:
        yield Api(
            "sandbox", sandbox.url, sandbox.pki.ca_file, admin_token=sandbox.token,
            webhook_client_ca=sandbox.pki.webhook_client_ca_file,
        )  # fmt: skip
    finally:
        runner.stop()


@pytest.fixture(scope="module")
def apis(sandbox_api: Api, kube_api: Api) -> list[Api]:
    return [sandbox_api, kube_api]
