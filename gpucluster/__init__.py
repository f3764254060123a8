"""gpucluster: NVIDIA GPUs on Kubernetes through Dynamic Resource Allocation."""

__version__ = "0.1.0"
