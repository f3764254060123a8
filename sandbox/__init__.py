"""A local double of kube-apiserver (and, later, a simulated GPU cluster) for trying the project and e2e tests."""

from sandbox.server import Sandbox, SandboxThread

__all__ = ["Sandbox", "SandboxThread"]
