"""``gpucluster certs generate|rotate|inject``: files, modes, one-line errors with exit 2."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from gpucluster import cli
from gpucluster.certs import rotation
from gpucluster.sandbox.server import SandboxThread


def run(*argv: str) -> int:
    try:
        return cli.main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        return int(exc.code or 0)


def test_generate_writes_ca_and_serving_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    assert run("certs", "generate", "--service", "hook", "--namespace", "ns", "--out", str(out)) == 0
    assert capsys.readouterr().out.split() == [str(out / n) for n in ("ca.crt", "tls.crt", "tls.key")]
    assert stat.S_IMODE(os.stat(out / "tls.key").st_mode) == 0o600
    (ca,) = rotation.split_pem_bundle((out / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    assert rotation.issued_by(leaf, ca) and rotation.key_matches(leaf, (out / "tls.key").read_bytes())
    assert rotation.dns_names(leaf) == {"hook", "hook.ns", "hook.ns.svc", "hook.ns.svc.cluster.local"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["generate", "--service", "Bad_Name", "--namespace", "ns", "--out", "{tmp}"],
            '--service: Invalid value: "Bad_Name"',
        ),
        (["generate", "--service", "s", "--namespace", "ns", "--out", "{tmp}/file"], "not a directory"),
        (["generate", "--service", "s", "--namespace", "ns", "--dns-name", "a b", "--out", "{tmp}"], "--dns-name"),
        (["inject", "--ca-file", "{tmp}/missing.pem"], "missing.pem"),
        (["inject", "--ca-file", "{tmp}/file"], "no PEM certificate found"),
        (
            ["rotate", "--namespace", "ns", "--service", "s", "--secret", "s", "--kubeconfig", "{tmp}/nope"],
            "nope: no such file",
        ),
        (["rotate", "--namespace", "ns", "--service", "s", "--secret", "s", "--probe", "nohost"], "--probe"),
        (["rotate", "--namespace", "ns", "--service", "s", "--secret", "s", "--interval", "0"], "--interval"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "file").write_text("not a certificate")
    code = run("certs", *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("gpucluster certs: ") and message in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("certs") == 2
    assert run("certs", "generate", "--service", "s") == 2
    assert "required" in capsys.readouterr().err


def test_help_lists_the_three_actions(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("certs", "--help") == 0
    out = capsys.readouterr().out
    assert all(action in out for action in ("generate", "rotate", "inject"))


def test_no_traceback_from_a_real_process(tmp_path: Path) -> None:
    """The installed entry point, as users run it."""
    result = subprocess.run(
        [sys.executable, "-m", "gpucluster.cli", "certs", "inject", "--ca-file", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_inject_with_nothing_to_inject_names_the_label_it_selects_on(
    sb: SandboxThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to name app.kubernetes.io/managed-by=gpucluster, which the selection never used."""
    out = tmp_path / "certs"
    assert run("certs", "generate", "--service", "hook", "--namespace", "ns", "--out", str(out)) == 0
    capsys.readouterr()
    kubeconfig = str(sb.sandbox.kubeconfig_path)
    assert run("certs", "inject", "--ca-file", str(out / "ca.crt"), "--kubeconfig", kubeconfig) == 1
    err = capsys.readouterr().err
    assert 'labelled gpucluster.nvidia.com/inject-ca-bundle="true"' in err and "managed-by" not in err, err


def test_generate_never_replaces_certificates_already_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    assert run("certs", "generate", "--service", "hook", "--namespace", "ns", "--out", str(out)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert run("certs", "generate", "--service", "hook", "--namespace", "ns", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ca.crt, tls.crt, tls.key already there" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
