"""Kubernetes' own DRA code as a test oracle: a Go program (this directory) built against
k8s.io/dynamic-resource-allocation, k8s.io/api and k8s.io/apiserver at each version of
:data:`tests.oracle.build.VERSIONS`, asked over JSON lines (:mod:`tests.oracle.client`)."""
