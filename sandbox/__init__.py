"""A local double of kube-apiserver and a simulated GPU cluster for trying the project and e2e tests."""

from gpucluster.sandbox.server import Sandbox, SandboxThread
from gpucluster.sandbox.sim import SimulationOptions

__all__ = ["Sandbox", "SandboxThread", "SimulationOptions"]
