"""Authentication: who a request is, from its bearer token.

Two kinds of identity, as on a kubeadm cluster:
- the admin kubeconfig's token is cluster-admin (``system:masters``), checked first so the admin
  path costs one constant-time compare;
- ServiceAccount tokens, signed JWTs (HS256 with a per-sandbox key) shaped like kube-apiserver's
  bound tokens (``iss``, ``aud``, ``exp``, ``kubernetes.io`` claims). They are minted by the
  TokenRequest API (``POST .../serviceaccounts/NAME/token``) or in-process by
  ``issue_service_account_token`` (the kubelet's projected token volume), and stop authenticating
  when they expire, when their audience is not the API server's, when the ServiceAccount is gone or
  recreated (uid), or when the Pod/Secret they are bound to is gone or its deletion time passed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpucluster import timestamps
from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.errors import ApiError

if TYPE_CHECKING:
    from gpucluster.sandbox.apiserver.store import Store

Obj = dict[str, Any]

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)
MIN_EXPIRATION_SECONDS = 600
DEFAULT_EXPIRATION_SECONDS = 3600
SERVICE_ACCOUNTS = ("", "serviceaccounts")
PODS = ("", "pods")
SECRETS = ("", "secrets")
NODES = ("", "nodes")
SA_PREFIX = "system:serviceaccount:"
AUTHENTICATED = "system:authenticated"
MASTERS = "system:masters"


@dataclass(frozen=True)
class UserInfo:
    """An authenticated identity (k8s.io/apiserver user.Info)."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def privileged(self) -> bool:
        """Members of system:masters are allowed everything, before and without RBAC."""
        return MASTERS in self.groups

    def to_obj(self) -> Obj:
        """The shape of ``Context.user`` and of AdmissionReview/SelfSubjectReview ``userInfo``."""
        out: Obj = {"username": self.username}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out

    @staticmethod
    def from_obj(obj: Obj) -> UserInfo:
        extra = obj.get("extra") or {}
        return UserInfo(
            username=str(obj.get("username") or obj.get("user") or ""),
            groups=tuple(str(g) for g in obj.get("groups") or ()),
            uid=str(obj.get("uid") or ""),
            extra={str(k): tuple(str(x) for x in v or ()) for k, v in extra.items()},
        )


ADMIN = UserInfo("sandbox-admin", (MASTERS, AUTHENTICATED))


def service_account_username(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def rfc3339(epoch: float) -> str:
    return timestamps.from_epoch(epoch)


def _invalid(field_path: str, message: str) -> ApiError:
    return errors.invalid(
        "authentication.k8s.io", "TokenRequest", "", [("FieldValueInvalid", field_path, f"Invalid value: {message}")]
    )


class Authenticator:
    """Bearer tokens to ``UserInfo``; mints ServiceAccount tokens (``core.authn``)."""

    def __init__(
        self,
        store: Store,
        admin_token: str,
        *,
        admin: UserInfo = ADMIN,
        now: Callable[[], float] = time.time,
        key: bytes | None = None,
    ) -> None:
        self.store = store
        self.admin_token = admin_token.encode()
        self.admin = admin
        self.now = now
        """Seconds since the epoch; tests move it forward to expire tokens."""
        self._key = key or secrets.token_bytes(32)

    # ------------------------------------------------------------ authentication

    def authenticate(self, token: str) -> UserInfo | None:
        """The identity of a bearer token, or None (the caller answers 401)."""
        if not token:
            return None
        if hmac.compare_digest(token.encode(), self.admin_token):
            return self.admin
        claims = self._verify(token)
        if claims is None:
            return None
        return self._service_account_user(claims)

    def _verify(self, token: str) -> Obj | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        signed = f"{parts[0]}.{parts[1]}".encode()
        try:
            signature = _unb64(parts[2])
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, UnicodeDecodeError):
            return None
        if not hmac.compare_digest(signature, hmac.new(self._key, signed, hashlib.sha256).digest()):
            return None
        if not isinstance(claims, dict):
            return None
        now = self.now()
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            return None
        if isinstance(claims.get("nbf"), int) and claims["nbf"] > now + 60:
            return None
        audiences = claims.get("aud") or []
        if not any(a in API_AUDIENCES for a in audiences):
            return None
        return claims

    def _service_account_user(self, claims: Obj) -> UserInfo | None:
        private = claims.get("kubernetes.io") or {}
        namespace = str(private.get("namespace") or "")
        sa_ref = private.get("serviceaccount") or {}
        sa = self.store.get(SERVICE_ACCOUNTS, namespace, str(sa_ref.get("name") or ""))
        if sa is None or sa["metadata"].get("uid") != sa_ref.get("uid") or self._deleted(sa):
            return None
        extra: dict[str, tuple[str, ...]] = {"authentication.kubernetes.io/credential-id": (f"JTI={claims['jti']}",)}
        for kind, key in (("pod", PODS), ("secret", SECRETS)):
            ref = private.get(kind)
            if not ref:
                continue
            bound = self.store.get(key, namespace, str(ref.get("name") or ""))
            if bound is None or bound["metadata"].get("uid") != ref.get("uid") or self._deleted(bound):
                return None
            if kind == "pod":
                extra["authentication.kubernetes.io/pod-name"] = (str(ref["name"]),)
                extra["authentication.kubernetes.io/pod-uid"] = (str(ref["uid"]),)
        node = private.get("node")
        if node:
            extra["authentication.kubernetes.io/node-name"] = (str(node.get("name")),)
            extra["authentication.kubernetes.io/node-uid"] = (str(node.get("uid")),)
        return UserInfo(
            service_account_username(namespace, str(sa_ref["name"])),
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
            str(sa_ref["uid"]),
            extra,
        )

    def _deleted(self, obj: Obj) -> bool:
        """A bound object whose deletion time has passed no longer vouches for its tokens."""
        stamp = obj["metadata"].get("deletionTimestamp")
        if not stamp:
            return False
        try:
            when = timestamps.parse(str(stamp)).timestamp()
        except ValueError:
            return True
        return when <= self.now()

    # ------------------------------------------------------------ minting

    def issue_service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        audiences: list[str] | None = None,
        expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS,
        bound_pod: dict[str, Any] | None = None,
    ) -> tuple[str, str]:
        """A token for ServiceAccount ``namespace/name`` (must exist: else 404 ApiError), bound to
        ``bound_pod`` (a stored Pod object) if given; returns (token, expirationTimestamp)."""
        bound: Obj | None = None
        if bound_pod is not None:
            md = bound_pod.get("metadata") or {}
            bound = {"kind": "Pod", "name": str(md.get("name", "")), "uid": str(md.get("uid", ""))}
            node = (bound_pod.get("spec") or {}).get("nodeName")
            if node:
                bound["nodeName"] = str(node)
        token, expires = self._mint(namespace, name, list(audiences or API_AUDIENCES), expiration_seconds, bound)
        return token, rfc3339(expires)

    def _mint(
        self, namespace: str, name: str, audiences: list[str], expiration_seconds: int, bound: Obj | None
    ) -> tuple[str, int]:
        sa = self.store.get(SERVICE_ACCOUNTS, namespace, name)
        if sa is None:
            raise errors.not_found("", "serviceaccounts", name)
        now = int(self.now())
        expires = now + int(expiration_seconds)
        private: Obj = {"namespace": namespace, "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}}
        if bound is not None:
            key = "pod" if bound["kind"] == "Pod" else "secret"
            private[key] = {"name": bound["name"], "uid": bound["uid"]}
            node_name = bound.get("nodeName")
            if node_name:
                node = self.store.get(NODES, "", str(node_name))
                if node is not None:
                    private["node"] = {"name": node_name, "uid": node["metadata"].get("uid", "")}
        claims: Obj = {
            "aud": audiences,
            "exp": expires,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
            "nbf": now,
            "sub": service_account_username(namespace, name),
        }
        header = _b64(json.dumps({"alg": "HS256", "kid": "sandbox", "typ": "JWT"}, separators=(",", ":")).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signature = hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{_b64(signature)}", expires

    # ------------------------------------------------------------ the TokenRequest API

    def token_request(self, namespace: str, name: str, body: Any) -> Obj:
        """``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token``: the TokenRequest answered."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind and kind != "TokenRequest":
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind (TokenRequest)")
        if api_version and api_version != "authentication.k8s.io/v1":
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version (authentication.k8s.io/v1)"
            )
        spec = body.get("spec") or {}
        if not isinstance(spec, dict):
            raise errors.bad_request("spec must be an object")
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
        if seconds is None:
            seconds = DEFAULT_EXPIRATION_SECONDS
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise errors.bad_request("spec.expirationSeconds must be an integer")
        if seconds < MIN_EXPIRATION_SECONDS:
            raise _invalid("spec.expirationSeconds", f"{seconds}: may not specify a duration less than 10 minutes")
        if seconds > 1 << 32:
            raise _invalid("spec.expirationSeconds", f"{seconds}: may not specify a duration larger than 2^32 seconds")
        audiences = spec.get("audiences") or list(API_AUDIENCES)
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise errors.bad_request("spec.audiences must be a list of strings")
        if self.store.get(SERVICE_ACCOUNTS, namespace, name) is None:
            raise errors.not_found("", "serviceaccounts", name)
        ref = spec.get("boundObjectRef")
        bound: Obj | None = None
        out_ref: Obj | None = None
        if ref:
            bound, out_ref = self._bound_object(namespace, ref)
        token, expires = self._mint(namespace, name, audiences, seconds, bound)
        out_spec: Obj = {"audiences": audiences, "expirationSeconds": seconds}
        if out_ref is not None:
            out_spec["boundObjectRef"] = out_ref
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(self.now())},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": rfc3339(expires)},
        }

    def _bound_object(self, namespace: str, ref: Any) -> tuple[Obj, Obj]:
        if not isinstance(ref, dict):
            raise errors.bad_request("spec.boundObjectRef must be an object")
        kind, ref_name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        api_version = str(ref.get("apiVersion") or "v1")
        if kind not in ("Pod", "Secret") or api_version != "v1":
            raise errors.bad_request(
                f"cannot bind token for object of type {kind}.{api_version}: only Pod and Secret (v1) are supported"
            )
        key = PODS if kind == "Pod" else SECRETS
        obj = self.store.get(key, namespace, ref_name)
        if obj is None:
            raise errors.not_found("", key[1], ref_name)
        uid = obj["metadata"].get("uid", "")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(
                "",
                key[1],
                ref_name,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. The object might have been deleted and then recreated",
            )
        bound: Obj = {"kind": kind, "name": ref_name, "uid": uid}
        if kind == "Pod" and (obj.get("spec") or {}).get("nodeName"):
            bound["nodeName"] = obj["spec"]["nodeName"]
        return bound, {"kind": kind, "apiVersion": "v1", "name": ref_name, "uid": uid}
