"""The API client's proxy is the environment's, decided once at connect (as client-go's
ProxyFromEnvironment), and its session never asks the environment or ~/.netrc per request."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.aio.client.configuration import Configuration

from gpucluster.kube.client import _proxy_once


def configuration(host: str) -> Any:
    c = Configuration()
    c.host = host
    return c


@pytest.fixture(autouse=True)
def _clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


def test_no_proxy_in_the_environment_means_none_and_no_per_request_lookups() -> None:
    c = configuration("https://10.0.0.1:6443")
    _proxy_once(c)
    assert c.proxy is None and c.client_session_kwargs == {"trust_env": False}


def test_https_proxy_is_used_for_an_https_api_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    c = configuration("https://api.example.com:6443")
    _proxy_once(c)
    assert c.proxy == "http://proxy.corp:3128"


def test_no_proxy_bypasses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "example.com,10.0.0.0/8")
    c = configuration("https://api.example.com:6443")
    _proxy_once(c)
    assert c.proxy is None


def test_a_configured_proxy_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    c = configuration("https://api.example.com:6443")
    c.proxy = "http://kubeconfig-proxy:8080"
    c.client_session_kwargs = {"read_bufsize": 1}
    _proxy_once(c)
    assert c.proxy == "http://kubeconfig-proxy:8080"
    assert c.client_session_kwargs == {"read_bufsize": 1, "trust_env": False}
