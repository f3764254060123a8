"""The pod rule's answers kept encoded, and found again from a review's bytes without decoding the pod.

Most pod reviews are a workload's next pod: a review whose answer (the pod rule's patch and
warnings) was given before, to a pod that differed only in what the rule never reads (name, env,
args, images, hostname, index labels) and in the review's uid. For those, decoding the whole review
into dicts was most of the webhook's own cost. Here a review is read sparsely (``msgspec`` skips
every field the answer does not depend on without building it) into :func:`answer_key`; when that
key was answered before, the answer is the stored encoding with this review's uid in it.

The key holds what the pod rule's answer depends on (``webhook.rules.pods.mutate_pod_request``),
read from the JSON text: of each container its restartPolicy and resources (of cpu, memory and the
other names without a domain, only that they are there); the containers' names; the pod's
resourceClaims, nodeName and schedulingGates; whether there are labels and annotations (missing
or null) and the values of the keys the rule reads or writes (strings; the others are skipped
unread); the namespace; whether the pod has metadata; whether a node sends it; and the review's
apiVersion (the answer's). The answers are kept per settings. A review that is not plainly a Pod
CREATE as the API server sends it (any field of an unexpected type, a subresource, an object of
another kind, a field resources do not have) has no key: it takes the full decode, which answers
it or says what is wrong with it. Null strings of the request (subResource, name, namespace,
username) read as empty, as in the full decode.

Of the containers' names, when each is a DNS label (as kube-apiserver admits them) and none is
taken twice, only their sorted order is in the key: pods whose containers are named for the pod
share an answer. A translation names containers only in its translated-from annotation (sorted
by name); the kept answer is put together with the review's names there. An answer that says
more than an allowed patch (warnings name containers too) is kept under the names themselves.
An answer is split around the names only once a review with other names asks for it.

Two differences from the full decode remain, neither in what kube-apiserver sends (it writes an
object's members in one order): numbers in fields the key does not read are checked for their
syntax only (orjson also refuses those beyond a double's range), and the order in which the spec
lists its members (containers, initContainers, resourceClaims) and the metadata its labels and
annotations is not in the key: pods that differ only in it share a patch whose operations may
come in another order, and mean the same. The order of resources' members is in the key.

Amounts in resources are strings as kube-apiserver writes quantities, or numbers as reviews made
from YAML write them (``nvidia.com/gpu: 1``): a number is in the key as written (1, 1.0 and "1"
are three keys: the translated-from annotation records each as written), and only within the
range orjson reads as msgspec does (integers of 64 bits, doubles short of the largest); any other
amount (true, null, an object, 2**64) has no key.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec
import orjson

from gpucluster.clusterstate import ClusterState
from gpucluster.jsonutil import pointer_token
from gpucluster.lru import LRU
from gpucluster.policy import WEBHOOK_CONFIG, Settings
from gpucluster.webhook.review import API_VERSION, KIND
from gpucluster.webhook.rules.pods import ANNOTATIONS_READ, LABELS_READ

_ABSENT = msgspec.Raw()  # empty: no JSON value is, so it stands for a field that is not there


class _Container(msgspec.Struct, gc=False):
    name: msgspec.Raw = _ABSENT
    restartPolicy: str | msgspec.UnsetType | None = msgspec.UNSET
    resources: msgspec.Raw = _ABSENT


class _Spec(msgspec.Struct, gc=False):
    containers: list[_Container] | msgspec.UnsetType | None = msgspec.UNSET
    initContainers: list[_Container] | msgspec.UnsetType | None = msgspec.UNSET
    resourceClaims: msgspec.Raw = _ABSENT
    nodeName: str | msgspec.UnsetType | None = msgspec.UNSET
    schedulingGates: msgspec.Raw = _ABSENT


# Of labels and annotations, only the keys the rule reads (LABELS_READ, ANNOTATIONS_READ), each a
# string as kube-apiserver admits them: the read skips the others, and the result is the key.
class _Labels(msgspec.Struct, frozen=True, gc=False):
    translate: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=LABELS_READ[0])
    translated: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=LABELS_READ[1])


class _Annotations(msgspec.Struct, frozen=True, gc=False):
    translate: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=ANNOTATIONS_READ[0])
    mirror: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=ANNOTATIONS_READ[1])
    translated_from: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=ANNOTATIONS_READ[2])
    templates: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=ANNOTATIONS_READ[3])


class _Metadata(msgspec.Struct, gc=False):
    namespace: msgspec.Raw = _ABSENT
    # Missing (UNSET) and null are apart: the patch adds a missing map, replaces a null one.
    labels: _Labels | msgspec.UnsetType | None = msgspec.UNSET
    annotations: _Annotations | msgspec.UnsetType | None = msgspec.UNSET


class _Pod(msgspec.Struct, gc=False):
    apiVersion: str = "v1"
    kind: str = "Pod"
    metadata: _Metadata | msgspec.UnsetType = msgspec.UNSET
    spec: _Spec | msgspec.UnsetType = msgspec.UNSET


class _Kind(msgspec.Struct, gc=False):
    group: str = ""
    version: str = ""
    kind: str = ""


class _Resource(msgspec.Struct, gc=False):
    resource: str = ""


# Strings the full decode reads as "" when null, as reviews made by hand may send them.
class _User(msgspec.Struct, gc=False):
    username: str | None = ""


class _Request(msgspec.Struct, gc=False):
    uid: str = ""
    kind: _Kind | None = None
    resource: _Resource | None = None
    subResource: str | None = ""
    operation: str = ""
    name: str | None = ""
    namespace: str | None = ""
    userInfo: _User | None = None
    object: _Pod | None = None
    oldObject: None = None  # a CREATE has none: any other is no key
    dryRun: bool = False


class _Review(msgspec.Struct, gc=False):
    apiVersion: str = ""
    kind: str = ""
    request: _Request | None = None


_DECODER = msgspec.json.Decoder(_Review)
_ENTRIES = msgspec.json.Decoder(dict[str, msgspec.Raw])
_AMOUNTS = msgspec.json.Decoder(dict[str, msgspec.Raw] | None)
_STRING = msgspec.json.Decoder(str)
_NUMBER = msgspec.json.Decoder(int | float)
_POD = _Kind(group="", version="v1", kind="Pod")
_REVIEW_VERSIONS = (API_VERSION, "admission.k8s.io/v1beta1")


class Keyed(msgspec.Struct, gc=False):
    """A review's :func:`answer_key`, with what its answer and its log line need of the review."""

    key: tuple[Any, ...]
    uid: str
    name: str
    namespace: str
    names: tuple[bytes, ...] | None = None  # the containers' names, when the key holds their order only


def answer_key(body: bytes) -> Keyed | None:
    """What the pod rule's answer to ``body`` depends on, besides the cluster view and the settings;
    None when ``body`` is not plainly a Pod CREATE review (the full decode deals with it)."""
    try:
        return _key(body)
    except Exception:
        return None


def _key(body: bytes) -> Keyed | None:
    review = _DECODER.decode(body)
    body.decode()  # the full decode refuses text that is not UTF-8 anywhere, read or not
    request = review.request
    if review.kind != KIND or review.apiVersion not in _REVIEW_VERSIONS or request is None:
        return None
    pod = request.object
    if (
        request.operation != "CREATE"
        or not request.uid
        or request.kind != _POD
        or request.subResource
        or pod is None
        or pod.kind != "Pod"
        or pod.apiVersion != "v1"
        or type(pod.spec) is not _Spec
    ):
        return None
    spec, meta = pod.spec, pod.metadata
    if type(meta) is _Metadata:
        labels, annotations = meta.labels, meta.annotations
        namespace = request.namespace or _string(meta.namespace)
        if namespace is None:
            return None
        picked: tuple[Any, ...] = (True, labels, annotations)
    else:
        namespace, picked = request.namespace or "", (False,)
    user = (request.userInfo.username or "") if request.userInfo is not None else ""
    listed = [*(spec.containers or ()), *(spec.initContainers or ())]
    names = _names(listed)
    key = (
        review.apiVersion,
        namespace,
        user.startswith("system:node:"),
        picked,
        # The answer depends on the order of DNS-label names only (see _templated); other names
        # are in the key themselves.
        _order(names) if names is not None else (None, *[bytes(c.name) for c in listed]),
        _containers(spec.containers),
        _containers(spec.initContainers),
        bytes(spec.resourceClaims),
        spec.nodeName,
        bytes(spec.schedulingGates),
    )
    return Keyed(key, request.uid, request.name or "", namespace, names)


# A container name as kube-apiserver admits it (a DNS label), as JSON: nothing in it is escaped.
_LABEL = re.compile(rb'"([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)"')


def _names(listed: list[_Container]) -> tuple[bytes, ...] | None:
    """The containers' names (regular ones first), when each is a DNS label and none is taken
    twice; None otherwise (the names themselves are then in the key)."""
    names = []
    for c in listed:
        text = bytes(c.name)
        label = _LABELS.get(text, _UNREAD)
        if label is _UNREAD:
            if len(text) > 65:  # longer than a DNS label and its quotes: not one, and not kept
                return None
            match = _LABEL.fullmatch(text)
            label = None if match is None else match.group(1)
            if len(_LABELS) >= 4096:
                _LABELS.clear()
            _LABELS[text] = label
        if label is None:
            return None
        names.append(label)
    return tuple(names) if len(set(names)) == len(names) else None


# Container names as JSON text (at most 65 bytes), and the DNS label each is (None: it is not one).
# A workload's pods share their names.
_LABELS: dict[bytes, bytes | None] = {}


def _order(names: tuple[bytes, ...]) -> tuple[int, ...]:
    """The names' indices in sorted order: what the answer depends on of DNS-label names (the
    translated-from annotation lists the containers by name, sorted)."""
    if len(names) == 1:
        return (0,)
    if len(names) == 2:
        return (0, 1) if names[0] < names[1] else (1, 0)
    return tuple(sorted(range(len(names)), key=names.__getitem__))


def _containers(listed: list[_Container] | msgspec.UnsetType | None) -> tuple[Any, ...] | bool | None:
    if listed is msgspec.UNSET:
        return False
    if listed is None:
        return None
    return tuple([(c.restartPolicy, _resources(c.resources)) for c in listed])


_RESOURCES = frozenset(("limits", "requests", "claims"))


def _resources(raw: msgspec.Raw) -> _Read:
    """A container's resources as the rule reads them: their members in order (the patch removes
    from limits and requests in their order), the :func:`_amounts` of limits and requests, and
    the claims. Kept by their text: a workload's pods ask for the same."""
    text = bytes(raw)
    found: _Read = _READ_RESOURCES.get(text, _UNREAD)
    if found is _UNREAD:
        found = _read_resources(text)
        if len(text) <= 1024:  # what a container asks for; a larger text is read, not kept
            if len(_READ_RESOURCES) >= 4096:
                _READ_RESOURCES.clear()
            _READ_RESOURCES[text] = found
    return found


_Read = tuple[Any, ...] | bool | None
# Process-wide, unlike the rules' memos (kept on a cluster view): a reading of the text alone,
# the same for every view and every settings.
_READ_RESOURCES: dict[bytes, _Read] = {}
_UNREAD: Any = object()


def _read_resources(text: bytes) -> _Read:
    if not text:
        return False
    if text == b"null":
        return None
    resources = _ENTRIES.decode(text)
    if not resources.keys() <= _RESOURCES:
        raise ValueError("not a member of resources")  # the full decode takes it as it is
    claims = resources.get("claims")
    return (
        tuple(resources),
        _amounts(resources.get("limits")),
        _amounts(resources.get("requests")),
        None if claims is None else bytes(claims),
    )


def _amounts(raw: msgspec.Raw | None) -> tuple[Any, ...] | bool | None:
    """A container's limits or requests as the rule reads them: every name, in order, and the
    amount of each that has a domain. No name without one (cpu, memory, ephemeral-storage,
    hugepages-*) is ever translated, watched or a GPU-sharing qualifier, so only whether it is
    there counts (whether limits stay once the GPUs are taken out): pods that differ only in
    those amounts share an answer. An amount is a string, as kube-apiserver sends quantities, or
    a :func:`_number` (any other is no key: the full decode takes it)."""
    if raw is None:
        return False
    amounts = _AMOUNTS.decode(raw)
    if amounts is None:
        return None
    read: list[Any] = []
    for name, text in amounts.items():
        written = bytes(text)
        amount = _STRING.decode(written) if written[:1] == b'"' else _number(written)
        read.append((name, amount) if "/" in name else name)
    return tuple(read)


def _number(text: bytes) -> tuple[str, bytes]:
    """An amount written as a JSON number: its text, which no string amount equals (Python holds
    1, 1.0 and -0.0 == 0.0 equal, the answer does not: the translated-from annotation records
    each as written). Only numbers orjson reads as msgspec does: integers of 64 bits (orjson
    makes a float of a larger one, or refuses it), doubles short of the largest."""
    value = _NUMBER.decode(text)
    if (-(2**63) <= value < 2**64) if type(value) is int else (-1e308 < value < 1e308):
        return ("number", text)
    raise ValueError("a number the full decode may read otherwise")


def _string(raw: msgspec.Raw) -> str | None:
    """A namespace as the full decode reads it: absent or null is "", a string is itself, else None."""
    text = bytes(raw)
    if text in (b"", b"null"):
        return ""
    value = orjson.loads(text)
    return value if isinstance(value, str) else None


@dataclass
class Answer:
    """An encoded answer: the response before and after its uid, and what metrics count it as.
    With ``pieces``, the patch is put together from them and the review's container names (an int
    is the name at that index), and ``tail`` ends where the patch's base64 begins."""

    head: bytes
    tail: bytes
    rule: str
    outcome: str
    pieces: tuple[bytes | int, ...] = ()
    end: bytes = b""
    # The names last put in, and the patch's base64 with them: a workload's pods share names.
    last: tuple[tuple[bytes, ...], bytes] | None = None
    # Kept whole: the names of the review it answered, which other names get only once it is split.
    made_for: tuple[bytes, ...] | None = None
    # The patch's base64 is encoded once where the names do not reach: up to the last whole
    # 3-byte group of the first piece (``cut`` bytes), and the last piece from each of its first
    # three bytes on. Only what lies between is encoded per review.
    cut: int = 0
    encoded_head: bytes = b""
    encoded_tails: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if self.pieces:
            first, last = self.pieces[0], self.pieces[-1]
            assert isinstance(first, bytes) and isinstance(last, bytes)
            self.cut = len(first) - len(first) % 3
            self.encoded_head = base64.b64encode(first[: self.cut])
            self.encoded_tails = tuple(base64.b64encode(last[r:]) for r in range(min(3, len(last) + 1)))

    def encode(self, uid: str, names: tuple[bytes, ...] | None = None) -> bytes:
        if not self.pieces:
            return self.head + orjson.dumps(uid) + self.tail
        assert names is not None  # a key that holds the names' order only has them
        last = self.last
        if last is not None and last[0] == names:
            patch = last[1]
        else:
            patch = self._patch(names)
            self.last = (names, patch)
        return b"".join((self.head, orjson.dumps(uid), self.tail, patch, self.end))

    def _patch(self, names: tuple[bytes, ...]) -> bytes:
        """The patch's base64 with ``names`` in it."""
        pieces = self.pieces
        first, final = pieces[0], pieces[-1]
        assert isinstance(first, bytes) and isinstance(final, bytes)
        between = b"".join([first[self.cut :], *[p if type(p) is bytes else names[p] for p in pieces[1:-1]]])  # type: ignore[index]
        taken = -len(between) % 3  # bytes of the last piece that complete the last group
        if taken >= len(self.encoded_tails):
            return base64.b64encode(_join(pieces, names))
        return self.encoded_head + base64.b64encode(between + final[:taken]) + self.encoded_tails[taken]


# Filed under a key whose answers name containers beyond the translated-from annotation (or do
# not take its expected form): those answers are kept under the key and the names.
_BY_NAME = Answer(b"", b"", "", "")


def _answers(cluster: ClusterState, settings: Settings) -> LRU[Any, Answer]:
    """The answers given under ``settings``, kept on the cluster view until it changes: any change
    of a watched kind drops them. Raises TypeError for settings that cannot be hashed."""
    stores = cluster.derived("pod-rule-encoded-answers", _stores)
    entries = stores.get(settings)
    if entries is None:
        if len(stores) >= 8:  # a server answers under one settings; tests under a few
            stores.clear()
        entries = stores[settings] = LRU(2048)
    return entries


def _stores(_: ClusterState) -> dict[Settings, LRU[Any, Answer]]:
    return {}


class AnswerSlot:
    """Where the answer to one keyed review is kept: found there, or kept there once the full
    decode has answered. The view's store is taken before the rule runs, so an answer is never
    filed under a view that changed meanwhile."""

    def __init__(self, keyed: Keyed, cluster: ClusterState, settings: Settings) -> None:
        self.keyed = keyed
        self._by_name = False
        try:
            entries = _answers(cluster, settings)
        except TypeError:  # settings that cannot be hashed: nothing is kept for them
            self._entries, self._key, self.found = None, None, None
            return
        self._entries = entries
        key: Any = keyed.key
        self._key = key
        found = entries.get(key)
        if found is not None and found.made_for is not None and found.made_for != keyed.names:
            # The first review of the key with other names: the answer is split around the names
            # now (most keys are only ever asked with one set of names: theirs is kept whole).
            templated = _templated(found)
            if templated is not None:
                entries.put(key, templated)
                found = templated
            else:
                entries.put(key, _BY_NAME)
                entries.put((key, found.made_for), replace(found, made_for=None))
                found = _BY_NAME
        if found is _BY_NAME:
            self._key, self._by_name = (key, keyed.names), True
            found = entries.get(self._key)
        self.found = found

    def answer(self, found: Answer) -> bytes:
        """``found`` (what this slot found) with this review's uid and container names."""
        return found.encode(self.keyed.uid, self.keyed.names)

    def keep(self, encoded: bytes, rule: str, outcome: str) -> None:
        """Keep ``encoded`` (the full decode's answer to the review, as sent) for the reviews with
        the same key. The uid, and when the key holds only the order of the container names, the
        names in the translated-from annotation, are the only members of the review's own in it."""
        if self._entries is None:
            return
        uid = b'"uid":' + orjson.dumps(self.keyed.uid)
        # The first: apiVersion and kind come before the response and are constants with no uid.
        at = encoded.find(uid)
        if at < 0:
            return
        names = None if self._by_name else self.keyed.names  # by name: the names are in the key
        self._entries.put(self._key, Answer(encoded[: at + 6], encoded[at + len(uid) :], rule, outcome, made_for=names))


_RECORD = WEBHOOK_CONFIG.annotation
_RECORD_PATH = "/metadata/annotations/" + pointer_token(_RECORD)
_MARK = "\x00gpucluster-translated-from\x00"


def _templated(answer: Answer) -> Answer | None:
    """``answer`` (whole, for the names it was made for) with its patch in pieces around the
    container names, which only the translated-from annotation holds; None when the response
    holds more than an allowed patch (warnings, a status), or the annotation is not as the
    translation writes it."""
    head, tail, names = answer.head, answer.tail, answer.made_for
    assert names is not None
    body = orjson.loads(head + b'""' + tail).get("response")
    if not isinstance(body, dict) or not set(body) <= {"uid", "allowed", "patchType", "patch"} or not body["allowed"]:
        return None
    encoded = body.get("patch")
    if encoded is None:
        return replace(answer, made_for=None)  # no patch: nothing in it names a container
    patch = base64.b64decode(encoded)
    ops = orjson.loads(patch)
    found: list[str] = []
    for op in ops:
        if op.get("path") == _RECORD_PATH and isinstance(op.get("value"), str):
            found.append(op["value"])
            op["value"] = _MARK
        elif isinstance(op.get("value"), dict):
            _take_record(op["value"], found)
    if len(found) != 1:
        return None
    record = _record_pieces(found[0], {n.decode(): i for i, n in enumerate(names)})
    text = orjson.dumps(ops)
    mark = orjson.dumps(_MARK)
    before, marked, after = text.partition(mark)
    if not marked or mark in after or record is None:
        return None
    escaped = [orjson.dumps(p.decode())[1:-1] if isinstance(p, bytes) else p for p in record]
    pieces: tuple[bytes | int, ...] = (before + b'"', *escaped, b'"' + after)
    joined = _join(pieces, names)
    split = tail.find(b'"patch":"' + encoded.encode() + b'"')
    if joined != patch or split < 0:
        return None
    return Answer(head, tail[: split + 9], answer.rule, answer.outcome, pieces, tail[split + 9 + len(encoded) :])


def _take_record(value: dict[str, Any], found: list[str]) -> None:
    """Mark the translated-from annotation wherever a patch op's value holds it."""
    for k, v in value.items():
        if k == _RECORD and isinstance(v, str):
            found.append(v)
            value[k] = _MARK
        elif isinstance(v, dict):
            _take_record(v, found)


def _record_pieces(text: str, index: dict[str, int]) -> list[bytes | int] | None:
    """The translated-from annotation (``{"containers": {name: requests, ...}}``, sorted, as
    json.dumps writes it) in pieces around its container names, by their index in ``index``; None
    unless it is exactly that with names of the review's containers."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or set(record) != {"containers"} or not isinstance(record["containers"], dict):
        return None
    pieces: list[bytes | int] = []
    literal = '{"containers": {'
    for i, (name, requests) in enumerate(record["containers"].items()):
        if name not in index:
            return None
        pieces += [(literal + (", " if i else "") + '"').encode(), index[name]]
        literal = '": ' + json.dumps(requests, sort_keys=True)
    pieces.append((literal + "}}").encode())
    rebuilt = _join(pieces, tuple(name.encode() for name in index))
    return pieces if rebuilt == text.encode() else None


def _join(pieces: Sequence[bytes | int], names: tuple[bytes, ...]) -> bytes:
    return b"".join([p if isinstance(p, bytes) else names[p] for p in pieces])
