"""The two backends end-to-end tests run against: the sandbox (the Python double) and the real
control plane (``sandbox.controlplane``: kube-apiserver, kube-controller-manager, kube-scheduler,
etcd built from Go modules). ``backends()`` parametrizes a test over both.

Where the real control plane is not built, its cases skip with one line saying how to build it;
under CI=true they fail instead, so a CI run never loses the tier silently.
"""

from __future__ import annotations

import os
import shutil

import pytest

from sandbox.controlplane import build

SANDBOX = "sandbox"
KUBE = "kube"


def kube_version() -> str:
    """The Kubernetes version the real-control-plane cases run (``GPUCLUSTER_KUBE_VERSION``, default 1.34)."""
    return os.environ.get("GPUCLUSTER_KUBE_VERSION", build.DEFAULT_VERSION)


def require_kube(version: str | None = None) -> build.Binaries:
    """The built control plane, or skip (fail under CI=true) with how to build it."""
    version = version or kube_version()
    found = build.cached(version)
    if found is not None:
        return found
    if shutil.which("go") is None:
        reason = f"real control plane {version}: Go is not installed (install Go >= 1.24, then `make kube`)"
    else:
        reason = f"real control plane {version} not built: run `make kube` (about 7 minutes cold per version)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason + "; CI=true never skips this tier")
    pytest.skip(reason)


def backends() -> list[str]:
    return [SANDBOX, KUBE]
