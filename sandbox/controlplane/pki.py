"""The real control plane's certificates, keys and one kubeconfig per identity.

One CA signs kube-apiserver's serving certificate and every client certificate; kube-apiserver's
x509 authenticator maps a certificate's common name to the user and its organizations to groups,
so each component gets exactly the identity kubeadm would give it.

kube-apiserver presents a client certificate to admission webhooks, as an AdmissionConfiguration
(``admission.json``) with a ``kubeConfigFile`` (``webhook-client.kubeconfig``, user ``*``) tells it
to: CN ``kube-apiserver-webhook-client``, from a CA of its own (``webhook-client-ca.crt``), not the
cluster CA, which signs every kubelet's and user's certificate too.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpucluster.certs.authority import KeyPair, new_ca, new_client_cert, new_serving_cert
from gpucluster.sandbox import kubeconfig

# Service ClusterIPs are loopback addresses (which this machine answers on without any set-up) that
# no process pod gets: the process runtime draws pod addresses from 127.1-254.x.y.
SERVICE_CIDR = "127.255.0.0/16"
KUBERNETES_SERVICE_IP = "127.255.0.1"


@dataclass(frozen=True)
class Identity:
    """A user of the control plane: a name and groups, written to ``<file>.kubeconfig``."""

    file: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity("admin", "kubernetes-admin", ("system:masters",))
CONTROLLER_MANAGER = Identity("controller-manager", "system:kube-controller-manager")
SCHEDULER = Identity("scheduler", "system:kube-scheduler")
# The simulated DRA driver's kubelet plugin: only the rights a DRA kubelet plugin has (its
# ClusterRole is created at start-up), never a node's or an admin's.
DRA_PLUGIN = Identity("dra-plugin", "gpucluster:simulated-dra-kubelet-plugin")
WEBHOOK_CLIENT_NAME = "kube-apiserver-webhook-client"


def node_identity(node: str) -> Identity:
    return Identity(f"node-{node}", f"system:node:{node}", ("system:nodes",))


@dataclass(frozen=True)
class ControlPlanePKI:
    directory: Path
    ca: KeyPair

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def webhook_client_ca_file(self) -> Path:
        """The CA of the certificate kube-apiserver presents to webhooks (for ``--client-ca-file``)."""
        return self.directory / "webhook-client-ca.crt"

    @property
    def admission_config_file(self) -> Path:
        return self.directory / "admission.json"

    def path(self, name: str) -> Path:
        return self.directory / name

    def kubeconfig(self, identity: Identity) -> Path:
        return self.directory / f"{identity.file}.kubeconfig"

    def write_kubelet_serving(self, node: str, address: str) -> tuple[Path, Path]:
        """The serving pair of a simulated node's kubelet API, for its InternalIP."""
        pair = new_serving_cert(self.ca, [node], ip_addresses=[address])
        cert, key = self.directory / f"kubelet-{node}.crt", self.directory / f"kubelet-{node}.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        key.chmod(0o600)
        return cert, key

    def write_kubeconfig(self, identity: Identity, server: str) -> Path:
        pair = new_client_cert(self.ca, identity.user, list(identity.groups))
        name = "gpucluster-kube"
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {"server": server, "certificate-authority-data": _b64(self.ca.cert_pem)},
                }
            ],
            "users": [
                {
                    "name": identity.user,
                    "user": {
                        "client-certificate-data": _b64(pair.cert_pem),
                        "client-key-data": _b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": identity.user}}],
            "current-context": name,
            "preferences": {},
        }
        return kubeconfig.write(self.kubeconfig(identity), config)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def create(directory: Path) -> ControlPlanePKI:
    """CA, kube-apiserver's serving pair and the ServiceAccount token signing key, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = new_ca("gpucluster-kube-ca")
    serving = new_serving_cert(
        ca,
        [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ip_addresses=["127.0.0.1", KUBERNETES_SERVICE_IP],
    )
    signing = ec.generate_private_key(ec.SECP256R1())
    kubelet_client = new_client_cert(ca, "kube-apiserver-kubelet-client")
    files = {
        "apiserver-kubelet-client.crt": kubelet_client.cert_pem,
        "apiserver-kubelet-client.key": kubelet_client.key_pem,
        "ca.crt": ca.cert_pem,
        "ca.key": ca.key_pem,
        "apiserver.crt": serving.cert_pem,
        "apiserver.key": serving.key_pem,
        "sa.key": signing.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        "sa.pub": signing.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    webhook_ca = new_ca("gpucluster-kube-webhook-client-ca")
    webhook_client = new_client_cert(webhook_ca, WEBHOOK_CLIENT_NAME)
    files["webhook-client-ca.crt"] = webhook_ca.cert_pem
    files["webhook-client.kubeconfig"] = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "users": [
                {
                    "name": "*",  # every webhook, by Service or URL
                    "user": {
                        "client-certificate-data": _b64(webhook_client.cert_pem),
                        "client-key-data": _b64(webhook_client.key_pem),
                    },
                }
            ],
        }
    ).encode()
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(directory / "webhook-client.kubeconfig"),
    }
    files["admission.json"] = json.dumps(
        {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {"name": name, "configuration": plugin}
                for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
            ],
        }
    ).encode()
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600 if name.endswith((".key", ".kubeconfig")) else 0o644)
    return ControlPlanePKI(directory, ca)
