"""The shared test kit: doubles and builders that several test packages need.

- :mod:`tests.kit.fakekube`: :class:`~tests.kit.fakekube.FakeKube`, one in-memory API server behind the
  project's client interface (:class:`gpucluster.kube.client.Kube`).
- :mod:`tests.kit.pods`: :func:`~tests.kit.pods.defaulted_pod` and
  :func:`~tests.kit.pods.defaulted_container`, Pods as kube-apiserver defaults them.

Nothing is imported here, so that importing the light builders does not pay for the heavy double.
"""
