"""The pod rule's answers kept encoded, and found again from a review's bytes without decoding the pod.

Most pod reviews are a workload's next pod: a review whose answer (the pod rule's patch and
warnings) was given before, to a pod that differed only in what the rule never reads (name, env,
args, images, hostname, index labels) and in the review's uid. For those, decoding the whole review
into dicts was most of the webhook's own cost. Here a review is read sparsely (``msgspec`` skips
every field the answer does not depend on without building it) into :func:`answer_key`; when that
key was answered before, the answer is the stored encoding with this review's uid in it.

The key holds what the pod rule's answer depends on (``webhook.rules.pods.mutate_pod_request``),
read from the JSON text: of each container its name, restartPolicy and resources (of cpu, memory
and the other names without a domain, only that they are there); the pod's resourceClaims,
nodeName and schedulingGates; whether there are labels and annotations and the values of the keys
the rule reads or writes; the namespace; whether the pod has metadata; whether a node sends it;
and the review's apiVersion (the answer's). A review that is not plainly a Pod CREATE as the API
server sends it (any field of an unexpected type, a subresource, an object of another kind, a
field resources do not have) has no key: it takes the full decode, which answers it or says what
is wrong with it.

Two differences from the full decode remain, neither in what kube-apiserver sends: numbers in
fields the key does not read are checked for their syntax only (orjson also refuses those beyond
a double's range), and the order of the spec's container lists and resourceClaims is not in the
key (pods that differ only in it share a patch whose operations may come in another order, and
mean the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
import orjson

from gpucluster.clusterstate import ClusterState
from gpucluster.lru import LRU
from gpucluster.policy import Settings
from gpucluster.webhook.review import API_VERSION, KIND
from gpucluster.webhook.rules.pods import ANNOTATIONS_READ, LABELS_READ

_ABSENT = msgspec.Raw()  # empty: no JSON value is, so it stands for a field that is not there


class _Resources(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    limits: dict[str, msgspec.Raw] | msgspec.UnsetType | None = msgspec.UNSET
    requests: dict[str, msgspec.Raw] | msgspec.UnsetType | None = msgspec.UNSET
    claims: msgspec.Raw = _ABSENT


class _Container(msgspec.Struct, gc=False):
    name: msgspec.Raw = _ABSENT
    restartPolicy: msgspec.Raw = _ABSENT
    resources: _Resources | msgspec.UnsetType | None = msgspec.UNSET


class _Spec(msgspec.Struct, gc=False):
    containers: list[_Container] | msgspec.UnsetType | None = msgspec.UNSET
    initContainers: list[_Container] | msgspec.UnsetType | None = msgspec.UNSET
    resourceClaims: msgspec.Raw = _ABSENT
    nodeName: msgspec.Raw = _ABSENT
    schedulingGates: msgspec.Raw = _ABSENT


class _Metadata(msgspec.Struct, gc=False):
    namespace: msgspec.Raw = _ABSENT
    labels: dict[str, msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET
    annotations: dict[str, msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET


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


class _User(msgspec.Struct, gc=False):
    username: str = ""


class _Request(msgspec.Struct, gc=False):
    uid: str = ""
    kind: _Kind | None = None
    resource: _Resource | None = None
    subResource: str = ""
    operation: str = ""
    name: str = ""
    namespace: str = ""
    userInfo: _User | None = None
    object: _Pod | None = None
    oldObject: msgspec.Raw = _ABSENT
    dryRun: bool = False


class _Review(msgspec.Struct, gc=False):
    apiVersion: str = ""
    kind: str = ""
    request: _Request | None = None


_DECODER = msgspec.json.Decoder(_Review)
_POD = _Kind(group="", version="v1", kind="Pod")
_REVIEW_VERSIONS = (API_VERSION, "admission.k8s.io/v1beta1")


class Keyed(NamedTuple):
    """A review's :func:`answer_key`, with what its answer and its log line need of the review."""

    key: tuple[Any, ...]
    uid: str
    name: str
    namespace: str


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
        or bytes(request.oldObject) not in (b"", b"null")
        or type(pod.spec) is not _Spec
    ):
        return None
    spec, meta = pod.spec, pod.metadata
    if type(meta) is _Metadata:
        labels, annotations = meta.labels, meta.annotations
        namespace = request.namespace or _string(meta.namespace)
        if namespace is None:
            return None
        picked: tuple[Any, ...] = (
            True,
            None if labels is msgspec.UNSET else tuple([(k, bytes(labels[k])) for k in LABELS_READ if k in labels]),
            None
            if annotations is msgspec.UNSET
            else tuple([(k, bytes(annotations[k])) for k in ANNOTATIONS_READ if k in annotations]),
        )
    else:
        namespace, picked = request.namespace, (False,)
    user = request.userInfo.username if request.userInfo is not None else ""
    key = (
        review.apiVersion,
        namespace,
        user.startswith("system:node:"),
        picked,
        _containers(spec.containers),
        _containers(spec.initContainers),
        bytes(spec.resourceClaims),
        bytes(spec.nodeName),
        bytes(spec.schedulingGates),
    )
    return Keyed(key, request.uid, request.name, namespace)


def _containers(listed: list[_Container] | msgspec.UnsetType | None) -> tuple[Any, ...] | bool | None:
    if listed is msgspec.UNSET:
        return False
    if listed is None:
        return None
    return tuple([(bytes(c.name), bytes(c.restartPolicy), _resources(c.resources)) for c in listed])


def _resources(resources: _Resources | msgspec.UnsetType | None) -> tuple[Any, ...] | bool | None:
    if resources is msgspec.UNSET:
        return False
    if resources is None:
        return None
    return (_amounts(resources.limits), _amounts(resources.requests), bytes(resources.claims))


def _amounts(amounts: dict[str, msgspec.Raw] | msgspec.UnsetType | None) -> tuple[Any, ...] | bool | None:
    """A container's limits or requests as the rule reads them: every name, in order, and the
    amount of each that has a domain. No name without one (cpu, memory, ephemeral-storage,
    hugepages-*) is ever translated, watched or a GPU-sharing qualifier, so only whether it is
    there counts (whether limits stay once the GPUs are taken out): pods that differ only in
    those amounts share an answer."""
    if amounts is msgspec.UNSET:
        return False
    if amounts is None:
        return None
    return tuple([(name, bytes(amount)) if "/" in name else name for name, amount in amounts.items()])


def _string(raw: msgspec.Raw) -> str | None:
    """A namespace as the full decode reads it: absent or null is "", a string is itself, else None."""
    text = bytes(raw)
    if text in (b"", b"null"):
        return ""
    value = orjson.loads(text)
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Answer:
    """An encoded answer: the response before and after its uid, and what metrics count it as."""

    head: bytes
    tail: bytes
    rule: str
    outcome: str

    def encode(self, uid: str) -> bytes:
        return self.head + orjson.dumps(uid) + self.tail


def _answers(cluster: ClusterState) -> LRU[tuple[Any, ...], Answer]:
    """Kept on the cluster view until it changes: any change of a watched kind drops them."""
    return cluster.derived("pod-rule-encoded-answers", lambda _: LRU(2048))


class AnswerSlot:
    """Where the answer to one keyed review is kept: found there, or kept there once the full
    decode has answered. The view's store is taken before the rule runs, so an answer is never
    filed under a view that changed meanwhile."""

    def __init__(self, keyed: Keyed, cluster: ClusterState, settings: Settings) -> None:
        self.keyed = keyed
        self._entries = _answers(cluster)
        self._key: tuple[Any, ...] | None = (keyed.key, settings)
        try:
            self.found = self._entries.get(self._key)
        except TypeError:  # settings that cannot be hashed: nothing is kept for them
            self.found, self._key = None, None

    def keep(self, encoded: bytes, rule: str, outcome: str) -> None:
        """Keep ``encoded`` (the full decode's answer to the review, as sent) for the reviews with
        the same key. The uid is the only member of the review's own in it."""
        if self._key is None:
            return
        uid = b'"uid":' + orjson.dumps(self.keyed.uid)
        # The first: apiVersion and kind come before the response and are constants with no uid.
        at = encoded.find(uid)
        if at >= 0:
            self._entries.put(self._key, Answer(encoded[: at + 6], encoded[at + len(uid) :], rule, outcome))
