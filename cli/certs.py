"""``gpucluster certs generate|rotate|inject``: the webhook's serving certificates.

- ``generate`` writes a new CA and a serving certificate for a Service into a directory
  (``ca.crt``, ``tls.crt``, ``tls.key``; the key 0600), for installs that bring their own Secret.
- ``rotate`` runs the certificate state machine (:mod:`gpucluster.certs.rotation`) against a live cluster:
  one pass, or one every ``--interval`` seconds (the chart's sidecar). It keeps the Secret current,
  injects the CA bundle into our webhook configurations and, with ``--cert-dir``, writes the
  serving files the webhook reloads.
- ``inject`` puts a CA bundle into our webhook configurations (and no others).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpucluster import logs
from gpucluster.certs import files, inject, rotation
from gpucluster.certs.authority import new_ca, new_serving_cert, service_dns_names
from gpucluster.cli import Subparsers, options
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, GpuclusterError, InputError

if TYPE_CHECKING:
    from gpucluster.certs import rotator
    from gpucluster.kube.client import Kube

# The Kubernetes client (and certs.rotator, which uses it) is imported only by the subcommands that
# talk to a cluster: `certs generate` starts without it.

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_NAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="generate, rotate and inject the webhook's serving certificates",
        description="Manage the webhook's CA and serving certificate. Bad input exits 2 with one line.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    generate = actions.add_parser(
        "generate",
        help="write a new CA and serving certificate (ca.crt, tls.crt, tls.key) into a directory",
        description="Write a new CA (ECDSA P-256, 10 years) and a serving certificate (1 year) for the "
        "Service's DNS names into DIR: ca.crt, tls.crt and tls.key (mode 0600).",
    )
    _service_flags(generate)
    generate.add_argument("--out", required=True, metavar="DIR", help="directory to write into (created)")
    generate.set_defaults(func=run_generate)

    rotate = actions.add_parser(
        "rotate",
        help="keep the webhook Secret current and its CA injected (one pass, or every --interval)",
        description="Read the Secret, renew or rotate what is due, write it back, inject the CA bundle "
        "into the gpucluster webhook configurations and, with --cert-dir, write the serving files.",
    )
    options.add_kubeconfig(rotate)
    _service_flags(rotate)
    rotate.add_argument("--secret", required=True, metavar="NAME", help="Secret holding the certificates")
    rotate.add_argument("--cert-dir", metavar="DIR", help="also write ca.crt, tls.crt and tls.key here (atomically)")
    rotate.add_argument(
        "--interval",
        type=options.finite,
        metavar="SECONDS",
        help="run a pass every SECONDS until SIGTERM instead of once",
    )
    rotate.add_argument(
        "--replica",
        default=os.environ.get("POD_NAME"),
        metavar="NAME",
        help="this replica's pod name, for its serving report (default $POD_NAME)",
    )
    rotate.add_argument(
        "--probe", metavar="HOST:PORT", help="the local webhook, asked which CA its certificate comes from"
    )
    rotate.add_argument("--no-inject", action="store_true", help="do not touch the webhook configurations")
    options.add_logging(rotate)
    rotate.set_defaults(func=run_rotate)

    inject_parser = actions.add_parser(
        "inject",
        help="put a CA bundle into the gpucluster webhook configurations",
        description="Set caBundle of every webhook of the gpucluster Validating and Mutating webhook "
        f'configurations (by name and the label {inject.CA_INJECTION_LABEL}="true"; no others) '
        "to the PEM bundle in --ca-file. Exit 1 when neither configuration exists.",
    )
    options.add_kubeconfig(inject_parser)
    inject_parser.add_argument(
        "--ca-file", required=True, metavar="F", help="PEM file with one or more CA certificates"
    )
    inject_parser.set_defaults(func=run_inject)


def _service_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service", required=True, metavar="S", help="the webhook Service's name")
    parser.add_argument("--namespace", required=True, metavar="NS", help="the webhook Service's namespace")
    parser.add_argument(
        "--dns-name", action="append", default=[], metavar="NAME", help="an extra DNS name for the certificate"
    )


def _check_service(args: argparse.Namespace) -> None:
    for flag, value in (("--service", args.service), ("--namespace", args.namespace)):
        if len(value) > 63 or not _DNS_LABEL.match(value):
            raise InputError(f'{flag}: Invalid value: "{value}": must be a DNS label (lowercase, digits, -)')
    for name in args.dns_name:
        if len(name) > 253 or not _DNS_NAME.match(name):
            raise InputError(f'--dns-name: Invalid value: "{name}": must be a DNS name')


def run_generate(args: argparse.Namespace) -> int:
    _check_service(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: not a directory")
    targets = (rotation.CA_BUNDLE, rotation.TLS_CERT, rotation.TLS_KEY)
    present = [name for name in targets if (out / name).exists() or (out / name).is_symlink()]
    if present:
        # A new CA each run: files already there may be what a cluster trusts (a caBundle, a
        # Secret made from them); they are never replaced behind the user's back.
        raise InputError(
            f"{out}: {', '.join(present)} already there; generate makes a new CA and never replaces them "
            "(remove them, or give another --out)"
        )
    names = [*service_dns_names(args.service, args.namespace), *args.dns_name]
    ca = new_ca()
    pair = new_serving_cert(ca, list(dict.fromkeys(names)))
    try:
        written = files.write_plain(
            out, {rotation.CA_BUNDLE: ca.cert_pem, rotation.TLS_CERT: pair.cert_pem, rotation.TLS_KEY: pair.key_pem}
        )
    except OSError as exc:
        raise InputError(f"{out}: {exc.strerror or exc}") from None
    for path in written:
        print(path)
    return EXIT_OK


def _probe(value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f'--probe: Invalid value: "{value}": must be HOST:PORT')
    return host.strip("[]"), int(port)


async def _connect(kubeconfig: str | None) -> Kube:
    from gpucluster.kube.client import Kube

    return await Kube.connect(kubeconfig)


def run_rotate(args: argparse.Namespace) -> int:
    from gpucluster.certs import rotator

    _check_service(args)
    if len(args.secret) > 253 or not _DNS_NAME.match(args.secret):
        raise InputError(f'--secret: Invalid value: "{args.secret}": must be a DNS subdomain name')
    if args.interval is not None and args.interval <= 0:
        raise InputError(f"--interval: Invalid value: {args.interval}: must be positive")
    options = rotator.RotateOptions(
        namespace=args.namespace,
        secret=args.secret,
        service=args.service,
        cert_dir=Path(args.cert_dir) if args.cert_dir else None,
        replica=args.replica or None,
        probe=_probe(args.probe),
        inject=not args.no_inject,
        extra_dns_names=tuple(args.dns_name),
    )
    if args.interval is not None:
        logs.configure(args.log_format, args.log_level)
    return asyncio.run(_rotate(args.kubeconfig, options, args.interval))


async def _rotate(kubeconfig: str | None, options: rotator.RotateOptions, interval: float | None) -> int:
    from gpucluster.certs import rotator
    from gpucluster.kube.client import KubeError

    kube = await _connect(kubeconfig)
    try:
        if interval is not None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await rotator.rotate_forever(kube, options, interval=interval, stop=stop)
            return EXIT_OK
        result = await rotator.rotate_once(kube, options)
    except KubeError as exc:
        raise GpuclusterError(str(exc)) from None
    except OSError as exc:
        raise GpuclusterError(f"cannot write {options.cert_dir}: {exc.strerror or exc}") from None
    finally:
        await kube.close()
    plan = result.plan
    changed = sorted(i.name for i in result.injections if i.changed)
    print(
        f"secret={options.namespace}/{options.secret} phase={plan.phase} action={plan.action} "
        f"written={str(result.wrote_secret).lower()} injected={','.join(changed) or 'none'} reason={plan.reason}"
    )
    return EXIT_OK


def run_inject(args: argparse.Namespace) -> int:
    path = Path(args.ca_file)
    try:
        bundle = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    try:
        certs = rotation.split_pem_bundle(bundle)
    except ValueError:
        certs = []
    if not certs:
        raise InputError(f"{path}: no PEM certificate found")
    now = dt.datetime.now(dt.UTC)
    if all(c.not_valid_after_utc <= now for c in certs):
        raise InputError(f"{path}: every certificate in the bundle has expired")
    return asyncio.run(_inject(args.kubeconfig, rotation.join_bundle(certs)))


async def _inject(kubeconfig: str | None, bundle: bytes) -> int:
    from gpucluster.kube.client import KubeError

    kube = await _connect(kubeconfig)
    try:
        results = await inject.inject(kube, bundle)
    except KubeError as exc:
        raise GpuclusterError(str(exc)) from None
    finally:
        await kube.close()
    if not results:
        print(
            f"gpucluster certs: no webhook configuration named {inject.VALIDATING_NAME} or {inject.MUTATING_NAME} "
            f'labelled {inject.CA_INJECTION_LABEL}="true"',
            file=sys.stderr,
        )
        return EXIT_NEGATIVE
    for result in results:
        print(f"{result.kind}/{result.name}: {'injected' if result.changed else 'unchanged'}")
    return EXIT_OK
