"""The one node-selector requirement matcher (``k8s.io/component-helpers/scheduling/corev1/
nodeaffinity``), pure: shared by the DRA allocator's parsed NodeSelectors, the controller's
"which nodes must a DaemonSet cover" and the sandbox's scheduler and DaemonSet controller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# strconv.ParseInt(s, 10, 64): an optional sign and decimal digits only (Python's int() would
# also take spaces and underscores).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)


def parse_int64(text: str) -> int | None:
    if not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def requirement_matches(key: str, operator: str, values: Sequence[str], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy one NodeSelectorRequirement; an unknown operator, or a Gt/Lt
    whose label or value is not an integer, matches nothing."""
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        raw = labels.get(key)
        if raw is None or len(values) != 1:
            return False
        have, want = parse_int64(raw), parse_int64(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False
