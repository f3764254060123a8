"""Serving certificates: a bad pair never replaces a good one, the live one is watched for expiry,
and what is loaded is exactly what was validated."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from gpucluster.certs.authority import KeyPair, new_ca, new_serving_cert
from gpucluster.webhook.tls import ReloadingTLS, parse_pair
from tests.webhook.test_server_hardening import start, write_pair

SERVICE = "gpucluster-webhook.gpu-operator.svc"
NAMES = [SERVICE, "localhost"]
DAY = dt.timedelta(days=1)


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def pair(ca: KeyPair, names: list[str] = NAMES, **kw: object) -> KeyPair:
    return new_serving_cert(ca, names, ip_addresses=["127.0.0.1"], **kw)  # type: ignore[arg-type]


def tls_for(tmp: Path, first: KeyPair, clock: Clock | None = None) -> ReloadingTLS:
    write_pair(tmp, first)
    tls = ReloadingTLS(
        tmp / "tls.crt", tmp / "tls.key", required_names=[SERVICE], expiry_margin=3600, clock=clock or Clock()
    )
    assert tls.reload_if_changed() and not tls.problems()
    return tls


def served_serial(tls: ReloadingTLS) -> int:
    """The serial a handshake through the listening context gets (in memory, no sockets)."""
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(c_in, c_out, server_hostname=SERVICE)
    srv = tls.context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side, out, into in ((cli, c_out, s_in), (srv, s_out, c_in)):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
            into.write(out.read())
    der = cli.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("expired", "expired at"),
        ("not yet valid", "not valid before"),
        ("nearly expired", "in less than 3600s"),
        ("wrong names", f"not for {SERVICE}"),
        ("foreign key", "key does not match the certificate"),
        ("garbage", "certificate does not parse"),
    ],
)
def test_a_bad_pair_never_replaces_a_good_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: str, why: str
) -> None:
    ca = new_ca()
    good = pair(ca)
    tls = tls_for(tmp_path, good)
    now = dt.datetime.now(dt.UTC)
    candidates = {
        "expired": lambda: pair(ca, now=now - 30 * DAY, lifetime=DAY),
        "not yet valid": lambda: pair(ca, now=now + DAY),
        "nearly expired": lambda: pair(ca, lifetime=dt.timedelta(minutes=30)),
        "wrong names": lambda: pair(ca, ["other.example.com"]),
        "foreign key": lambda: KeyPair(pair(ca).cert_pem, new_ca().key_pem),
        "garbage": lambda: KeyPair(b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n", good.key_pem),
    }
    write_pair(tmp_path, candidates[bad]())
    with caplog.at_level(logging.INFO, logger="gpucluster.webhook.tls"):
        assert tls.reload_if_changed() is False
        assert tls.reload_if_changed() is False  # polled again: the same refusal is not logged twice
    [record] = [r for r in caplog.records if r.name == "gpucluster.webhook.tls"]
    assert (
        record.levelno == logging.ERROR
        and why in record.getMessage()
        and "keeping the live pair" in record.getMessage()
    )
    assert served_serial(tls) == good.certificate.serial_number and tls.problem() is None and tls.reloads == 0
    newer = pair(ca)
    write_pair(tmp_path, newer)  # the next good pair is taken
    assert tls.reload_if_changed() and served_serial(tls) == newer.certificate.serial_number


def test_what_is_loaded_is_what_was_validated(tmp_path: Path) -> None:
    """The files change right after they were read: the validated bytes are served, not the new files."""
    ca = new_ca()
    tls = tls_for(tmp_path, pair(ca))
    good = pair(ca)
    write_pair(tmp_path, good)
    read = tls._read

    def read_then_swap() -> tuple[bytes, bytes] | None:
        files = read()
        (tmp_path / "tls.key").write_bytes(new_ca().key_pem)  # a writer races the reload
        return files

    tls._read = read_then_swap  # type: ignore[method-assign]
    assert tls.reload_if_changed()
    assert served_serial(tls) == good.certificate.serial_number
    assert tls.live == parse_pair(good.cert_pem, good.key_pem)


def test_a_bad_live_pair_is_replaced_by_a_less_bad_one(tmp_path: Path) -> None:
    ca = new_ca()
    clock = Clock()
    tls = tls_for(tmp_path, pair(ca, lifetime=2 * DAY), clock)
    clock.now += 3 * DAY  # the live pair has expired
    assert "expired at" in (tls.problem() or "")
    short = pair(ca, lifetime=dt.timedelta(minutes=30), now=clock.now)
    write_pair(tmp_path, short)
    assert tls.reload_if_changed()  # nearly expired beats expired
    assert tls.problem() is None  # still valid: servable, the replica stays ready
    assert "in less than 3600s" in (tls.expiry_warning() or "")
    write_pair(tmp_path, pair(ca, ["other.example.com"], now=clock.now))
    assert not tls.reload_if_changed()  # wrong names are worse than nearly expired
    write_pair(tmp_path, pair(ca, now=clock.now))
    assert tls.reload_if_changed() and tls.problem() is None


async def test_nearing_expiry_is_loud_but_ready_and_only_expiry_fails_readiness(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    srv, task = await start(tmp_path, clock=clock, expiry_margin=3600)
    try:
        ctx = srv.client_context()

        async def get(path: str) -> tuple[int, str]:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"https://127.0.0.1:{srv.port}{path}", ssl=ctx) as r,
            ):
                return r.status, await r.text()

        assert (await get("/readyz"))[0] == 200
        assert srv.tls.live is not None
        left = srv.metric("gpucluster_webhook_certificate_expiry_seconds")
        assert abs(left - (srv.tls.live.not_after - clock.now).total_seconds()) < 5

        with caplog.at_level(logging.ERROR, logger="gpucluster.webhook.tls"):
            clock.now = srv.tls.live.not_after - dt.timedelta(minutes=10)  # within the margin
            status, text = await get("/readyz")
            assert status == 200, text  # still valid: every replica keeps serving
            assert "in less than 3600s" in (srv.tls.expiry_warning() or "")
            assert 0 < srv.metric("gpucluster_webhook_certificate_expiry_seconds") < 3600
            async with asyncio.timeout(5):  # the watcher's next poll logs it as an error
                while not any("in less than 3600s" in r.getMessage() for r in caplog.records):
                    await asyncio.sleep(0.01)
            clock.now = srv.tls.live.not_after + dt.timedelta(seconds=1)  # expired
            status, text = await get("/readyz")
            assert status == 503 and "serving certificate expired at" in text
            assert -5 < srv.metric("gpucluster_webhook_certificate_expiry_seconds") < 0
            async with asyncio.timeout(5):  # the watcher's next poll logs it
                while not any("expired at" in r.getMessage() for r in caplog.records):
                    await asyncio.sleep(0.01)
        assert all(r.levelno == logging.ERROR for r in caplog.records if r.name == "gpucluster.webhook.tls")

        # The rotator writes a new pair: picked up, ready again.
        write_pair(srv.dir, new_serving_cert(srv.ca, ["localhost"], ip_addresses=["127.0.0.1"], lifetime=800 * DAY))
        async with asyncio.timeout(5):
            while (await get("/readyz"))[0] != 200:
                await asyncio.sleep(0.02)
    finally:
        srv.stop.set()
        await asyncio.wait_for(task, 10)


def test_an_expired_pair_at_start_is_served_but_not_ready(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ca = new_ca()
    write_pair(tmp_path, pair(ca, now=dt.datetime.now(dt.UTC) - 30 * DAY, lifetime=DAY))
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", required_names=[SERVICE])
    with caplog.at_level(logging.ERROR, logger="gpucluster.webhook.tls"):
        assert tls.reload_if_changed()  # nothing better to serve: clients get a clear TLS error
    assert tls.loaded and "expired at" in (tls.problem() or "")
    assert any("loaded with problems" in r.getMessage() for r in caplog.records)
    assert tls.seconds_to_expiry() < 0
