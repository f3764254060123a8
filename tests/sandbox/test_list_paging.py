"""Paged lists do linear work: each page starts by bisection from the continue key, never by
re-sorting and skipping everything before it (quadratic at 10,000 nodes)."""

from __future__ import annotations

from gpucluster.sandbox.apiserver.core import ApiCore, Context
from gpucluster.sandbox.apiserver.store import Store
from tests.sandbox.conftest import rt

CTX = Context(field_manager="test")


def fill(core: ApiCore, count: int) -> None:
    # Straight into the store: the test is about the list path, not admission.
    for i in range(count):
        core.store.create(("", "nodes"), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:05d}"}})


def paged_list(core: ApiCore, limit: int) -> tuple[list[str], int]:
    nodes = rt(core, "", "v1", "nodes")
    names: list[str] = []
    token, pages = "", 0
    while True:
        page = core.list(nodes, None, limit=limit, continue_token=token)
        names.extend(o["metadata"]["name"] for o in page.items)
        pages += 1
        token = page.continue_token
        if not token:
            return names, pages


def visited_for(count: int) -> int:
    core = ApiCore()
    fill(core, count)
    before = core.store.keys_visited
    names, pages = paged_list(core, 500)
    assert names == [f"node-{i:05d}" for i in range(count)]
    assert pages == count // 500
    return core.store.keys_visited - before


def test_paged_list_visits_each_object_about_once() -> None:
    ten, twenty = visited_for(10_000), visited_for(20_000)
    # One extra key per page (the one that shows there is more), nothing re-scanned.
    assert ten <= 10_000 + 10_000 // 500 + 1
    assert twenty <= 2 * ten + 2


async def test_paging_survives_writes_between_pages(core: ApiCore) -> None:
    fill(core, 30)
    nodes = rt(core, "", "v1", "nodes")
    first = core.list(nodes, None, limit=10)
    core.store.delete(("", "nodes"), "", "node-00005")  # before the key: no effect on the rest
    core.store.delete(("", "nodes"), "", "node-00010")  # the first of the next page
    second = core.list(nodes, None, limit=10, continue_token=first.continue_token)
    assert [o["metadata"]["name"] for o in second.items][:2] == ["node-00011", "node-00012"]
    assert second.items[-1]["metadata"]["name"] == "node-00020"


def test_iteration_tolerates_deletes_and_creates_while_yielding() -> None:
    store = Store()
    key = ("", "configmaps")
    for ns in ("a", "b"):
        for i in range(5):
            store.create(key, {"metadata": {"namespace": ns, "name": f"cm-{i}"}})
    seen = []
    for obj in store.iter(key):
        md = obj["metadata"]
        seen.append((md["namespace"], md["name"]))
        if md["name"] == "cm-1":
            store.delete(key, md["namespace"], "cm-1")
            store.delete(key, md["namespace"], "cm-2")
            store.create(key, {"metadata": {"namespace": md["namespace"], "name": "cm-10"}})
    assert seen == [(ns, n) for ns in ("a", "b") for n in ("cm-0", "cm-1", "cm-10", "cm-3", "cm-4")]
    assert [o["metadata"]["name"] for o in store.iter(key, "b")] == ["cm-0", "cm-10", "cm-3", "cm-4"]
    assert [o["metadata"]["name"] for o in store.iter(key, "b", after=("a", "zzz"))] == [
        "cm-0",
        "cm-10",
        "cm-3",
        "cm-4",
    ]
