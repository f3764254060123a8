"""gpucluster cleanup and handover (the chart's hooks): bad input and an unreachable API server end in
one line and exit code 2, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpucluster.cli import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unreachable(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{_closed_port()}'}}}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["cleanup", "--selector=app.kubernetes.io/instance=r", "--namespace=ns"],
        ["cleanup", "--namespace=ns", "--leader-lease=app=x", "--timeout=5"],
        ["handover", "gpuclusters.nvidia.com/gpu-cluster", "--release=r", "--release-namespace=ns"],
    ],
)
def test_an_unreachable_api_server_is_one_line(
    argv: list[str], unreachable: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, f"--kubeconfig={unreachable}"]) == 2
    err = capsys.readouterr().err
    assert "the API server is unreachable" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cleanup", "--namespace=ns"], "--selector is required"),
        (["cleanup", "--selector=a=b", "--namespace=ns", "--timeout=0"], "--timeout must be positive"),
        (["handover", "pods/x", "--release=r", "--release-namespace=ns"], "expected gpuclusters.nvidia.com/NAME"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
