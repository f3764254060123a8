"""One loader for every file the CLI reads: YAML or JSON, one document, a stream or a `List`.

The caller hands us the path (or ``-`` for stdin); nothing else is opened here.
"""

from __future__ import annotations

import gc
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
        if key in seen:
            first = seen[key].start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first defined on line {first})", key_node.start_mark
            )
        seen[key] = key_node
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_KubeYAMLLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


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


def _yaml_error(source: str, exc: yaml.YAMLError) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    return InputError(f"{where}: invalid YAML: {problem}")


_JSON_START = re.compile(r"\A\s*[\[{]")


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


def parse_documents(text: str, source: str) -> list[Any]:
    """Parse a YAML or JSON text into its documents (empty documents dropped)."""
    with _no_gc():
        if _JSON_START.match(text):
            try:
                return [orjson.loads(text)]
            except orjson.JSONDecodeError:
                pass  # flow-style YAML also starts with { or [; let YAML decide and report
        try:
            docs = list(yaml.load_all(text, Loader=_KubeYAMLLoader))
        except yaml.YAMLError as exc:
            raise _yaml_error(source, exc) from None
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


def dump_yaml_stream(objects: Iterable[Any]) -> str:
    """Objects as a YAML stream, keys in their given order, like kubectl prints them."""
    return yaml.safe_dump_all(list(objects), sort_keys=False, default_flow_style=False, explicit_start=True)
