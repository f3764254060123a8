"""Kubernetes' own control plane on one machine, the judge of the end-to-end tests.

``build`` compiles etcd, kube-apiserver, kube-controller-manager and kube-scheduler from Go
modules into a cache; ``cluster.ControlPlane`` runs them on loopback with the kubelet stand-in
(``nodes``) for simulated GPU nodes and its Service proxy (``proxy``). ``gpucluster cluster``
is the command line for both.
"""
