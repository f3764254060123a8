"""``gpucluster match``: evaluate CEL device selectors against ResourceSlices, as the scheduler would."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from gpucluster.cli import Subparsers
from gpucluster.dra import gates
from gpucluster.dra.cel import (
    MAX_EXPRESSION_LENGTH,
    CelCompileError,
    CelRuntimeError,
    compile_selector,
    conversion_error,
    list_conversion_error,
    slice_views,
)
from gpucluster.dra.model import SUPPORTED_VERSIONS, AllocatorInputError
from gpucluster.errors import EXIT_OK, InputError
from gpucluster.manifests import dump_yaml, load_objects


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "match",
        help="evaluate CEL device selectors against ResourceSlices",
        description=(
            "Evaluate each expression in the Kubernetes DRA CEL environment against every device of the "
            "ResourceSlices in FILE (other kinds are skipped). Outcomes: match, nomatch, error (a runtime "
            "error, which would abort scheduling of a claim using the selector)."
        ),
    )
    parser.add_argument("-e", "--expression", action="append", required=True, metavar="EXPR", help="repeatable")
    parser.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="ResourceSlices (YAML/JSON, - for stdin)"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", "wide", "json", "yaml", "summary"],
        default="table",
        help="table (default), wide (also each slice's node and the error messages), json or yaml (one entry "
        "per device and expression), or summary (counts)",
    )
    parser.add_argument(
        "--kubernetes-version", choices=SUPPORTED_VERSIONS, default="1.34", help="for feature gate defaults"
    )
    parser.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        default="",
        help="DRA feature gates (DRAConsumableCapacity declares device.allowMultipleAllocations)",
    )
    parser.set_defaults(func=run)


def _programs(expressions: list[str], *, consumable_capacity: bool, list_type_attributes: bool = False) -> list[Any]:
    programs = []
    for index, expression in enumerate(expressions):
        size = len(expression.encode())
        if size > MAX_EXPRESSION_LENGTH:
            raise InputError(f"expression #{index}: {size} bytes, longer than the 10 KiB limit")
        try:
            programs.append(
                compile_selector(
                    expression, consumable_capacity=consumable_capacity, list_type_attributes=list_type_attributes
                )
            )
        except CelCompileError as exc:
            raise InputError(f"expression #{index}: compile error at {exc}") from None
    return programs


def _each_row(slices: list[dict[str, Any]], programs: list[Any], lists: bool = False) -> Iterator[dict[str, Any]]:
    unconvertible = list_conversion_error if lists else conversion_error
    for resource_slice in slices:
        spec = resource_slice["spec"]
        pool = str((spec.get("pool") or {}).get("name", ""))
        for view in slice_views(resource_slice, list_type_attributes=lists):
            # Kubernetes converts every attribute before evaluating: one that does not convert
            # fails every expression on the device, whatever it reads.
            bad = unconvertible(view)
            for index, program in enumerate(programs):
                if bad:
                    outcome, message = "error", bad
                else:
                    try:
                        outcome, message = ("match" if program.evaluate(view) else "nomatch"), ""
                    except CelRuntimeError as exc:
                        outcome, message = "error", str(exc)
                yield {"driver": view.driver, "pool": pool, "device": view.name, "expression": index,
                       "outcome": outcome, "message": message}  # fmt: skip


_ROW_KEYS = ("driver", "pool", "device", "expression", "outcome", "message")
_ROW_TEMPLATE = (
    '{\n    "driver": %s,\n    "pool": %s,\n    "device": %s,\n    "expression": %d,\n'
    '    "outcome": %s,\n    "message": %s\n  }'
)


def _row_json(row: dict[str, Any], quote: Any = json.encoder.encode_basestring_ascii) -> str:
    """``json.dumps(row, indent=2)`` indented by two more spaces. With ``indent`` json.dumps runs its
    pure-Python encoder (a third of a ``match``); the rows _each_row yields are filled into a
    template with the C string encoder instead."""
    if tuple(row) == _ROW_KEYS and type(row["expression"]) is int:
        driver, pool, device, outcome, message = (
            row["driver"],
            row["pool"],
            row["device"],
            row["outcome"],
            row["message"],
        )
        if type(driver) is type(pool) is type(device) is type(outcome) is type(message) is str:
            return _ROW_TEMPLATE % (quote(driver), quote(pool), quote(device), row["expression"], quote(outcome),
                                    quote(message))  # fmt: skip
    return json.dumps(row, indent=2).replace("\n", "\n  ")


def _write_json_stream(rows: Iterable[dict[str, Any]], out: TextIO) -> None:
    """What ``json.dumps(list(rows), indent=2)`` prints, written row by row: the answer for 20,000
    devices is tens of MB, and it never has to be in memory at once."""
    first = True
    for row in rows:
        out.write(("[\n  " if first else ",\n  ") + _row_json(row))
        first = False
    out.write("[]\n" if first else "\n]\n")


def _slices(path: str) -> list[dict[str, Any]]:
    source = "<stdin>" if path == "-" else path
    slices = []
    for index, obj in enumerate(load_objects(path), start=1):
        if obj.get("kind") != "ResourceSlice":
            continue
        spec = obj.get("spec")
        name = (obj.get("metadata") or {}).get("name", f"document {index}")
        if not isinstance(spec, dict) or not isinstance(spec.get("driver"), str) or not spec["driver"]:
            raise InputError(f"{source}: ResourceSlice {name}: spec.driver: Required value")
        devices = spec.get("devices", [])
        if not isinstance(devices, list) or not all(isinstance(d, dict) and d.get("name") for d in devices):
            raise InputError(f"{source}: ResourceSlice {name}: spec.devices: every device needs a name")
        slices.append(obj)
    if not slices:
        raise InputError(f"{source}: no ResourceSlice found")
    return slices


def _slice_node(spec: dict[str, Any]) -> str:
    """Which nodes a slice's devices are on, as kubectl's wide output would say it."""
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    if spec.get("allNodes"):
        return "<all>"
    if spec.get("nodeSelector"):
        return "<selector>"
    if spec.get("perDeviceNodeSelection"):
        return "<per device>"
    return "-"


def _nodes(slices: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> where the device is (:func:`_slice_node`), for ``-o wide``."""
    out: dict[tuple[str, str, str], str] = {}
    for resource_slice in slices:
        spec = resource_slice["spec"]
        pool = str((spec.get("pool") or {}).get("name", ""))
        for device in spec.get("devices") or []:
            if isinstance(device, dict):
                out.setdefault((str(spec.get("driver")), pool, str(device.get("name"))), _slice_node(spec))
    return out


def _table(
    rows: list[dict[str, Any]], expressions: list[str], nodes: dict[tuple[str, str, str], str] | None = None
) -> str:
    """Outcomes by device; with ``nodes`` (``-o wide``) also each device's node and the messages."""
    wide = nodes is not None
    header = ["DRIVER", "POOL", "DEVICE", *(["NODE"] if wide else []), *(f"#{i}" for i in range(len(expressions)))]
    lines = [header]
    by_device: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by_device.setdefault((row["driver"], row["pool"], row["device"]), []).append(row)
    for key, found in by_device.items():
        outcomes = [r["outcome"] for r in found]
        if not wide:
            lines.append([*key, *outcomes])
            continue
        messages = "; ".join(f"#{r['expression']}: {r['message']}" for r in found if r["message"])
        lines.append([*key, (nodes or {}).get(key, "-"), *outcomes, messages])
    if wide:
        header.append("MESSAGE")
        lines = [line + [""] * (len(header) - len(line)) for line in lines]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    legend = [f"#{i}: {e}" for i, e in enumerate(expressions)]
    body = "\n".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)
    return "\n".join([*legend, "", body])


def run(args: argparse.Namespace) -> int:
    try:
        enabled = gates.resolve(args.kubernetes_version, gates.parse(args.feature_gates))
    except AllocatorInputError as exc:
        raise InputError(f"--feature-gates: {exc}") from None
    slices = _slices(args.filename)
    lists = enabled.get(gates.LIST_TYPE_ATTRIBUTES, False)  # DRAListTypeAttributes (1.36 alpha)
    programs = _programs(
        args.expression, consumable_capacity=enabled[gates.CONSUMABLE_CAPACITY], list_type_attributes=lists
    )
    if args.output == "json":
        _write_json_stream(_each_row(slices, programs, lists), sys.stdout)
        return EXIT_OK
    rows = list(_each_row(slices, programs, lists))
    if args.output == "yaml":
        sys.stdout.write(dump_yaml(rows))
        return EXIT_OK
    if args.output == "summary":
        summary = [{"expression": i, "match": 0, "nomatch": 0, "error": 0} for i in range(len(args.expression))]
        for row in rows:
            summary[row["expression"]][row["outcome"]] += 1
        print(json.dumps({"expressions": summary}, indent=2))
    else:
        wide = _nodes(slices) if args.output == "wide" else None
        sys.stdout.write(_table(rows, args.expression, wide) + "\n")
    return EXIT_OK
