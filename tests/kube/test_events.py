"""The shared Event recorder: client-go's correlation, through a sink that stores what it is given."""

from __future__ import annotations

from typing import Any

from gpucluster.kube.events import COMBINED, SPAM_BURST, EventRecorder

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u2"}}


class Sink:
    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.fail_updates = False

    async def create(self, event: dict[str, Any]) -> bool:
        md = event["metadata"]
        self.events[(md["namespace"], md["name"])] = dict(event)
        return True

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> bool:
        if self.fail_updates or (namespace, name) not in self.events:
            return False
        self.events[(namespace, name)].update(changes)
        return True


def _recorder(sink: Sink, clock: list[float]) -> EventRecorder:
    stamps = iter(f"2026-01-01T00:00:{i:02d}Z" for i in range(60))
    return EventRecorder(sink, "me", clock=lambda: clock[0], now=lambda: next(stamps))


async def test_a_repeat_bumps_count_and_last_timestamp_of_one_event() -> None:
    sink, clock = Sink(), [0.0]
    rec = _recorder(sink, clock)
    for _ in range(3):
        await rec.record(POD, "Warning", "Busy", "all GPUs in use")
    [event] = sink.events.values()
    assert event["count"] == 3
    assert event["firstTimestamp"] == "2026-01-01T00:00:00Z" and event["lastTimestamp"] == "2026-01-01T00:00:02Z"
    assert event["metadata"]["namespace"] == "ml" and event["metadata"]["name"].startswith("p.")
    assert event["involvedObject"] == {
        "kind": "Pod", "namespace": "ml", "name": "p", "uid": "u2", "apiVersion": "v1", "resourceVersion": None,
    }  # fmt: skip
    assert event["source"] == {"component": "me"}


async def test_cluster_scoped_objects_get_events_in_default_with_an_empty_involved_namespace() -> None:
    sink = Sink()
    await _recorder(sink, [0.0]).record(NODE, "Normal", "Labelled", "x")
    [(namespace, _)] = sink.events
    [event] = sink.events.values()
    assert namespace == "default" and event["involvedObject"]["namespace"] == ""


async def test_a_different_message_or_object_is_a_new_event() -> None:
    sink = Sink()
    rec = _recorder(sink, [0.0])
    await rec.record(POD, "Warning", "Busy", "a")
    await rec.record(POD, "Warning", "Busy", "b")
    await rec.record(NODE, "Warning", "Busy", "a")
    assert len(sink.events) == 3


async def test_the_tenth_similar_message_is_combined_into_one_event() -> None:
    sink = Sink()
    rec = _recorder(sink, [0.0])
    for i in range(15):
        await rec.record(POD, "Warning", "Busy", f"message {i}")
    assert len(sink.events) == 10  # 9 distinct, then one combined event updated by the rest
    combined = [e for e in sink.events.values() if e["message"].startswith(COMBINED)]
    assert len(combined) == 1
    assert combined[0]["count"] == 6 and combined[0]["message"] == COMBINED + "message 14"


async def test_a_burst_past_the_spam_limit_is_dropped_until_tokens_refill() -> None:
    sink, clock = Sink(), [0.0]
    rec = _recorder(sink, clock)
    for _ in range(SPAM_BURST + 5):
        await rec.record(POD, "Warning", "Busy", "same")
    [event] = sink.events.values()
    assert event["count"] == SPAM_BURST and rec.dropped == 5
    clock[0] += 300.0  # one token per 5 minutes
    await rec.record(POD, "Warning", "Busy", "same")
    assert event["count"] == SPAM_BURST + 1


async def test_a_repeat_of_a_deleted_event_creates_a_new_one() -> None:
    sink = Sink()
    rec = _recorder(sink, [0.0])
    await rec.record(POD, "Warning", "Busy", "a")
    sink.events.clear()  # deleted (TTL) behind the recorder's back
    await rec.record(POD, "Warning", "Busy", "a")
    [event] = sink.events.values()
    assert event["count"] == 1


async def test_a_failed_update_drops_that_occurrence_but_keeps_the_event() -> None:
    class Flaky(Sink):
        async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> bool | None:
            if self.fail_updates:
                return None  # a 500 or a timeout: not "gone"
            return await super().update(namespace, name, changes)

    sink = Flaky()
    rec = _recorder(sink, [0.0])
    await rec.record(POD, "Warning", "Busy", "a")
    sink.fail_updates = True
    await rec.record(POD, "Warning", "Busy", "a")
    sink.fail_updates = False
    await rec.record(POD, "Warning", "Busy", "a")
    [event] = sink.events.values()  # no duplicate Event with its count reset to 1
    assert event["count"] == 2
