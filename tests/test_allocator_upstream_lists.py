"""Kubernetes' structured allocator test table: the DRAListTypeAttributes cases (KEP-5491).

Each ``pytest.param`` id is the name of a ``list-attributes-*`` case in upstream's
``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/allocator_testing.go``
(kubernetes/kubernetes, the 1.36 table; k8s.io/dynamic-resource-allocation v0.36.2 has the same
23 cases). They run at Kubernetes 1.36, where the gate exists (alpha, off by default), with
every gate the allocator reads set as upstream's ``Features`` has it (off unless the case sets
it), except DRAAdminAccess: it is locked on in 1.36, and no case asks for admin access. The
builders and the runner's conventions are those of ``tests/test_allocator_upstream.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.dra import gates
from tests.test_allocator_upstream import (
    _FEATURES,
    CLAIM0,
    CLASS_A,
    DRIVER_A,
    ERROR,
    NODE1,
    POOL1,
    Case,
    Obj,
    answer,
    case,
    claim,
    distinct,
    explain_case,
    match,
    picks_a,
    request,
    rslice,
)

# Upstream Features field -> gate, with the one this table adds. AdminAccess is left at 1.36's
# locked default (see the module docstring).
FEATURES = {
    **{name: gate for name, gate in _FEATURES.items() if gate != gates.ADMIN_ACCESS},
    "ListTypeAttributes": gates.LIST_TYPE_ATTRIBUTES,
}
LISTS = ("ListTypeAttributes",)
LISTS_CC = ("ListTypeAttributes", "ConsumableCapacity")
CC = ("ConsumableCapacity",)


def run(c: Case) -> list[Any] | str | None:
    """``tests.test_allocator_upstream.run`` at 1.36 with :data:`FEATURES`."""
    return answer(c, explain_case(c, version="1.36", features=FEATURES))


def dev(name: str, attribute: str, value: Obj) -> Obj:
    """upstream device(name, nil, {attribute: value}); ``value`` a DeviceAttribute as JSON."""
    return {"name": name, "attributes": {attribute: value}}


def devices(attribute: str, *values: Obj) -> list[Obj]:
    """One slice on node-1 with device-1, device-2, ... holding ``values``."""
    return [
        rslice("slice-1", NODE1, POOL1, DRIVER_A, *(dev(f"device-{i}", attribute, v) for i, v in enumerate(values, 1)))
    ]


def one_claim(constraint: Obj, *requests: Obj) -> list[Obj]:
    return [claim(CLAIM0, *requests, constraints=[constraint])]


S, N, B, V = "stringAttribute", "numa", "boolAttribute", "driverVersion"
MATCH_S, MATCH_I, MATCH_B, MATCH_V = match(S), match(N), match(B), match(V)
DISTINCT_S, DISTINCT_I, DISTINCT_B, DISTINCT_V = distinct(S), distinct(N), distinct(B), distinct(V)
UNSUPPORTED = "unsupported attribute value"


def req(count: int) -> Obj:
    return request("req-0", CLASS_A, count)


def strings(*values: str) -> Obj:
    return {"strings": list(values)}


def string(value: str) -> Obj:
    return {"string": value}


MATCH = [
    case(
        "list-attributes-match-constaint-scalar-string-values",
        Case(
            one_claim(MATCH_S, req(2)),
            devices(S, string("value1"), string("value1")),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-list-of-string-values-with-common-elements",
        Case(
            one_claim(MATCH_S, req(2)),
            devices(S, strings("value1", "value2", "value3"), strings("value2", "value3", "value4")),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-list-of-string-values-with-partially-common-elements",
        Case(
            one_claim(MATCH_S, req(3)),
            devices(S, strings("value1", "value2"), strings("value2", "value3"), strings("value3", "value1")),
            expect=None,
            features=LISTS,
        ),
    ),
    case(
        # Upstream's claim has two requests both named req-0 (its tests bypass validation);
        # the API server refuses that, and so do we: an input error, where upstream finds no
        # allocation. With distinct names (below) the answer is upstream's.
        "list-attributes-match-constaint-list-of-string-values-without-common-elements",
        Case(
            one_claim(MATCH_S, req(1), req(1)),
            devices(S, strings("value1", "value2"), strings("value3", "value4")),
            expect=ERROR,
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-mixed-scalar-and-list-of-string-values-with-common-elements",
        Case(
            one_claim(MATCH_S, req(2)),
            devices(S, string("value1"), strings("value1", "value2")),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-mixed-scalar-and-list-of-string-values-with-partially-common-elements",
        Case(
            one_claim(MATCH_S, req(3)),
            devices(S, string("value1"), strings("value1", "value2"), strings("value2", "value3")),
            expect=None,
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-mixed-scalar-and-list-of-string-values-without-common-elements",
        Case(
            one_claim(MATCH_S, req(2)),
            devices(S, string("value1"), strings("value2", "value3")),
            expect=None,
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-list-of-int-values-with-common-elements",
        Case(
            one_claim(MATCH_I, req(2)),
            devices(N, {"ints": [0, 1, 2]}, {"ints": [1, 2, 3]}),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-list-of-bool-values-with-common-elements",
        Case(
            one_claim(MATCH_B, req(2)),
            devices(B, {"bools": [True, False]}, {"bools": [True]}),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-list-of-version-values-with-common-elements",
        Case(
            one_claim(MATCH_V, req(2)),
            devices(V, {"versions": ["1.0.0", "1.1.0", "2.0.0"]}, {"versions": ["1.1.0", "2.0.0", "2.1.0"]}),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS,
        ),
    ),
    case(
        "list-attributes-match-constaint-with-empty-or-unknown-type",
        Case(
            one_claim(MATCH_S, req(2)),
            devices(S, {}, strings()),
            expect=ERROR,
            features=LISTS,
            error=UNSUPPORTED,
        ),
    ),
    case(
        "list-attributes-disabled-match-constraint-with-lists",
        Case(
            one_claim(MATCH_S, req(2)),
            devices(S, strings("value1", "value2", "value3"), strings("value2", "value3", "value4")),
            expect=ERROR,
            error=UNSUPPORTED,
        ),
    ),
]

DISTINCT = [
    case(
        "list-attributes-distinct-constraint-scalar-string-values-all-distinct",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, string("value1"), string("value2")),
            expect=picks_a("req-0", "device-1", "device-2"),
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-scalar-string-values-not-distinct",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, string("value1"), string("value1")),
            expect=None,
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-list-of-string-values-all-distinct",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, strings("value1", "value2"), strings("value2", "value3"), strings("value3", "value4")),
            expect=picks_a("req-0", "device-1", "device-3"),
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-list-of-string-values-with-common-elements",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, strings("value1", "value2", "value3"), strings("value2", "value4", "value5")),
            expect=None,
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-mixed-scalar-and-list-all-distinct",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, string("value1"), strings("value1", "value2"), strings("value2", "value3")),
            expect=picks_a("req-0", "device-1", "device-3"),
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-mixed-scalar-and-list-with-common-elements",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, string("value1"), strings("value1", "value2")),
            expect=None,
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-list-of-int-values-all-distinct",
        Case(
            one_claim(DISTINCT_I, req(2)),
            devices(N, {"ints": [0, 1]}, {"ints": [1, 2]}, {"ints": [2, 3]}),
            expect=picks_a("req-0", "device-1", "device-3"),
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-list-of-bool-values-all-distinct",
        Case(
            one_claim(DISTINCT_B, req(2)),
            devices(B, {"bools": [True]}, {"bools": [True, False]}, {"bools": [False]}),
            expect=picks_a("req-0", "device-1", "device-3"),
            features=LISTS_CC,
        ),
    ),
    case(
        "list-attributes-distinct-constraint-list-of-version-values-all-distinct",
        Case(
            one_claim(DISTINCT_V, req(2)),
            devices(
                V, {"versions": ["1.0.0", "1.1.0"]}, {"versions": ["1.1.0", "2.0.0"]}, {"versions": ["2.0.0", "2.1.0"]}
            ),
            expect=picks_a("req-0", "device-1", "device-3"),
            features=LISTS_CC,
        ),
    ),
    case(
        # device-2's VersionValues is nil: an attribute with no value ({} in JSON).
        "list-attributes-distinct-constaint-with-empty-or-unknown-type",
        Case(
            one_claim(DISTINCT_V, req(2)),
            devices(V, {"versions": []}, {}),
            expect=ERROR,
            features=LISTS_CC,
            error=UNSUPPORTED,
        ),
    ),
    case(
        "list-attributes-disabled-distinct-constraint-with-lists",
        Case(
            one_claim(DISTINCT_S, req(2)),
            devices(S, strings("value1", "value2", "value3"), strings("value2", "value3", "value4")),
            expect=ERROR,
            features=CC,
            error=UNSUPPORTED,
        ),
    ),
]


@pytest.mark.parametrize("c", MATCH + DISTINCT)
def test_upstream_list_attributes_case(c: Case) -> None:
    assert run(c) == c.expect


def test_the_duplicate_request_names_case_with_distinct_names() -> None:
    def two_requests(second: Obj) -> Case:
        return Case(
            one_claim(MATCH_S, request("req-0", CLASS_A), request("req-1", CLASS_A)),
            devices(S, strings("value1", "value2"), second),
            features=LISTS,
        )

    c = two_requests(strings("value3", "value4"))
    assert run(c) is None
    result = explain_case(c, version="1.36", features=FEATURES)
    assert result is not None
    assert result.nodes[0].reasons[-1] == (
        "request req-1: driver-a/pool-1/device-2: constraint matchAttribute driver-a/stringAttribute "
        "(['value3', 'value4'] has no value in common with ['value1', 'value2'] of the devices already chosen)"
    )
    # One value in common: each request gets its device.
    c = two_requests(strings("value2", "value3"))
    assert run(c) == [*picks_a("req-0", "device-1"), *picks_a("req-1", "device-2")]
