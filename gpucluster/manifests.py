"""One loader for every file the CLI reads: YAML or JSON, one document, a stream or a `List`.

The caller hands us the path (or ``-`` for stdin); nothing else is opened here.
"""

from __future__ import annotations

import gc
import json
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpucluster.errors import InputError

KubeObject = dict[str, Any]


# libyaml's parser (3-5x PyYAML's pure-Python one on cluster dumps) under the same resolvers and
# constructors; the pure-Python loader only where PyYAML was built without libyaml.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _KubeYAMLLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that keeps timestamps as strings and rejects duplicate keys.

    Kubernetes converts YAML to JSON, so an unquoted ``2024-01-01T00:00:00Z`` stays a string;
    PyYAML would turn it into a datetime. A duplicate key is an error for kubectl's strict
    decoding; silently keeping the last value would be a wrong answer.
    """


_KubeYAMLLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _KubeYAMLLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:  # a complex key such as "? [1, 2]": no JSON object has one
            raise yaml.constructor.ConstructorError(None, None, "found unhashable key", key_node.start_mark) from None
        if key in seen:
            first = seen[key].start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first defined on line {first})", key_node.start_mark
            )
        seen[key] = key_node
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_KubeYAMLLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# The integers orjson reads as integers (64 bits, signed or not); anything larger is a float, as
# the JSON path reads it (Kubernetes' decoder keeps int64 and reads anything else as a float),
# never an int no Kubernetes object can hold.
_INT_RANGE = range(-(2**63), 2**64)


def _construct_int(loader: Any, node: yaml.ScalarNode) -> int | float:
    value: int = yaml.SafeLoader.construct_yaml_int(loader, node)
    if value in _INT_RANGE:
        return value
    try:
        return float(value)
    except OverflowError:  # beyond a double too: Kubernetes' decoder refuses it with a range error
        raise yaml.constructor.ConstructorError(
            None, None, f"integer of {len(node.value)} digits is out of range", node.start_mark
        ) from None


_KubeYAMLLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def read_text(path: str) -> str:
    """The text of ``path``, or of stdin for ``-``; an InputError names the file."""
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _yaml_error(source: str, exc: yaml.YAMLError, text: str = "") -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.reader.ReaderError):
        # A character YAML does not accept: where it is (the reader has no mark), in one line.
        problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return InputError(f"{source}:{line}:{column}: invalid YAML: {problem}")
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    return InputError(f"{where}: invalid YAML: {problem}")


_JSON_START = re.compile(r"\A\ufeff?\s*[\[{]")


def looks_like_json(text: str) -> bool:
    """Whether ``text`` starts as JSON does (flow-style YAML does too: a JSON reader decides)."""
    return _JSON_START.match(text) is not None


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> None:
    if len(pairs) != len(dict(pairs)):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)


# Reads every object's keys and keeps nothing: orjson (and json) keep the last of two equal keys.
_KEYS_CHECK = json.JSONDecoder(object_pairs_hook=_unique_keys)
_SPACE = re.compile(r"[ \t\n\r]*")


@contextmanager
def _as_deep_as_orjson() -> Iterator[None]:
    """orjson reads 1,024 levels; the stdlib reader takes a frame of the recursion limit per level."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4096))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _duplicate_key(exc: _DuplicateKey, source: str) -> InputError:
    return InputError(f"{source}: invalid JSON: duplicate key {json.dumps(exc.key)} in an object")


def check_json_keys(text: str, source: str) -> None:
    """Refuse a JSON text in which an object names a key twice, as YAML's loader refuses a
    duplicate key and Kubernetes' strict decoding a duplicate field (a JSON reader would keep the
    last value silently). Only for text a JSON reader accepted."""
    try:
        with _as_deep_as_orjson():
            _KEYS_CHECK.decode(text.removeprefix("\ufeff"))
    except _DuplicateKey as exc:
        raise _duplicate_key(exc, source) from None
    except (ValueError, RecursionError):
        pass  # the reader that accepted the text decides what it means


def _json_stream(text: str, source: str) -> list[Any] | None:
    """Two or more JSON values written one after another (as jq -c writes them), read by orjson
    and checked for duplicate keys on the way; None when the text is not one."""
    parts: list[str] = []
    position = _SPACE.match(text, 1 if text.startswith("\ufeff") else 0).end()  # type: ignore[union-attr]
    try:
        with _as_deep_as_orjson():
            while position < len(text):
                _, end = _KEYS_CHECK.raw_decode(text, position)
                parts.append(text[position:end])
                position = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        # The splitter takes NaN and lone surrogates, orjson does not: then YAML reports.
        documents = [orjson.loads(part) for part in parts]
    except _DuplicateKey as exc:
        raise _duplicate_key(exc, source) from None
    except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        return None
    return documents if len(documents) > 1 else None


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a dump is built: the parsers allocate millions of
    containers and no cycles, and every collection would walk all of them again. Afterwards the
    loaded objects are frozen (moved out of the collector's generations) so later collections of
    the command skip them too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class _Unusual(Exception):
    """The fast builder met something only the full loader handles (anchors, aliases, tags,
    merge keys, complex or duplicate keys): the text is loaded again by the full loader, which
    gives the exact answer or error."""


_SCALAR_TAGS = {
    tag: _KubeYAMLLoader.yaml_constructors[tag]
    for tag in (
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:str",
    )
}
_MISS = object()


def _fast_documents(text: str) -> list[Any]:
    """The documents of ``text`` built straight from libyaml's events, never as a node graph.

    The full loader composes every document into nodes (each with two marks) before building a
    single dict: for a 1,000-node dump that graph is most of the time and of the peak memory.
    Here each event becomes its value at once; a plain scalar is resolved and constructed once
    per distinct text (the cache also shares repeated strings, which keeps big dumps small).
    Results equal the full loader's: anything this builder does not handle raises
    :class:`_Unusual`, and the full loader runs instead.
    """
    loader = _KubeYAMLLoader(text)
    get = loader.get_event
    resolve = loader.resolve
    scalar_node = yaml.ScalarNode
    scalar_event, mapping_start, mapping_end = yaml.ScalarEvent, yaml.MappingStartEvent, yaml.MappingEndEvent
    sequence_start, sequence_end = yaml.SequenceStartEvent, yaml.SequenceEndEvent
    plain: dict[str, Any] = {}
    quoted: dict[str, str] = {}

    def scalar(event: Any) -> Any:
        if event.anchor is not None or event.tag is not None:
            raise _Unusual
        text = event.value
        if not event.implicit[0]:  # quoted: always a string
            return quoted.setdefault(text, text)
        value = plain.get(text, _MISS)
        if value is _MISS:
            tag = resolve(scalar_node, text, (True, False))
            construct = _SCALAR_TAGS.get(tag)
            if construct is None:  # merge key "<<", value "=": the full loader decides
                raise _Unusual
            value = plain[text] = construct(loader, scalar_node(tag, text))
        return value

    def build(event: Any) -> Any:
        cls = event.__class__
        if cls is scalar_event:
            return scalar(event)
        if event.anchor is not None or getattr(event, "tag", None) is not None:
            raise _Unusual  # aliases, anchors and explicit tags
        if cls is mapping_start:
            mapping: dict[Any, Any] = {}
            while True:
                event = get()
                if event.__class__ is not scalar_event:
                    if event.__class__ is mapping_end:
                        return mapping
                    raise _Unusual  # a collection or alias as key
                key = scalar(event)
                if key in mapping:
                    raise _Unusual  # duplicate: the full loader reports both lines
                mapping[key] = build(get())
        if cls is sequence_start:
            sequence: list[Any] = []
            append = sequence.append
            while True:
                event = get()
                if event.__class__ is sequence_end:
                    return sequence
                append(build(event))
        raise _Unusual

    try:
        documents = []
        get()  # StreamStartEvent
        while get().__class__ is yaml.DocumentStartEvent:
            documents.append(build(get()))
            get()  # DocumentEndEvent
        return documents
    finally:
        loader.dispose()


def parse_documents(text: str, source: str) -> list[Any]:
    """Parse a YAML or JSON text into its documents (empty documents dropped)."""
    with _no_gc():
        if looks_like_json(text):
            try:
                # Integers beyond 64 bits become floats here, as in Kubernetes' own unstructured
                # JSON decoding (which keeps int64 and reads anything else as float64).
                documents = [orjson.loads(text[1:] if text.startswith("\ufeff") else text)]
            except orjson.JSONDecodeError:
                # JSON values one after another (kubectl reads them); else flow-style YAML, which
                # also starts with { or [: YAML decides and reports.
                stream = _json_stream(text, source)
                if stream is not None:
                    return stream
            else:
                check_json_keys(text, source)
                return documents
        try:
            try:
                docs = _fast_documents(text) if _BaseLoader is not yaml.SafeLoader else None
            except _Unusual:
                docs = None
            if docs is None:
                docs = list(yaml.load_all(text, Loader=_KubeYAMLLoader))
        except yaml.YAMLError as exc:
            raise _yaml_error(source, exc, text) from None
        except RecursionError:
            # Not handed to the recursive C composer: some libyaml builds crash that deep.
            raise InputError(f"{source}: invalid YAML: nested too deeply") from None
        except ValueError as exc:  # a scalar PyYAML resolves but cannot convert, such as 0x_
            raise InputError(f"{source}: invalid YAML: {exc}") from None
    return [d for d in docs if d is not None]


def _flatten(docs: Iterable[Any], source: str) -> list[KubeObject]:
    objects: list[KubeObject] = []
    for index, doc in enumerate(docs, start=1):
        if not isinstance(doc, dict):
            raise InputError(f"{source}: document {index} is a {type(doc).__name__}, expected a Kubernetes object")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc["items"] or []
            if not isinstance(items, list):
                raise InputError(f"{source}: document {index} ({kind}): items must be a list")
            for position, item in enumerate(items):
                if not isinstance(item, dict):
                    raise InputError(f"{source}: document {index} ({kind}): items[{position}] is not an object")
                objects.append(item)
        else:
            objects.append(doc)
    return objects


def load_objects_from_text(text: str, source: str) -> list[KubeObject]:
    """Kubernetes objects in ``text``: documents of a stream, with ``List`` objects expanded."""
    return _flatten(parse_documents(text, source), source)


def load_objects(path: str) -> list[KubeObject]:
    """Kubernetes objects in the file at ``path`` (``-`` for stdin)."""
    source = "<stdin>" if path == "-" else path
    return load_objects_from_text(read_text(path), source)


def dump_yaml(value: Any) -> str:
    """One value as YAML, keys in their given order (``-o yaml``)."""
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False)


def dump_yaml_stream(objects: Iterable[Any]) -> str:
    """Objects as a YAML stream, keys in their given order, like kubectl prints them."""
    return yaml.safe_dump_all(list(objects), sort_keys=False, default_flow_style=False, explicit_start=True)
