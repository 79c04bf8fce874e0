"""A protocol-faithful fake Kubernetes API server backed by the local Docker engine (test code only).

Pods become containers (labelled `sandshell.session`, hardened as the pod spec says); `pods/attach`
is a real WebSocket (`v5.channel.k8s.io`, else v4) bridged to the container's Docker attach stream,
with the channel byte, `[255, 0]` half-close, pings and back-pressure (nothing is read from Docker
while the client does not read); get, list and watch (with label and field selectors), delete,
pod logs, events for failures, NetworkPolicies (a deny-all policy puts the pod on no network),
and enough discovery for kubectl. Faults a cluster has can be switched on: an attach that drops,
an API server away, RBAC refusals, a lost node; an image absent from the engine is an image pull
failure and a request above FAKE_NODE_MEMORY never schedules.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import http.server
import json
import os
import re
import socket
import struct
import threading
import time
import urllib.parse
import uuid
from typing import Any

import docker
import docker.errors

LABEL = "sandshell.session"
FAKE_LABEL = "sandshell.kubefake"
FAKE_NODE_MEMORY = 64 * 2**30
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1000, "M": 10**6, "G": 10**9}


def quantity(q: str) -> int:
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(q))
    return int(m.group(1)) * UNITS.get(m.group(2), 1) if m else 0


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class FakeCluster:
    """The fake's state and its Docker side; `url` once started."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.docker = client
        self.lock = threading.Condition()
        self.rv = 1
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.containers: dict[tuple[str, str], str] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.history: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, pod) for watches
        self.forbidden: set[tuple[str, str]] = set()  # (verb, resource) answered 403
        self.away_until = 0.0
        self.attaches: list[socket.socket] = []
        self.half_closed = 0
        self.pings = 0
        self.protocols = ["v5.channel.k8s.io", "v4.channel.k8s.io"]  # what the server accepts, best first
        self.chosen: list[str] = []  # the protocol of each attach
        self.stdin_messages: list[int] = []  # sizes of stdin messages received
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.fake = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._stop = threading.Event()

    def start(self) -> FakeCluster:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._kubelet, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        for key in list(self.containers):
            self._remove_container(key)

    def kubeconfig(self, path: str, namespace: str = "default") -> str:
        with open(path, "w") as f:
            json.dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}
                    ],
                },
                f,
            )
        return path

    # -- faults -----------------------------------------------------------------------------
    def drop_attaches(self) -> int:
        """Cut every open attach, as a load balancer or a kubelet restart would."""
        with self.lock:
            dropped, self.attaches = self.attaches, []
        for sock in dropped:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return len(dropped)

    def away(self, seconds: float) -> None:
        """The API server answers nothing (connections reset) for a while."""
        self.away_until = time.monotonic() + seconds

    def lose_node(self, namespace: str, name: str) -> None:
        """The node under the pod vanishes: its container is gone, the pod is failed as NodeLost."""
        key = (namespace, name)
        self.drop_attaches()
        self._remove_container(key)
        with self.lock:
            pod = self.pods[key]
            pod["status"] = {
                "phase": "Failed",
                "reason": "NodeLost",
                "message": f"Node fake-node which was running pod {name} is unresponsive",
                "conditions": pod["status"].get("conditions", []),
            }
            self._changed("MODIFIED", pod)

    # -- pods -------------------------------------------------------------------------------
    def create_pod(self, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("metadata", {}).get("name", "")
        with self.lock:
            if (ns, name) in self.pods:
                return 409, status(409, "AlreadyExists", f'pods "{name}" already exists')
            pod = copy.deepcopy(body)
            meta = pod.setdefault("metadata", {})
            meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            pod["status"] = {"phase": "Pending", "conditions": []}
            self.pods[(ns, name)] = pod
            self._changed("ADDED", pod)
        threading.Thread(target=self._schedule, args=(ns, name), daemon=True).start()
        return 201, pod

    def _schedule(self, ns: str, name: str) -> None:
        pod = self.pods[(ns, name)]
        spec = pod["spec"]
        c = spec["containers"][0]
        memory = quantity(c.get("resources", {}).get("requests", {}).get("memory", "0"))
        if memory > FAKE_NODE_MEMORY or spec.get("nodeSelector"):
            why = (
                "1 Insufficient memory"
                if memory > FAKE_NODE_MEMORY
                else "1 node(s) didn't match Pod's node affinity/selector"
            )
            self._set(
                ns,
                name,
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": f"0/1 nodes are available: {why}.",
                    }
                ],
            )
            self.event(ns, name, "FailedScheduling", f"0/1 nodes are available: {why}.", "Warning")
            return
        scheduled = [{"type": "PodScheduled", "status": "True"}]
        self.event(ns, name, "Scheduled", f"Successfully assigned {ns}/{name} to fake-node")
        waiting = {"name": c["name"], "ready": False, "restartCount": 0, "image": c["image"]}
        try:
            self.docker.images.get(c["image"])
        except docker.errors.ImageNotFound:
            msg = f'failed to pull and unpack image "{c["image"]}": not found'
            self._set(
                ns,
                name,
                conditions=scheduled,
                containerStatuses=[{**waiting, "state": {"waiting": {"reason": "ErrImagePull", "message": msg}}}],
            )
            self.event(ns, name, "Failed", f"Failed to pull image {c['image']}: {msg}", "Warning")
            return
        try:
            container = self.docker.containers.create(**self._run_kwargs(ns, pod))
            container.start()
        except docker.errors.APIError as e:
            self._set(
                ns,
                name,
                conditions=scheduled,
                containerStatuses=[
                    {**waiting, "state": {"waiting": {"reason": "CreateContainerError", "message": str(e)[:200]}}}
                ],
            )
            return
        with self.lock:
            if (ns, name) not in self.pods:  # deleted meanwhile
                container.remove(force=True, v=True)
                return
            self.containers[(ns, name)] = container.id
        self._set(
            ns,
            name,
            phase="Running",
            startTime=now(),
            conditions=[*scheduled, {"type": "Ready", "status": "True"}],
            containerStatuses=[
                {
                    **waiting,
                    "ready": True,
                    "containerID": f"docker://{container.id}",
                    "state": {"running": {"startedAt": now()}},
                }
            ],
        )
        self.event(ns, name, "Started", "Started container sandbox")

    def _run_kwargs(self, ns: str, pod: dict[str, Any]) -> dict[str, Any]:
        spec, c = pod["spec"], pod["spec"]["containers"][0]
        sec = c.get("securityContext") or {}
        limits = c.get("resources", {}).get("limits", {})
        memory = quantity(limits.get("memory", "0"))
        tmpfs, volumes = {}, {}
        for mount in c.get("volumeMounts") or []:
            vol = next(v for v in spec.get("volumes", []) if v["name"] == mount["name"])
            empty = vol.get("emptyDir") or {}
            size = f",size={quantity(empty['sizeLimit'])}" if empty.get("sizeLimit") else ""
            tmpfs[mount["mountPath"]] = f"rw,exec,nosuid,nodev,mode=1777{size}"
        isolated = any(
            (p["spec"].get("podSelector", {}).get("matchLabels", {}).items() <= pod["metadata"]["labels"].items())
            and "Egress" in p["spec"].get("policyTypes", [])
            and not p["spec"].get("egress")
            for (pns, _), p in self.policies.items()
            if pns == ns
        )
        kwargs: dict[str, Any] = {
            "image": c["image"],
            "command": c.get("command"),
            "working_dir": c.get("workingDir"),
            "environment": {e["name"]: e.get("value", "") for e in c.get("env") or []},
            # owned by this process, as every session's container is: cleaners of other suites pass it over
            "labels": {
                **pod["metadata"].get("labels", {}),
                FAKE_LABEL: pod["metadata"]["name"],
                "sandshell.pid": str(os.getpid()),
                "sandshell.host": socket.gethostname(),
            },
            "stdin_open": bool(c.get("stdin")),
            "tty": bool(c.get("tty")),
            "detach": True,
            "hostname": spec.get("hostname") or pod["metadata"]["name"][:63],
            "cap_drop": sec.get("capabilities", {}).get("drop", []),
            "cap_add": sec.get("capabilities", {}).get("add", []),
            "security_opt": [] if sec.get("allowPrivilegeEscalation", True) else ["no-new-privileges"],
            "read_only": bool(sec.get("readOnlyRootFilesystem")),
            "tmpfs": tmpfs,
            "volumes": volumes,
            "init": False,
            "network_mode": "none" if isolated else "bridge",
        }
        if memory:
            kwargs["mem_limit"] = kwargs["memswap_limit"] = memory
        if cpu := limits.get("cpu"):
            kwargs["nano_cpus"] = (
                int(quantity(cpu.removesuffix("m")) * 1e6) if cpu.endswith("m") else int(float(cpu) * 1e9)
            )
        if sec.get("runAsUser") is not None:
            kwargs["user"] = f"{sec['runAsUser']}:{sec.get('runAsGroup', sec['runAsUser'])}"
        return kwargs

    def _kubelet(self) -> None:
        """Running pods' containers as Docker sees them: an ended container ends its pod."""
        while not self._stop.wait(0.1):
            for key, cid in list(self.containers.items()):
                try:
                    state = self.docker.api.inspect_container(cid)["State"]
                except docker.errors.NotFound:
                    continue
                if state.get("Running"):
                    continue
                code, oom = int(state.get("ExitCode") or 0), bool(state.get("OOMKilled"))
                reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
                pod = self.pods.get(key)
                if pod is None or pod["status"].get("phase") in ("Succeeded", "Failed"):
                    continue
                cs = pod["status"]["containerStatuses"][0]
                self._set(
                    *key,
                    phase="Succeeded" if code == 0 else "Failed",
                    containerStatuses=[
                        {**cs, "ready": False, "state": {"terminated": {"exitCode": code, "reason": reason}}}
                    ],
                )

    def _set(self, ns: str, name: str, **fields: Any) -> None:
        with self.lock:
            pod = self.pods.get((ns, name))
            if pod is not None:
                pod["status"].update(fields)
                self._changed("MODIFIED", pod)

    def _changed(self, kind: str, pod: dict[str, Any]) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, copy.deepcopy(pod)))
        self.lock.notify_all()

    def delete_pod(self, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            pod = self.pods.pop((ns, name), None)
            if pod is None:
                return 404, status(404, "NotFound", f'pods "{name}" not found')
            self._changed("DELETED", pod)
        self._remove_container((ns, name))
        return 200, pod

    def _remove_container(self, key: tuple[str, str]) -> None:
        cid = self.containers.pop(key, None)
        if cid is not None:
            with contextlib.suppress(docker.errors.APIError):
                self.docker.api.remove_container(cid, force=True, v=True)

    def event(self, ns: str, name: str, reason: str, message: str, kind: str = "Normal") -> None:
        with self.lock:
            self.events.append(
                {
                    "metadata": {"name": f"{name}.{len(self.events)}", "namespace": ns},
                    "involvedObject": {"kind": "Pod", "name": name, "namespace": ns},
                    "reason": reason,
                    "message": message,
                    "type": kind,
                    "lastTimestamp": now(),
                    "count": 1,
                }
            )


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def selected(obj: dict[str, Any], labels: str, fields: str) -> bool:
    have = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, labels.split(",")):
        key, eq, value = term.partition("=")
        if key not in have or (eq and have[key] != value):
            return False
    for term in filter(None, fields.split(",")):
        path, _, value = term.partition("=")
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if str(cur) != value:
            return False
    return True


RESOURCES = [
    {
        "name": "pods",
        "singularName": "pod",
        "namespaced": True,
        "kind": "Pod",
        "shortNames": ["po"],
        "verbs": ["create", "delete", "get", "list", "watch"],
    },
    {
        "name": "pods/attach",
        "singularName": "",
        "namespaced": True,
        "kind": "PodAttachOptions",
        "verbs": ["create", "get"],
    },
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {
        "name": "events",
        "singularName": "event",
        "namespaced": True,
        "kind": "Event",
        "shortNames": ["ev"],
        "verbs": ["list", "get"],
    },
]
NET_RESOURCES = [
    {
        "name": "networkpolicies",
        "singularName": "networkpolicy",
        "namespaced": True,
        "kind": "NetworkPolicy",
        "shortNames": ["netpol"],
        "verbs": ["create", "delete", "get", "list"],
    },
]
POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|events)(?:/([^/]+))?(?:/(attach|log))?$")
NET_PATH = re.compile(r"^/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def fake(self) -> FakeCluster:
        return self.server.fake  # type: ignore[no-any-return]

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        size = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(size) or b"{}") if size else {}

    def _route(self, verb: str) -> None:
        if time.monotonic() < self.fake.away_until:
            self.connection.shutdown(socket.SHUT_RDWR)  # as an API server that is down: nothing answers
            self.close_connection = True
            return
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        path = url.path.rstrip("/")
        if verb == "get" and path in ("/version", "/api", "/apis", "/api/v1", "/apis/networking.k8s.io/v1"):
            return self._send(200, discovery(path))
        if m := POD_PATH.match(path):
            ns, resource, name, sub = m.groups()
            res = f"{resource}/{sub}" if sub else resource
            if (verb if verb != "get" or name else "list", res) in self.fake.forbidden or (
                sub == "attach" and ("create", res) in self.fake.forbidden
            ):
                return self._send(
                    403,
                    status(
                        403,
                        "Forbidden",
                        f'{res} is forbidden: User "fake" cannot {verb} '
                        f'resource "{res}" in API group "" in the namespace "{ns}"',
                    ),
                )
            if sub == "attach":
                return self._attach(ns, name)
            if sub == "log":
                return self._log(ns, name, query)
            if resource == "events":
                with self.fake.lock:
                    items = [
                        e
                        for e in self.fake.events
                        if e["metadata"]["namespace"] == ns and selected(e, "", query.get("fieldSelector", ""))
                    ]
                return self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})
            return self._pods(verb, ns, name, query)
        if m := NET_PATH.match(path):
            return self._policies(verb, *m.groups())
        self._send(404, status(404, "NotFound", f"the server could not find the requested resource ({path})"))

    def do_GET(self) -> None:
        self._route("get")

    def do_POST(self) -> None:
        self._route("create")

    def do_DELETE(self) -> None:
        self._route("delete")

    def do_PATCH(self) -> None:
        self._send(405, status(405, "MethodNotAllowed", "the fake takes no patches"))

    def _pods(self, verb: str, ns: str, name: str | None, query: dict[str, str]) -> None:
        fake = self.fake
        if verb == "create":
            return self._send(*fake.create_pod(ns, self._body()))
        if verb == "delete" and name:
            return self._send(*fake.delete_pod(ns, name))
        if name:
            with fake.lock:
                pod = fake.pods.get((ns, name))
            if pod is None:
                return self._send(404, status(404, "NotFound", f'pods "{name}" not found'))
            return self._send(200, pod)
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        if query.get("watch") in ("true", "1"):
            return self._watch(
                ns, labels, fields, int(query.get("resourceVersion") or 0), float(query.get("timeoutSeconds") or 60)
            )
        with fake.lock:
            items = [p for (pns, _), p in fake.pods.items() if pns == ns and selected(p, labels, fields)]
            rv = str(fake.rv)
        self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})

    def _watch(self, ns: str, labels: str, fields: str, since: int, seconds: float) -> None:
        fake, end = self.fake, time.monotonic() + seconds
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with fake.lock:
            if since:
                pending = [(rv, k, p) for rv, k, p in fake.history if rv > since]
            else:  # no version: the current state as ADDED events, then changes
                pending = [(fake.rv, "ADDED", copy.deepcopy(p)) for (pns, _), p in fake.pods.items() if pns == ns]
            seen = fake.rv
        try:
            while True:
                for _, kind, pod in pending:
                    if pod["metadata"].get("namespace") == ns and selected(pod, labels, fields):
                        line = json.dumps({"type": kind, "object": pod}).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                with fake.lock:
                    left = end - time.monotonic()
                    if left <= 0 or fake._stop.is_set():
                        break
                    fake.lock.wait_for(lambda seen=seen: fake.rv > seen, timeout=min(left, 1.0))
                    pending = [(rv, k, p) for rv, k, p in fake.history if rv > seen]
                    seen = fake.rv
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        self.close_connection = True

    def _log(self, ns: str, name: str | None, query: dict[str, str]) -> None:
        cid = self.fake.containers.get((ns, name or ""))
        text = b""
        if cid is not None:
            with contextlib.suppress(docker.errors.APIError):
                text = self.fake.docker.api.logs(cid, tail=int(query.get("tailLines") or 100))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def _policies(self, verb: str, ns: str, name: str | None) -> None:
        fake = self.fake
        if ("create" if verb == "create" else verb, "networkpolicies") in fake.forbidden:
            return self._send(
                403,
                status(403, "Forbidden", f'networkpolicies.networking.k8s.io is forbidden: User "fake" cannot {verb}'),
            )
        with fake.lock:
            if verb == "create":
                body = self._body()
                key = (ns, body["metadata"]["name"])
                if key in fake.policies:
                    return self._send(409, status(409, "AlreadyExists", "exists"))
                body["metadata"]["namespace"] = ns
                fake.policies[key] = body
                return self._send(201, body)
            if verb == "delete" and name:
                got = fake.policies.pop((ns, name), None)
                return self._send(200, got) if got else self._send(404, status(404, "NotFound", "not found"))
            items = [p for (pns, _), p in fake.policies.items() if pns == ns]
        self._send(
            200, {"kind": "NetworkPolicyList", "apiVersion": "networking.k8s.io/v1", "metadata": {}, "items": items}
        )

    # -- pods/attach as a WebSocket -----------------------------------------------------------
    def _attach(self, ns: str, name: str | None) -> None:
        fake = self.fake
        cid = fake.containers.get((ns, name or ""))
        if cid is None or self.headers.get("Upgrade", "").lower() != "websocket":
            code = 404 if cid is None else 400
            return self._send(
                code, status(code, "NotFound" if cid is None else "BadRequest", f"cannot attach to {name}")
            )
        offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        chosen = next((p for p in fake.protocols if p in offered), "")
        if not chosen:
            return self._send(400, status(400, "BadRequest", "no supported subprotocol"))
        key = self.headers["Sec-WebSocket-Key"].encode()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        raw = fake.docker.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        engine = raw._sock
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", chosen)
        self.end_headers()
        self.wfile.flush()
        client = self.connection
        with fake.lock:
            fake.attaches.append(client)
            fake.chosen.append(chosen)
        send_lock = threading.Lock()

        def send(opcode: int, payload: bytes) -> None:
            n = len(payload)
            head = bytes([0x80 | opcode]) + (
                bytes([n])
                if n < 126
                else bytes([126]) + struct.pack(">H", n)
                if n < 65536
                else bytes([127]) + struct.pack(">Q", n)
            )
            with send_lock:
                client.sendall(head + payload)

        def engine_to_client() -> None:
            buf = b""
            try:
                while chunk := engine.recv(1 << 16):
                    buf += chunk
                    while len(buf) >= 8 and len(buf) >= 8 + (size := int.from_bytes(buf[4:8], "big")):
                        send(0x2, bytes([buf[0]]) + buf[8 : 8 + size])  # Docker's stream 1/2: channel 1/2
                        buf = buf[8 + size :]
                code = fake.docker.api.inspect_container(cid)["State"].get("ExitCode", 0)
                said = (
                    {"metadata": {}, "status": "Success"}
                    if code == 0
                    else {
                        "metadata": {},
                        "status": "Failure",
                        "message": f"command terminated with non-zero exit code {code}",
                        "reason": "NonZeroExitCode",
                    }
                )
                send(0x2, b"\x03" + json.dumps(said).encode())
                send(0x8, struct.pack(">H", 1000))
            except (OSError, docker.errors.APIError):
                pass
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=engine_to_client, daemon=True).start()
        try:
            self._client_to_engine(client, engine, chosen, send)
        finally:
            with fake.lock:
                if client in fake.attaches:
                    fake.attaches.remove(client)
            with contextlib.suppress(OSError):
                engine.shutdown(socket.SHUT_RDWR)
            raw.close()
            self.close_connection = True

    def _client_to_engine(self, client: socket.socket, engine: socket.socket, protocol: str, send: Any) -> None:
        rfile = self.rfile
        while True:
            head = rfile.read(2)
            if len(head) < 2:
                return
            opcode, size = head[0] & 0x0F, head[1] & 0x7F
            if size == 126:
                size = struct.unpack(">H", rfile.read(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", rfile.read(8))[0]
            if not head[1] & 0x80:
                raise OSError("a client's frame must be masked")
            mask = rfile.read(4)
            data = rfile.read(size)
            n = len(data)
            payload = (int.from_bytes(data, "little") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "little")).to_bytes(
                n, "little"
            )
            if opcode == 0x8:
                with contextlib.suppress(OSError):
                    send(0x8, payload[:2])
                return
            if opcode == 0x9:
                self.fake.pings += 1
                send(0xA, payload)
                continue
            if opcode != 0x2 or not payload:
                continue
            channel = payload[0]
            if channel == 0:
                self.fake.stdin_messages.append(len(payload))
                engine.sendall(payload[1:])
            elif channel == 255 and protocol.startswith("v5") and payload[1:2] == b"\x00":
                self.fake.half_closed += 1  # stdinOnce is false: the container's stdin stays open, as a kubelet does


def discovery(path: str) -> dict[str, Any]:
    if path == "/version":
        return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-sandshell-fake", "platform": "linux/amd64"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": "networking.k8s.io",
                    "versions": [{"groupVersion": "networking.k8s.io/v1", "version": "v1"}],
                    "preferredVersion": {"groupVersion": "networking.k8s.io/v1", "version": "v1"},
                }
            ],
        }
    if path == "/api/v1":
        return {"kind": "APIResourceList", "groupVersion": "v1", "resources": RESOURCES}
    return {"kind": "APIResourceList", "groupVersion": "networking.k8s.io/v1", "resources": NET_RESOURCES}
