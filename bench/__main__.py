"""`make bench`: run every bench/bench_*.py module, print a table, write bench/results.json.

``python -m bench webhook controller`` runs only those suites (``make bench SUITES="webhook"``).

Each module exposes ``run() -> list[dict]``; a row is
``{"name": str, "value": float, "unit": str, "target": str | None, "ok": bool | None}``.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path
from typing import Any

import bench as bench_pkg


def _rows(only: set[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for info in sorted(pkgutil.iter_modules(bench_pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("bench_") or (only and info.name.removeprefix("bench_") not in only):
            continue
        module = importlib.import_module(f"bench.{info.name}")
        for row in module.run():
            rows.append({"suite": info.name.removeprefix("bench_"), **row})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("suite", "benchmark", "value", "unit", "target", "ok")
    lines = [header]
    for r in rows:
        ok = r.get("ok")
        lines.append(
            (
                r["suite"],
                r["name"],
                f"{r['value']:.3f}" if isinstance(r["value"], float) else str(r["value"]),
                r["unit"],
                r.get("target") or "",
                "" if ok is None else ("yes" if ok else "NO"),
            )
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines)


def main() -> int:
    only = set(sys.argv[1:])
    known = {
        m.name.removeprefix("bench_") for m in pkgutil.iter_modules(bench_pkg.__path__) if m.name.startswith("bench_")
    }
    if only - known:
        print(
            f"unknown suite(s): {', '.join(sorted(only - known))}; known: {', '.join(sorted(known))}", file=sys.stderr
        )
        return 2
    rows = _rows(only)
    print(_table(rows))
    out = Path("bench/results.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 1 if any(r.get("ok") is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
