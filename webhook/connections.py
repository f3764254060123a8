"""Who keeps a connection slot when the webhook is full: the functional core of the connection caps.

The API server opens a connection when it has a review to send and keeps it alive between
reviews; a peer that connects and sends nothing, or dribbles a request head, only holds a slot.
So a full replica does not turn the API server away while such connections exist: a new
connection takes the slot of one that is doing the least, in this order:

1. ``handshake``: TCP connected, TLS handshake not done (nothing or only part of a ClientHello);
2. ``fresh``: handshake done, not one byte of a request yet;
3. ``idle``: a kept-alive connection between requests (the longest idle first);
4. ``reading``: a request head or body still arriving (the oldest first);

and never one whose review is being answered (``answering``). Within a rank the victim comes from
the peer holding the most connections, then the oldest. Besides the total cap
(``--max-connections``), each peer address has its own (``--max-connections-per-peer``): a peer at
its cap can only displace its own connections, so one address never takes more than its share from
the API servers. Only when every connection in reach is answering is the new one refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

Stage = Literal["handshake", "fresh", "idle", "reading", "answering"]
_RANK: dict[Stage, int] = {"handshake": 0, "fresh": 1, "idle": 2, "reading": 3}


@dataclass(eq=False)
class Slot:
    """One accepted connection as the table sees it."""

    peer: str
    stage: Stage
    since: float  # when it entered ``stage``
    evict: Callable[[], None] = field(default=lambda: None, repr=False)
    gone: bool = False


def victim(slots: Iterable[Slot], per_peer: dict[str, int]) -> Slot | None:
    """The slot a new connection may take from ``slots``, or None when all are answering."""
    best: tuple[int, int, float] | None = None
    chosen = None
    for slot in slots:
        rank = _RANK.get(slot.stage)
        if rank is None or slot.gone:
            continue
        key = (rank, -per_peer.get(slot.peer, 0), slot.since)
        if best is None or key < best:
            best, chosen = key, slot
    return chosen


@dataclass
class Decision:
    admitted: bool
    evicted: Slot | None = None
    why: str = ""  # "total" or "peer": the cap that was reached


class ConnectionTable:
    """Open connections by peer, with the two caps (event-loop thread only)."""

    def __init__(self, limit: int, per_peer_limit: int) -> None:
        self.limit = limit
        self.per_peer_limit = per_peer_limit
        self.slots: set[Slot] = set()
        self.by_peer: dict[str, set[Slot]] = {}
        self.per_peer: dict[str, int] = {}

    @property
    def open(self) -> int:
        return len(self.slots)

    def decide(self, peer: str) -> Decision:
        """Whether a new connection from ``peer`` gets a slot, and whose it takes (pure: nothing changes)."""
        if self.per_peer.get(peer, 0) >= self.per_peer_limit:
            taken = victim(self.by_peer.get(peer, ()), self.per_peer)
            return Decision(taken is not None, taken, "peer")
        if len(self.slots) >= self.limit:
            taken = victim(self.slots, self.per_peer)
            return Decision(taken is not None, taken, "total")
        return Decision(True)

    def admit(self, peer: str, now: float, evict: Callable[[], None] = lambda: None) -> tuple[Slot | None, Decision]:
        """Apply :meth:`decide`: evict the victim (if any) and record the new connection."""
        decision = self.decide(peer)
        if not decision.admitted:
            return None, decision
        if decision.evicted is not None:
            self.leave(decision.evicted)
            decision.evicted.evict()
        slot = Slot(peer, "handshake", now, evict)
        self.slots.add(slot)
        self.by_peer.setdefault(peer, set()).add(slot)
        self.per_peer[peer] = self.per_peer.get(peer, 0) + 1
        return slot, decision

    def leave(self, slot: Slot) -> None:
        """The connection ended (idempotent)."""
        if slot.gone:
            return
        slot.gone = True
        self.slots.discard(slot)
        peers = self.by_peer.get(slot.peer)
        if peers is not None:
            peers.discard(slot)
            if not peers:
                del self.by_peer[slot.peer]
        left = self.per_peer.get(slot.peer, 1) - 1
        if left > 0:
            self.per_peer[slot.peer] = left
        else:
            self.per_peer.pop(slot.peer, None)
