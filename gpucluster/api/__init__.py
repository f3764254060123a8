"""API models: GPUCluster (ours), and read views of ClusterPolicy and NVIDIADriver."""

from gpucluster.api.gpucluster import GPUCluster, GPUClusterSpec, GPUClusterStatus
from gpucluster.api.validation import FieldProblem, Validated, validate_gpucluster, validate_model
from gpucluster.api.views import ClusterPolicy, NVIDIADriver

__all__ = [
    "ClusterPolicy",
    "FieldProblem",
    "GPUCluster",
    "GPUClusterSpec",
    "GPUClusterStatus",
    "NVIDIADriver",
    "Validated",
    "validate_gpucluster",
    "validate_model",
]
