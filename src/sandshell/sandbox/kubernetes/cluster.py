"""The Kubernetes API for sessions' pods, through the official client: configuration, create, watch, read,
delete, events and the label reaper; every refusal or silence of the cluster in one sentence."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandshell.config import SandboxSettings
from sandshell.errors import ClusterUnavailable, SandboxError, SandshellError
from sandshell.sandbox.engine import LABEL
from sandshell.sandbox.kubernetes.podspec import SERVER_LABEL, server_id

AWAY_SECONDS = 30.0  # how long a call waits out an API server that does not answer before giving up
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
START_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff")
IN_CLUSTER_NS = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _client() -> Any:
    try:
        import kubernetes
    except ImportError:
        raise ClusterUnavailable(
            "SANDSHELL_ENGINE=kubernetes needs the Kubernetes client; install it with "
            "pip install 'sandshell[kubernetes]'"
        ) from None
    return kubernetes


class Cluster:
    """One connection to a cluster's API server, in one namespace."""

    def __init__(self, settings: SandboxSettings) -> None:
        k8s = _client()
        self.k8s = k8s
        self.configuration = k8s.client.Configuration()
        namespace = ""
        try:
            if not settings.kube_config and os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s.config.load_incluster_config(client_configuration=self.configuration)
                with contextlib.suppress(OSError):
                    namespace = IN_CLUSTER_NS.read_text().strip()
            else:
                path = settings.kube_config or None
                k8s.config.load_kube_config(
                    path, settings.kube_context or None, client_configuration=self.configuration
                )
                _, active = k8s.config.list_kube_config_contexts(path)
                if settings.kube_context:
                    contexts, _ = k8s.config.list_kube_config_contexts(path)
                    active = next((c for c in contexts if c.get("name") == settings.kube_context), active)
                namespace = str((active or {}).get("context", {}).get("namespace") or "")
        except (k8s.config.ConfigException, OSError, ValueError, TypeError) as e:
            where = settings.kube_config or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ClusterUnavailable(
                f"cannot read the Kubernetes configuration ({str(e)[:200]}); set SANDSHELL_KUBECONFIG "
                f"(now {where}) and SANDSHELL_KUBE_CONTEXT, or run inside the cluster with a service account"
            ) from None
        self.namespace = settings.kube_namespace or namespace or "default"
        self.configuration.retries = 0  # the waits below are ours, bounded, and say why
        self.api = k8s.client.ApiClient(self.configuration)
        self.core = k8s.client.CoreV1Api(self.api)
        self.net = k8s.client.NetworkingV1Api(self.api)

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()

    # -- calls, with the cluster's refusals and silences as sentences ---------------------------
    def call(self, what: str, fn: Callable[..., Any], *args: Any, away: float = AWAY_SECONDS, **kw: Any) -> Any:
        """`fn(*args, _preload_content=False)` as JSON, retried while the API server does not answer
        (for `away` seconds, backed off); ClusterUnavailable when it refuses or stays away."""
        deadline, pause = time.monotonic() + away, 0.2
        while True:
            try:
                response = fn(*args, _preload_content=False, _request_timeout=(5, 30), **kw)
                return json.loads(response.data or b"{}")
            except self.k8s.client.ApiException as e:
                status = int(e.status or 0)
                if status and status not in (429, 500, 502, 503, 504):
                    raise self.refused(what, status, e.body) from None
                last = f"HTTP {status or e.reason}"
            except Exception as e:  # urllib3's errors: refused, reset, timed out
                last = type(e).__name__
            if time.monotonic() + pause > deadline:
                raise ClusterUnavailable(
                    f"the Kubernetes API server at {self.host} did not answer to {what} for {away:.0f}s ({last}); "
                    "check that the cluster is up and SANDSHELL_KUBECONFIG points at it"
                )
            time.sleep(pause)
            pause = min(pause * 2, 3.0)

    def refused(self, what: str, status: int, body: Any) -> SandshellError:
        message = ""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            message = str(json.loads(body).get("message", ""))[:300]
        if status in (401, 403):
            return ClusterUnavailable(
                f"the cluster refused to {what} in namespace {self.namespace} ({message or status}); the account "
                "sandshell uses needs the Role in docs/scaling.md (pods, pods/attach, pods/log, events, "
                "networkpolicies)"
            )
        if status == 404:
            return NotFound(f"{what}: not found ({message})")
        if status == 409:
            return Conflict(f"{what}: it exists already ({message})")
        return SandboxError(f"the cluster refused to {what}: {message or f'HTTP {status}'}")

    # -- pods ------------------------------------------------------------------------------------
    def create(self, kind: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if kind == "pod":
            model, fn, what = self.k8s.client.V1Pod.from_dict(body), self.core.create_namespaced_pod, f"pod {name}"
        else:
            model = self.k8s.client.V1NetworkPolicy.from_dict(body)
            fn, what = self.net.create_namespaced_network_policy, f"the network policy {name}"
        with contextlib.suppress(Conflict):  # a retry after an answer that was lost: the name is this session's
            self.call(f"create {what}", fn, self.namespace, model, away=10)

    def pod(self, name: str, away: float = AWAY_SECONDS) -> dict[str, Any]:
        result: dict[str, Any] = self.call(
            f"read pod {name}", self.core.read_namespaced_pod, name, self.namespace, away=away
        )
        return result

    def delete(self, name: str, policy: bool = False) -> None:
        """Delete the pod (now) and its network policy; gone already is fine."""
        with contextlib.suppress(NotFound):
            self.call(
                f"delete pod {name}", self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0
            )
        if policy:
            fn = self.net.delete_namespaced_network_policy
            with contextlib.suppress(NotFound):
                self.call(f"delete the network policy {name}", fn, name, self.namespace)

    def events(self, name: str) -> list[str]:
        """What the cluster said about the pod (scheduling, pulling), oldest first."""
        with contextlib.suppress(SandboxError):
            fn = self.core.list_namespaced_event
            got = self.call("list events", fn, self.namespace, field_selector=f"involvedObject.name={name}", away=3)
            items = sorted(got.get("items") or [], key=lambda e: str(e.get("lastTimestamp") or ""))
            return [f"{e.get('reason', '')}: {e.get('message', '')}" for e in items]
        return []

    def log_tail(self, name: str) -> str:
        with contextlib.suppress(SandboxError):
            fn = self.core.read_namespaced_pod_log
            response = fn(name, self.namespace, tail_lines=3, _preload_content=False, _request_timeout=(5, 10))
            lines = response.data.decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        return ""

    def watch(self, name: str, seconds: float) -> Iterator[dict[str, Any]]:
        """The pod as it changes, for at most `seconds` (one watch; the caller retries)."""
        fn = self.core.list_namespaced_pod
        response = fn(
            self.namespace,
            field_selector=f"metadata.name={name}",
            watch=True,
            timeout_seconds=max(1, int(seconds)),
            _preload_content=False,
            _request_timeout=(5, seconds + 5),
        )
        try:
            pending = b""
            for chunk in response.stream(64 * 1024):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        if isinstance(event.get("object"), dict) and event.get("type") != "ERROR":
                            yield event["object"]
        finally:
            response.release_conn()

    def reap(self, alive: Callable[[int], bool]) -> list[str]:
        """Delete sessions' pods (and policies) that this host's dead processes left, and finished ones."""
        removed = []
        here = server_id().rsplit(".", 1)[0]
        fn = self.core.list_namespaced_pod
        listed = self.call("list pods", fn, self.namespace, label_selector=f"{LABEL},{SERVER_LABEL}", away=10)
        for item in listed.get("items") or []:
            meta, status = item.get("metadata") or {}, item.get("status") or {}
            owner, _, pid = str((meta.get("labels") or {}).get(SERVER_LABEL, "")).rpartition(".")
            gone = owner == here and pid.isdigit() and not alive(int(pid))
            if gone or status.get("phase") in ("Succeeded", "Failed"):
                with contextlib.suppress(SandboxError):
                    self.delete(str(meta.get("name")), policy=True)
                    removed.append(str(meta.get("name")))
        return removed


class NotFound(SandboxError):
    """The object is not there (deleted, or never made)."""


class Conflict(SandboxError):
    """An object of that name exists already."""
