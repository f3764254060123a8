"""Label and field selectors and list options, as apimachinery parses and validates them.

Label selectors follow ``labels.Parse`` (its lexer, its parser's errors word for word, the label key
and value validation of ``NewRequirement``); field selectors follow ``fields.ParseSelector`` (terms
split at unescaped commas, ``!=``/``==``/``=``, escapes) and each kind's field label conversion
(which fields a kind may be selected by, and its error). ``list_options`` decodes a list or watch
request's query as the ListOptions parameter codec does (Go's integer and boolean conversions),
defaults it (WatchList: a plain watch gets ``sendInitialEvents=true``) and validates it as
``ValidateListOptions`` (422 ``ListOptions.meta.k8s.io "" is invalid``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.sandbox.apiserver.errors import bad_request, invalid

Obj = dict[str, Any]


# ---------------------------------------------------------------- Go conversions


def go_quote(text: str) -> str:
    """strconv.Quote: Go's double-quoted string literal (what ``%q`` prints)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_INT64 = (-(2**63), 2**63 - 1)


def go_parse_int(text: str) -> int:
    """strconv.ParseInt(text, 10, 64); ValueError carries Go's message."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def go_parse_uint(text: str) -> int:
    """strconv.ParseUint(text, 10, 64); ValueError carries Go's message."""
    if not re.fullmatch(r"[0-9]+", text):
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if value > 2**64 - 1:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(text)}: value out of range")
    return value


def go_bool(text: str) -> bool:
    """A query parameter as a bool: only "0" and "false" (any case) are false, even "" is true."""
    return not (text == "0" or text.lower() == "false")


# ---------------------------------------------------------------- validation messages

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")


def subdomain_errors(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain."""
    out = [_max_len(253)] if len(value) > 253 else []
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        out.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return out


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName."""
    return list(_qualified_name_errors(value))


# Every write of an object validates its labels; a cluster's keys and values repeat on every node,
# so each distinct string is checked once (the answers are pure).
@functools.lru_cache(maxsize=65536)
def _qualified_name_errors(value: str) -> tuple[str, ...]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return (
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part " + _max_len(253))
            if not re.fullmatch(_DNS1123_SUBDOMAIN_FMT, prefix):
                errs.append(
                    "prefix part " + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not re.fullmatch(_QNAME_FMT, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return tuple(errs)


def label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue."""
    return list(_label_value_errors(value))


@functools.lru_cache(maxsize=65536)
def _label_value_errors(value: str) -> tuple[str, ...]:
    errs: list[str] = []
    if len(value) > 63:
        errs.append(_max_len(63))
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return tuple(errs)


def _aggregate(messages: list[str]) -> str:
    """utilerrors.Aggregate's message: one error as is, several deduplicated in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# ---------------------------------------------------------------- label selectors


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "=":
            return present and labels[self.key] == self.values[0]
        if self.op == "!=":
            return not present or labels[self.key] != self.values[0]
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if self.op in ("gt", "lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = go_parse_int(labels[self.key]), go_parse_int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == "gt" else have < want
        raise AssertionError(self.op)


Selector = tuple[Requirement, ...]

_SPECIAL = "=!(),><"
_WHITESPACE = " \t\r\n"
_TOKENS = {
    ")": "close",
    ",": "comma",
    "!": "not",
    "==": "==",
    "=": "=",
    ">": "gt",
    "in": "in",
    "<": "lt",
    "!=": "!=",
    "notin": "notin",
    "(": "open",
}
_IDENT, _END = "identifier", "end"
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


def _lex(text: str) -> list[tuple[str, str]]:
    """labels.Lexer: (token, literal) pairs ending with the end of the string."""
    out: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            out.append((_END, ""))
            return out
        if text[pos] in _SPECIAL:
            buffer, last = "", ("", "")
            while pos < n and text[pos] in _SPECIAL:
                buffer += text[pos]
                if buffer in _TOKENS:
                    last = (_TOKENS[buffer], buffer)
                    pos += 1
                elif last[0]:
                    break
                else:
                    pos += 1
            out.append(last if last[0] else ("error", f"error expected: keyword found '{buffer}'"))
            continue
        start = pos
        while pos < n and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        out.append((_TOKENS[word], word) if word in ("in", "notin") else (_IDENT, word))


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return (_IDENT, lit) if values and tok in ("in", "notin") else (tok, lit)

    def consume(self, values: bool) -> tuple[str, str]:
        item = self.lookahead(values)
        self.pos += 1
        return item

    def parse(self) -> Selector:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead(True)
            if tok in (_IDENT, "not"):
                try:
                    reqs.append(self.requirement())
                except ValueError as exc:
                    raise ValueError(f"unable to parse requirement: {exc}") from None
                tok, lit = self.consume(True)
                if tok == _END:
                    break
                if tok == "comma":
                    tok2, lit2 = self.lookahead(True)
                    if tok2 not in (_IDENT, "not"):
                        raise ValueError(f"found '{lit2}', expected: identifier after ','")
                    continue
                raise ValueError(f"found '{lit}', expected: ',' or 'end of string'")
            if tok == _END:
                break
            raise ValueError(f"found '{lit}', expected: !, identifier, or 'end of string'")
        return tuple(sorted(reqs, key=lambda r: r.key))

    def requirement(self) -> Requirement:
        tok, key = self.consume(True)
        op = ""
        if tok == "not":
            op = "!"
            tok, key = self.consume(True)
        if tok != _IDENT:
            raise ValueError(f"found '{key}', expected: identifier")
        errs = qualified_name_errors(key)
        if errs:
            raise ValueError(f"<nil>: Invalid value: {go_quote(key)}: {'; '.join(errs)}")
        if self.lookahead(True)[0] in (_END, "comma") and op != "!":
            op = "exists"
        if op in ("exists", "!"):
            return Requirement(key, op)
        tok, lit = self.consume(False)
        ops = {"in": "in", "notin": "notin", "=": "=", "==": "=", "!=": "!=", "gt": "gt", "lt": "lt"}
        if tok not in ops:
            raise ValueError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        op = ops[tok]
        values = self.set_values() if op in ("in", "notin") else self.exact_value()
        return _new_requirement(key, op, sorted(values))

    def set_values(self) -> set[str]:
        tok, lit = self.consume(True)
        if tok != "open":
            raise ValueError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead(True)
        if tok == "close":
            self.consume(True)
            return {""}
        if tok not in (_IDENT, "comma"):
            raise ValueError(f"found '{lit}', expected: ',', ')' or identifier")
        found: set[str] = set()
        while True:
            tok, lit = self.consume(True)
            if tok == _IDENT:
                found.add(lit)
                tok2, lit2 = self.lookahead(True)
                if tok2 == "comma":
                    continue
                if tok2 == "close":
                    self.consume(True)
                    return found
                raise ValueError(f"found '{lit2}', expected: ',' or ')'")
            if tok == "comma":
                if not found:
                    found.add("")
                tok2, _ = self.lookahead(True)
                if tok2 == "close":
                    found.add("")
                    self.consume(True)
                    return found
                if tok2 == "comma":
                    self.consume(True)
                    found.add("")
                continue
            raise ValueError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.lookahead(True)[0] in (_END, "comma"):
            return {""}
        tok, lit = self.consume(True)
        if tok == _IDENT:
            return {lit}
        raise ValueError(f"found '{lit}', expected: identifier")


def _new_requirement(key: str, op: str, values: list[str]) -> Requirement:
    """labels.NewRequirement's checks of the values (the key was checked by the parser)."""
    errs: list[str] = []
    if op in ("gt", "lt"):
        for i, value in enumerate(values):
            try:
                go_parse_int(value)
            except ValueError:
                errs.append(
                    f"values[{i}]: Invalid value: {go_quote(value)}: for 'Gt', 'Lt' operators, the value must be an integer"
                )
    for i, value in enumerate(values):
        problems = label_value_errors(value)
        if problems:
            errs.append(f"values[{i}][{key}]: Invalid value: {go_quote(value)}: {'; '.join(problems)}")
    if errs:
        raise ValueError(_aggregate(errs))
    return Requirement(key, op, tuple(values))


def parse_labels(text: str) -> Selector:
    """``labels.Parse``: ``a=b,c!=d,e in (f,g),h notin (i),j,!k,l>1``; a 400 with its error otherwise."""
    try:
        return _LabelParser(text).parse()
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def label_selector_from_object(selector: Obj | None) -> Selector | None:
    """A metav1.LabelSelector (matchLabels/matchExpressions); None selects nothing, {} selects everything."""
    if selector is None:
        return None
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return tuple(reqs)


def matches_labels(selector: Selector, obj: Obj) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in selector)


# ---------------------------------------------------------------- fields


FieldGetter = Callable[[Obj], str]


def _path(*parts: str) -> FieldGetter:
    def get(obj: Obj) -> str:
        cur: Any = obj
        for p in parts:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(p)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


def _flag(*parts: str) -> FieldGetter:
    get = _path(*parts)
    return lambda o: "true" if get(o) == "true" else "false"


_NAME = {"metadata.name": _path("metadata", "name")}
_NAMESPACE = {"metadata.namespace": _path("metadata", "namespace")}
COMMON_FIELDS: dict[str, FieldGetter] = {**_NAME, **_NAMESPACE}
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")


@dataclass(frozen=True)
class FieldLabels:
    """A kind's field label conversion: the fields it may be selected by, renamed fields, and how
    it refuses others (the ``{label}`` placeholder)."""

    fields: Mapping[str, FieldGetter]
    refusal: str = "field label not supported: {label}"
    renamed: Mapping[str, str] | None = None


# Kinds with a field label conversion function (pkg/apis/<group>/<version>/conversion.go); every
# other kind takes metadata.name and metadata.namespace only (runtime.DefaultMetaV1FieldSelectorConversion).
KIND_FIELDS: dict[tuple[str, str], FieldLabels] = {
    ("", "Pod"): FieldLabels(
        {
            **COMMON_FIELDS,
            "spec.nodeName": _path("spec", "nodeName"),
            "spec.restartPolicy": _path("spec", "restartPolicy"),
            "spec.schedulerName": _path("spec", "schedulerName"),
            "spec.serviceAccountName": _path("spec", "serviceAccountName"),
            "spec.hostNetwork": _flag("spec", "hostNetwork"),
            "status.phase": _path("status", "phase"),
            "status.podIP": _path("status", "podIP"),
            "status.podIPs": lambda o: ",".join(
                str(p.get("ip", "")) for p in (o.get("status") or {}).get("podIPs") or []
            ),
            "status.nominatedNodeName": _path("status", "nominatedNodeName"),
        },
        renamed={"spec.host": "spec.nodeName"},
    ),
    ("", "Node"): FieldLabels({**_NAME, "spec.unschedulable": _flag("spec", "unschedulable")}),
    ("", "ReplicationController"): FieldLabels(
        {**COMMON_FIELDS, "status.replicas": lambda o: str(int((o.get("status") or {}).get("replicas") or 0))}
    ),
    ("", "Namespace"): FieldLabels({**_NAME, "status.phase": _path("status", "phase")}),
    ("", "Secret"): FieldLabels({**COMMON_FIELDS, "type": _path("type")}),
    ("", "Service"): FieldLabels(
        {**COMMON_FIELDS, "spec.clusterIP": _path("spec", "clusterIP"), "spec.type": _path("spec", "type")}
    ),
    ("", "Event"): FieldLabels(
        {
            **COMMON_FIELDS,
            **{f"involvedObject.{f}": _path("involvedObject", f) for f in _INVOLVED},
            "reason": _path("reason"),
            "reportingComponent": _path("reportingComponent"),
            "source": lambda o: str((o.get("source") or {}).get("component") or o.get("reportingComponent") or ""),
            "type": _path("type"),
        }
    ),
    ("events.k8s.io", "Event"): FieldLabels(
        {
            **COMMON_FIELDS,
            **{f"regarding.{f}": _path("regarding", f) for f in _INVOLVED},
            "reason": _path("reason"),
            "type": _path("type"),
            "reportingController": _path("reportingController"),
        }
    ),
    ("batch", "Job"): FieldLabels(
        {**COMMON_FIELDS, "status.successful": lambda o: str(int((o.get("status") or {}).get("succeeded") or 0))},
        refusal='field label "{label}" not supported for Job',
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"): FieldLabels(
        {**_NAME, "spec.signerName": _path("spec", "signerName")}
    ),
    ("resource.k8s.io", "ResourceSlice"): FieldLabels(
        {**_NAME, "spec.nodeName": _path("spec", "nodeName"), "spec.driver": _path("spec", "driver")},
        refusal="field label not supported for resource.k8s.io/{version}, Kind=ResourceSlice: {label}",
    ),
}


def field_labels(group: str, version: str, kind: str, *, custom: bool = False, namespaced: bool = True) -> FieldLabels:
    """The field label conversion of a kind (custom resources: metadata.name, and metadata.namespace
    when namespaced, as the CRD handler's converter)."""
    if custom:
        return FieldLabels(COMMON_FIELDS if namespaced else _NAME)
    found = KIND_FIELDS.get((group, kind))
    if found is None:
        return FieldLabels(
            COMMON_FIELDS, refusal='{quoted} is not a known field selector: only "metadata.name", "metadata.namespace"'
        )
    if "{version}" in found.refusal:
        return FieldLabels(found.fields, found.refusal.replace("{version}", version), found.renamed)
    return found


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str
    getter: FieldGetter


FieldSelector = tuple[FieldRequirement, ...]


def _split_terms(text: str) -> list[str]:
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    """fields.UnescapeValue."""
    if not any(c in value for c in "\\,="):
        return value
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise ValueError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise ValueError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise ValueError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_terms(text: str) -> list[tuple[str, str, str]]:
    """``fields.ParseSelector``: (field, "=" | "!=", value) in its order (terms sorted); ValueError
    with its message."""
    out: list[tuple[str, str, str]] = []
    for part in sorted(_split_terms(text) if text else []):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{part}'")
        name, op, value = split
        out.append((name, "!=" if op == "!=" else "=", _unescape(value)))
    return out


def convert_field_terms(terms: list[tuple[str, str, str]], labels: FieldLabels) -> FieldSelector:
    """The kind's field label conversion of parsed terms; a 400 with its refusal for an unknown field."""
    out: list[FieldRequirement] = []
    for name, op, value in terms:
        name = (labels.renamed or {}).get(name, name)
        getter = labels.fields.get(name)
        if getter is None:
            raise bad_request(labels.refusal.format(label=name, quoted=go_quote(name)))
        out.append(FieldRequirement(name, op, value, getter))
    return tuple(out)


def parse_fields(
    text: str, group: str, kind: str, *, custom: bool = False, namespaced: bool = True, version: str = "v1"
) -> FieldSelector:
    """Parse and convert a field selector for a kind (400 on a syntax error or an unsupported field)."""
    try:
        terms = parse_field_terms(text)
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return convert_field_terms(terms, field_labels(group, version, kind, custom=custom, namespaced=namespaced))


def matches_fields(selector: FieldSelector, obj: Obj) -> bool:
    for req in selector:
        have = req.getter(obj)
        if (have == req.value) != (req.op == "="):
            return False
    return True


def single_name(selector: FieldSelector) -> str | None:
    """The name a selector pins with ``metadata.name=X``, for a fast path."""
    for req in selector:
        if req.field == "metadata.name" and req.op == "=":
            return req.value
    return None


# ---------------------------------------------------------------- list options


@dataclass(frozen=True)
class ListOptions:
    """A list or watch request's options, decoded, defaulted and validated."""

    labels: Selector = ()
    fields: FieldSelector = ()
    watch: bool = False
    allow_watch_bookmarks: bool = False
    resource_version: str = ""
    resource_version_match: str = ""
    timeout_seconds: int | None = None
    limit: int = 0
    continue_token: str = ""
    send_initial_events: bool | None = None


def _forbidden(field: str, message: str) -> tuple[str, str, str]:
    return ("FieldValueForbidden", field, f"Forbidden: {message}")


def _not_supported(field: str, value: str, supported: tuple[str, ...]) -> tuple[str, str, str]:
    listed = ", ".join(go_quote(s) for s in supported)
    return ("FieldValueNotSupported", field, f"Unsupported value: {go_quote(value)}: supported values: {listed}")


def list_option_causes(opts: ListOptions, *, watch_list: bool = True) -> list[tuple[str, str, str]]:
    """ValidateListOptions, as (type, field, message) causes."""
    causes: list[tuple[str, str, str]] = []
    match = opts.resource_version_match
    if opts.watch:
        if opts.send_initial_events is not None:
            if match != "NotOlderThan":
                causes.append(
                    _forbidden(
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if not watch_list:
                causes.append(
                    _forbidden(
                        "sendInitialEvents",
                        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                    )
                )
        if match:
            if opts.send_initial_events is None:
                causes.append(
                    _forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    )
                )
            if match != "NotOlderThan":
                causes.append(_not_supported("resourceVersionMatch", match, ("NotOlderThan",)))
            if opts.continue_token:
                causes.append(
                    _forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
                )
        return causes
    if match:
        if not opts.resource_version:
            causes.append(
                _forbidden(
                    "resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if opts.continue_token:
            causes.append(
                _forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
            )
        if match not in ("Exact", "NotOlderThan"):
            causes.append(_not_supported("resourceVersionMatch", match, ("Exact", "NotOlderThan", "")))
        if match == "Exact" and opts.resource_version == "0":
            causes.append(
                _forbidden("resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
            )
    if opts.send_initial_events is not None:
        causes.append(_forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return causes


def list_options(
    query: Mapping[str, str],
    labels: FieldLabels,
    *,
    watch: bool = False,
    name: str = "",
    watch_list: bool = True,
) -> ListOptions:
    """A list/watch request's query as kube-apiserver's ListResource takes it: decoded (integers
    first, then the label and the field selector: 400 with Go's or the parser's error), defaulted
    (a watch from "" or "0" gets sendInitialEvents=true, resourceVersionMatch=NotOlderThan when
    WatchList is on), validated (422), its field selector converted for the kind (400), and for a
    watch of one object (``name``) the selector checked against it."""

    def integer(key: str) -> int | None:
        if key not in query:
            return None
        try:
            return go_parse_int(query[key])
        except ValueError as exc:
            raise bad_request(str(exc)) from None

    timeout = integer("timeoutSeconds")
    limit = integer("limit") or 0
    selector = parse_labels(query.get("labelSelector", ""))
    try:
        terms = parse_field_terms(query.get("fieldSelector", ""))
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    opts = ListOptions(
        labels=selector,
        watch=watch or ("watch" in query and go_bool(query["watch"])),
        allow_watch_bookmarks="allowWatchBookmarks" in query and go_bool(query["allowWatchBookmarks"]),
        resource_version=query.get("resourceVersion", ""),
        resource_version_match=query.get("resourceVersionMatch", ""),
        timeout_seconds=timeout,
        limit=limit,
        continue_token=query.get("continue", ""),
        send_initial_events=go_bool(query["sendInitialEvents"]) if "sendInitialEvents" in query else None,
    )
    if (
        watch_list
        and opts.watch
        and opts.send_initial_events is None
        and not opts.resource_version_match
        and opts.resource_version in ("", "0")
    ):
        opts = ListOptions(**{**opts.__dict__, "send_initial_events": True, "resource_version_match": "NotOlderThan"})
    causes = list_option_causes(opts, watch_list=watch_list)
    if causes:
        raise invalid("meta.k8s.io", "ListOptions", "", causes)
    fields = convert_field_terms(terms, labels)
    if name:
        if fields:
            if single_name(fields) != name:
                raise bad_request("fieldSelector metadata.name doesn't match requested name")
        else:
            fields = (FieldRequirement("metadata.name", "=", name, _NAME["metadata.name"]),)
    return ListOptions(**{**opts.__dict__, "fields": fields})
