"""``fit``: does it fit now, and would it fit on an empty node (nothing allocated)?"""

from __future__ import annotations

from gpucluster.dra.allocator import explain, fit
from tests.test_allocator import GPU, allocated, claim, dev, device_class, exact, rslice


def _cluster() -> list[dict[str, object]]:
    return [
        rslice("s1", "n1", "p1", dev("d0"), dev("d1")),
        rslice("s2", "n2", "p2", dev("d0")),
        device_class(),
    ]


def test_fits_now() -> None:
    answer = fit([claim(exact(count=2))], _cluster())
    assert answer.fits_now and answer.fits_when_empty
    assert answer.when_empty is answer.now
    assert answer.one_line() == ""


def test_fits_once_devices_are_freed() -> None:
    cluster = [*_cluster(), allocated("other", (GPU, "p1", "d1"))]
    answer = fit([claim(exact(count=2))], cluster)
    assert not answer.fits_now
    assert answer.fits_when_empty
    assert answer.empty_nodes() == ["n1"]
    assert answer.one_line().endswith("; would fit once devices are freed on n1")
    assert answer.one_line().startswith("2/3 devices usable for request gpu on 2 nodes, need 2 on one node: 1 in use")


def test_never_fits() -> None:
    cluster = [*_cluster(), allocated("other", (GPU, "p1", "d1"))]
    answer = fit([claim(exact(count=3))], cluster)
    assert not answer.fits_now and not answer.fits_when_empty
    # The counts are today's (the device in use is in use: it used to read "3/3 usable"), then why
    # no empty node helps either.
    assert answer.one_line() == (
        "2/3 devices usable for request gpu on 2 nodes, need 3 on one node: 1 in use; "
        "does not fit even on an empty node: 3/3 devices usable for request gpu on 2 nodes, need 3 on one node"
    )


def test_nothing_allocated_is_decided_once() -> None:
    answer = fit([claim(exact(count=3))], _cluster())
    assert answer.when_empty is answer.now


def test_explain_assume_empty_ignores_allocations() -> None:
    cluster = [*_cluster(), allocated("other", (GPU, "p1", "d0"), (GPU, "p1", "d1"), (GPU, "p2", "d0"))]
    assert not explain([claim(exact())], cluster).satisfiable
    assert explain([claim(exact())], cluster, assume_empty=True).satisfiable
