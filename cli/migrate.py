"""``gpucluster migrate -f FILE|DIR|- [-o FILE|DIR] [--check]``: move manifests from extended resources to DRA.

The rewriting is :mod:`gpucluster.migrate` with the webhook's translation settings, so a
migrated manifest gives exactly the pods the webhook would have made of the original.

* ``-f FILE`` or ``-f -``: the migrated manifest goes to stdout, or to ``-o FILE`` (``-o DIR``
  writes ``DIR/<name of FILE>``).
* ``-f DIR``: every ``*.yaml``, ``*.yml`` and ``*.json`` below DIR (hidden directories skipped)
  is migrated into the same relative path under ``-o DIR``, which must lie outside DIR; files that
  need nothing are copied unchanged, so the output tree is complete. A directory is never
  rewritten in place (``-o`` is required, except with ``--check``). A file that cannot be read or
  parsed does not stop the walk: each one gets its one-line error on stderr, every other file is
  migrated (or checked), and the exit code is 2 at the end.
* ``--check``: nothing is written; stdout lists what would change, the exit code is 1 when
  anything still requests GPUs through extended resources (migratable or not), 0 otherwise.

The report (what was migrated with how many devices per pod, the ResourceClaimTemplates
created, and what could not be migrated and why) goes to stderr. Exit codes: 0 done (or, with
``--check``, nothing to migrate), 1 ``--check`` found something, 2 bad input (a one-line error
naming the file, and the line for YAML/JSON syntax errors).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from gpucluster.cli import Subparsers
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, EXIT_USAGE, InputError
from gpucluster.manifests import read_text
from gpucluster.migrate import MigrateResult, Workload, migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG

SUFFIXES = (".yaml", ".yml", ".json")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="rewrite manifests that request nvidia.com/gpu or nvidia.com/mig-* into DRA claims",
        description=(
            "Rewrite the pod templates of manifests (Pods, Deployments, StatefulSets, DaemonSets, ReplicaSets, "
            "Jobs, CronJobs and custom resources carrying pod templates: Kubeflow jobs, Argo Workflows, KServe "
            "InferenceServices ...) from nvidia.com/gpu and nvidia.com/mig-* extended resources to DRA "
            "ResourceClaims, with the webhook's translation, and add the ResourceClaimTemplates they use. "
            "Comments, document order and untouched documents are kept. The report goes to stderr. "
            "Exit 0 done, 1 --check found GPU requests to migrate, 2 bad input."
        ),
    )
    parser.add_argument(
        "-f",
        "--filename",
        required=True,
        metavar="FILE|DIR",
        help="manifest (YAML stream or JSON), - for stdin, or a directory walked for *.yaml, *.yml, *.json",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE|DIR",
        help="where to write: a file (default stdout), or for -f DIR the output directory (required, outside DIR)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; list what would change and exit 1 if anything requests GPUs through extended resources",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.filename:  # Path("") is the current directory
        raise InputError("-f: give a file, a directory or - for stdin")
    if args.output == "":
        raise InputError("-o: give a file or a directory (without -o the result goes to stdout)")
    if args.check and args.output:
        raise InputError(f"-o {args.output}: --check writes nothing; give one or the other")
    source = Path(args.filename)
    errors: list[InputError] = []
    if args.filename != "-" and source.is_dir():
        pairs = _migrate_tree(source, args, errors)
    else:
        name = "<stdin>" if args.filename == "-" else args.filename
        text = read_text(args.filename)
        result = migrate_text(
            text, name, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL, json_input=_is_json(args.filename)
        )
        pairs = [(result, _file_target(args))]
    results = [result for result, _ in pairs]
    for error in errors:
        print(f"gpucluster migrate: {error}", file=sys.stderr)
    if args.check:
        _print_check(results, sys.stdout)
        _print_report(results, sys.stderr, details=False)
        _print_errors(errors, sys.stderr)
        if errors:
            return EXIT_USAGE
        return EXIT_NEGATIVE if any(r.needs_migration for r in results) else EXIT_OK
    for result, target in pairs:
        if target is None:
            sys.stdout.write(result.text)
        else:
            _write(target, result.text)
    _print_report(results, sys.stderr, details=True)
    _print_errors(errors, sys.stderr)
    return EXIT_USAGE if errors else EXIT_OK


def _print_errors(errors: list[InputError], out: TextIO) -> None:
    if errors:
        files = f"{len(errors)} file" + ("" if len(errors) == 1 else "s")
        print(f"gpucluster migrate: {files} not migrated (cannot be read or parsed, listed above)", file=out)


def _is_json(path: str) -> bool | None:
    return True if path != "-" and path.lower().endswith(".json") else None


def _file_target(args: argparse.Namespace) -> Path | None:
    if args.check or not args.output:
        return None
    target = Path(args.output)
    if target.is_dir():
        if args.filename == "-":
            raise InputError(f"-o {args.output}: is a directory; name a file to write stdin's migration to")
        target = target / Path(args.filename).name
    return target


def manifest_files(root: Path) -> list[Path]:
    """The manifests below ``root``, in a stable order; hidden directories and files are skipped."""
    found = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.suffix.lower() in SUFFIXES and path.is_file():
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _migrate_tree(
    root: Path, args: argparse.Namespace, errors: list[InputError]
) -> list[tuple[MigrateResult, Path | None]]:
    """Every manifest below ``root``; a file that cannot be read or parsed goes to ``errors``."""
    out_root: Path | None = None
    if not args.check:
        if not args.output:
            raise InputError(
                f"{args.filename}: is a directory; give -o DIR for the migrated copy of the tree "
                "(migrate never rewrites a directory in place), or --check"
            )
        out_root = Path(args.output)
        resolved_in, resolved_out = root.resolve(), out_root.resolve()
        # Neither inside the other: an output within the source is migrated again on the next run,
        # a source within the output has its own files overwritten by the mirrored copy.
        if resolved_out == resolved_in or resolved_in in resolved_out.parents or resolved_out in resolved_in.parents:
            raise InputError(
                f"-o {args.output}: must be outside {args.filename} and not hold it "
                "(a directory is never migrated in place)"
            )
        if out_root.exists() and not out_root.is_dir():
            raise InputError(f"-o {args.output}: exists and is not a directory")
    pairs: list[tuple[MigrateResult, Path | None]] = []
    for path in manifest_files(root):
        try:
            result = migrate_text(
                read_text(str(path)),
                str(path),
                config=WEBHOOK_CONFIG,
                opt_out_label=TRANSLATE_LABEL,
                json_input=_is_json(str(path)),
            )
        except InputError as exc:
            errors.append(exc)
            continue
        pairs.append((result, out_root / path.relative_to(root) if out_root is not None else None))
    return pairs


def _write(target: Path, text: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None


def _devices(workload: Workload) -> str:
    classes = ", ".join(f"{name}={count}" for name, count in sorted(workload.devices.items()))
    noun = "device" if workload.gpus == 1 else "devices"
    return f"{workload.gpus} {noun} per pod ({classes})"


def _print_check(results: list[MigrateResult], out: TextIO) -> None:
    for result in results:
        for workload in result.migrated:
            print(f"would migrate {result.source}: {workload.label}: {_devices(workload)}", file=out)
        for template in result.created:
            print(f"would create {result.source}: ResourceClaimTemplate {template}", file=out)
        for workload, problem in result.problems:
            print(f"needs manual migration {result.source}: {workload.label}: {problem}", file=out)
        for where in result.unhandled:
            print(f"needs manual migration {result.source}: {where}", file=out)


def _print_report(results: list[MigrateResult], out: TextIO, *, details: bool) -> None:
    for result in results:
        if details:
            for workload in result.migrated:
                print(f"{result.source}: migrated {workload.label}: {_devices(workload)}", file=out)
                for change in workload.changes:
                    print(f"  {change}", file=out)
            for template in result.created:
                print(f"{result.source}: created ResourceClaimTemplate {template}", file=out)
            for workload, problem in result.problems:
                print(f"{result.source}: not migrated: {workload.label}: {problem}", file=out)
            for where in result.unhandled:
                print(f"{result.source}: not migrated: {where}", file=out)
        for workload in result.workloads:
            for note in workload.notes:
                print(f"{result.source}: note: {workload.label}: {note}", file=out)
    migrated = sum(len(r.migrated) for r in results)
    devices = sum(w.gpus for r in results for w in r.migrated)
    created = sum(len(r.created) for r in results)
    problems = sum(len(r.problems) + len(r.unhandled) for r in results)
    changed = sum(1 for r in results if r.changed)
    verb = "to migrate" if not details else "migrated"
    files = f"{len(results)} file" + ("" if len(results) == 1 else "s")
    print(
        f"gpucluster migrate: {migrated} workload{'' if migrated == 1 else 's'} {verb} "
        f"({devices} device{'' if devices == 1 else 's'} per pod in total), "
        f"{created} ResourceClaimTemplate{'' if created == 1 else 's'} "
        f"{'to create' if not details else 'created'}, {problems} GPU request{'' if problems == 1 else 's'} "
        f"not migrated; {changed} of {files} {'would change' if not details else 'changed'}",
        file=out,
    )
