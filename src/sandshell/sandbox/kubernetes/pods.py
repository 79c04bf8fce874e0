"""A session's sandbox as a pod: created, waited for, attached, explained when it dies, deleted.

The cluster's scheduler places it (requests, node selector, priority, runtime class); the host
only waits, and says in one sentence why a pod never ran: not scheduled, an image that cannot be
pulled, a container that cannot start. A pod that vanishes or fails mid-session (a lost node, the
deadline) is named by what the cluster says of it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from sandshell.config import SandboxSettings
from sandshell.errors import SandboxError
from sandshell.sandbox.connection import Connection
from sandshell.sandbox.kubernetes import podspec
from sandshell.sandbox.kubernetes.attach import PodAttachConnection
from sandshell.sandbox.kubernetes.cluster import PULL_FAILURES, START_FAILURES, Cluster, NotFound


class Pod:
    """One session's pod (`id` and `name` are the pod's name)."""

    def __init__(self, cluster: Cluster, settings: SandboxSettings, session_id: str) -> None:
        self.cluster, self.settings, self.session_id = cluster, settings, session_id
        self.name = self.id = podspec.pod_name(session_id)
        self.policy = settings.profile == "locked"

    def create(self) -> None:
        """Create the pod (and a locked session's network policy first) and wait until it runs;
        SandboxError saying why it did not, with nothing left behind."""
        image = needs_image(self.settings)
        try:
            if self.policy:  # before the pod: a locked pod never has a moment on the network
                self.cluster.create("networkpolicy", podspec.deny_egress(self.session_id))
            self.cluster.create("pod", podspec.pod(self.settings, self.session_id, image))
            self._wait(self.settings.kube_start_timeout)
        except BaseException:
            self.remove()
            raise

    def _wait(self, timeout: float) -> None:
        deadline, last = time.monotonic() + timeout, {}
        while (left := deadline - time.monotonic()) > 0:
            try:
                for pod in self.cluster.watch(self.name, min(left, 30.0)):
                    last = pod
                    if (verdict := _verdict(pod, self.settings.kube_image)) == "running":
                        return
                    if verdict:
                        raise SandboxError(verdict)
                    if time.monotonic() > deadline:
                        break
            except SandboxError:
                raise
            except Exception:  # the API server away for a moment: watch again while time is left
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        raise SandboxError(self._never(last, timeout))

    def _never(self, pod: dict[str, Any], timeout: float) -> str:
        conditions = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
        scheduled = conditions.get("PodScheduled") or {}
        if scheduled.get("status") != "True":
            said = scheduled.get("message") or "; ".join(self.cluster.events(self.name)[-2:]) or "no node was chosen"
            return (
                f"the cluster did not schedule the sandbox pod {self.name} within {timeout:.0f}s ({said[:300]}); "
                "no node fits its requests (SANDSHELL_MEMORY, SANDSHELL_CPUS), node selector or runtime class"
            )
        said = "; ".join(self.cluster.events(self.name)[-2:]) or "no reason given"
        return (
            f"the sandbox pod {self.name} did not start within {timeout:.0f}s ({said[:300]}); "
            "SANDSHELL_KUBE_START_TIMEOUT allows more time for a slow image pull"
        )

    def connection(self) -> Connection:
        return PodAttachConnection(
            self.cluster.configuration, self.cluster.namespace, self.name, self.settings.kube_heartbeat
        )

    def running(self) -> bool:
        """Whether the pod's container runs (an API server that does not answer is taken to mean yes)."""
        try:
            return _verdict(self.cluster.pod(self.name, away=5), self.settings.kube_image) == "running"
        except NotFound:
            return False
        except SandboxError:
            return True

    def death(self, fallback: object) -> str:
        """Why the pod stopped, as the cluster tells it, else `fallback` (what the link said)."""
        try:
            pod = self.cluster.pod(self.name, away=5)
        except NotFound:
            return "its pod was deleted (a node lost, or removed by someone else)"
        except SandboxError:
            return str(fallback)
        status = pod.get("status") or {}
        if (meta := pod.get("metadata") or {}).get("deletionTimestamp"):
            return f"its pod {meta.get('name')} is being deleted ({status.get('reason') or 'by the cluster'})"
        for c in status.get("containerStatuses") or []:
            ended = (c.get("state") or {}).get("terminated") or {}
            if ended.get("reason") == "OOMKilled":
                return f"it ran out of memory: the pod's limit ({self.settings.memory}, SANDSHELL_MEMORY) was reached"
            if ended:
                return f"its container ended ({ended.get('reason') or 'exit'} {ended.get('exitCode', '')})".strip()
        if status.get("phase") == "Failed" or status.get("reason"):
            reason = status.get("reason") or "Failed"
            return f"the cluster ended its pod ({reason}: {str(status.get('message') or '')[:200]})"
        return str(fallback)

    def last_words(self) -> str:
        return self.cluster.log_tail(self.name) or self.death("no reason given")

    def remove(self) -> None:
        with contextlib.suppress(SandboxError):
            self.cluster.delete(self.name, policy=self.policy)


def needs_image(settings: SandboxSettings) -> str:
    """SANDSHELL_KUBE_IMAGE, or SandboxError saying it is needed."""
    if not settings.kube_image:
        raise SandboxError(
            "SANDSHELL_ENGINE=kubernetes needs SANDSHELL_KUBE_IMAGE: the sandbox image pushed to a registry "
            "the cluster pulls from (docs/scaling.md says how)"
        )
    return settings.kube_image


def _verdict(pod: dict[str, Any], image: str) -> str:
    """ "running", "" (not yet) or why the pod will not run, in one sentence."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        waiting = state.get("waiting") or {}
        reason, message = str(waiting.get("reason") or ""), str(waiting.get("message") or "")[:200]
        if reason in PULL_FAILURES:
            return (
                f"the cluster cannot pull the sandbox image {image} ({reason}: {message}); push it to a registry "
                "the nodes can pull from and set SANDSHELL_KUBE_IMAGE to it (docs/scaling.md)"
            )
        if reason in START_FAILURES:
            return f"the sandbox container cannot start ({reason}: {message})"
        if phase == "Running" and state.get("running") is not None:
            return "running"
    if phase in ("Failed", "Succeeded"):
        why = f"{status.get('reason') or phase}: {status.get('message') or ''}"
        return f"the sandbox pod ended before the session began ({why})"
    return ""
