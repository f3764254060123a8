"""``<string>.format(<list>)`` of ext.Strings versions 1-3 (the legacy clauses), a subset.

Supported clauses: ``%s``, ``%d``, ``%f``, ``%e`` (with an optional ``.N`` precision), ``%b``,
``%x``, ``%X``, ``%o`` and ``%%``. cel-go formats ``%e`` exponents with two digits, as Go does.
"""

from __future__ import annotations

import math
from typing import Any

from gpucluster.dra.cel.errors import CelRuntimeError
from gpucluster.dra.cel.values import Optional, Uint, format_double, type_name


def _as_string(value: Any) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if type(value) is float:
        return format_double(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(_as_quoted(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_as_quoted(k)}: {_as_quoted(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Optional):
        raise CelRuntimeError(
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given optional_type"
        )
    return str(value)


def _as_quoted(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _as_string(value)


def _number(value: Any, clause: str) -> Any:
    if type(value) in (int, Uint, float):
        return value
    raise CelRuntimeError(
        f"error during formatting: {clause} clause can only be used on integers and doubles, was given {type_name(value)}"
    )


def _integer(value: Any, clause: str, allow: tuple[type, ...] = ()) -> int:
    if type(value) in (int, Uint) or type(value) in allow:
        return int(value)
    raise CelRuntimeError(
        f"error during formatting: {clause} clause can only be used on integers, was given {type_name(value)}"
    )


def _fixed(value: Any, precision: int) -> str:
    x = float(_number(value, "fixed-point"))
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return f"{x:.{precision}f}"


def _scientific(value: Any, precision: int) -> str:
    x = float(_number(value, "scientific"))
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return f"{x:.{precision}e}"


def format_string(fmt: str, args: list[Any]) -> str:
    out: list[str] = []
    i = 0
    arg_index = 0
    n = len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 < n and fmt[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        if i + 1 >= n:
            raise CelRuntimeError("unexpected end of string")
        if arg_index >= len(args):
            raise CelRuntimeError(f"index {arg_index} out of range")
        value = args[arg_index]
        arg_index += 1
        j = i + 1
        precision: int | None = None
        if fmt[j] == ".":
            k = j + 1
            while k < n and fmt[k].isdigit():
                k += 1
            if k == j + 1:
                raise CelRuntimeError("unable to find end of precision specifier")
            precision = int(fmt[j + 1 : k])
            j = k
        if j >= n:
            raise CelRuntimeError("unexpected end of string")
        verb = fmt[j]
        if verb == "s":
            out.append(_as_string(value))
        elif verb == "d":
            out.append(str(_integer(value, "decimal")))
        elif verb == "f":
            out.append(_fixed(value, 6 if precision is None else precision))
        elif verb == "e":
            out.append(_scientific(value, 6 if precision is None else precision))
        elif verb == "b":
            if value is True or value is False:
                out.append("1" if value else "0")
            else:
                out.append(format(_integer(value, "binary"), "b"))
        elif verb in "xX":
            if isinstance(value, (str, bytes)):
                data = value.encode("utf-8") if isinstance(value, str) else value
                text = data.hex()
            else:
                text = format(_integer(value, "hex"), "x")
            out.append(text.upper() if verb == "X" else text)
        elif verb == "o":
            out.append(format(_integer(value, "octal"), "o"))
        else:
            raise CelRuntimeError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
        i = j + 1
    return "".join(out)
