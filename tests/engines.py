"""A second Docker engine for tests: `dockerd` on 127.0.0.1 with mutual TLS, its own everything.

It stands for an engine on another machine: reached over TCP with certificates, sharing no
image with ours. It must not disturb the machine's engine: its own config file (the system
daemon.json sets a data-root and storage driver that would clash), data-root, exec-root,
pidfile, containerd namespaces and cgroup parent; no iptables or forwarding changes; the vfs
storage driver. And its own network namespace: started with `--bridge=none`, dockerd deletes
any interface called docker0 it can see (moby's removeDefaultBridgeInterface), which in the
host's namespace is the machine engine's bridge, and every networked container then fails to
start. So it listens on 127.0.0.1 inside its namespace, and a small forwarder in the test
process carries each TCP connection (TLS end to end) from a host port into it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker

from sandshell import config
from sandshell.sandbox import engine as sandshell_engine
from tests.net import free_port


@dataclass
class Engine:
    url: str
    certs: Path  # ca.pem, cert.pem, key.pem for the client
    log: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(folder: Path) -> Path:
    """A CA, a server certificate for IP 127.0.0.1 and a client certificate (clientAuth)."""
    folder.mkdir(parents=True)
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (folder / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sandshell test CA",
             "-keyout", "ca-key.pem", "-out", "ca.pem", cwd=folder)  # fmt: skip
    for who in ("server", "client"):
        key = "key.pem" if who == "client" else "server-key.pem"
        cert = "cert.pem" if who == "client" else "server-cert.pem"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", key, "-out", f"{who}.csr",
                 cwd=folder)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                 "-days", "2", "-extfile", f"{who}.ext", "-out", cert, cwd=folder)  # fmt: skip
    return folder


@contextmanager
def tls_engine(base: Path) -> Iterator[Engine]:
    """Start the engine, yield how to reach it, stop it and remove all it made."""
    certs = make_certs(base / "certs")
    root = base / "engine"
    root.mkdir()
    (root / "daemon.json").write_text(json.dumps({}))
    port = free_port()
    log = base / "dockerd.log"
    ns = f"sandshell-test-{os.getpid()}"
    cmd = ["dockerd", "--config-file", str(root / "daemon.json"), "--data-root", str(root / "data"),
           "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"),
           "-H", f"tcp://127.0.0.1:{port}", "--tlsverify", "--tlscacert", str(certs / "ca.pem"),
           "--tlscert", str(certs / "server-cert.pem"), "--tlskey", str(certs / "server-key.pem"),
           "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
           "--storage-driver=vfs", "--containerd-namespace", ns, "--containerd-plugins-namespace", f"{ns}-plugins",
           "--cgroup-parent", ns]  # fmt: skip
    # lo comes up first: a new network namespace has it down
    wrapped = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "dockerd", *cmd]
    with open(log, "wb") as out:
        proc = subprocess.Popen(wrapped, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    forwarder = Forwarder(f"/proc/{proc.pid}/ns/net", port)
    engine = Engine(f"tcp://127.0.0.1:{forwarder.port}", certs, log)
    try:
        _wait(engine, proc)
        yield engine
    finally:
        forwarder.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


class Forwarder:
    """Accepts on a free port of the host's 127.0.0.1 and joins each connection to `port` on 127.0.0.1
    inside the network namespace at `netns` (the thread that connects enters it; the socket keeps it)."""

    def __init__(self, netns: str, port: int) -> None:
        deadline = time.monotonic() + 10
        while os.stat(netns).st_ino == os.stat("/proc/self/ns/net").st_ino:  # unshare has not run yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{netns} never left the host's network namespace")
            time.sleep(0.01)
        self.netns_fd = os.open(netns, os.O_RDONLY)
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(conn,), daemon=True).start()

    def _join(self, conn: socket.socket) -> None:
        if _setns(self.netns_fd, CLONE_NEWNET) != 0:  # this thread only
            conn.close()
            return
        try:
            inner = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            conn.close()
            return
        inner.settimeout(None)
        pair = {conn: inner, inner: conn}
        try:
            while pair:
                for s in select.select(list(pair), [], [])[0]:
                    data = s.recv(1 << 16)
                    if not data:
                        with contextlib.suppress(OSError):
                            pair[s].shutdown(socket.SHUT_WR)
                        del pair[s]
                    else:
                        pair[s].sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            inner.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        os.close(self.netns_fd)


CLONE_NEWNET = 0x40000000


def _setns(fd: int, kind: int) -> int:
    return int(ctypes.CDLL(None, use_errno=True).setns(fd, kind))


def client(engine: Engine) -> docker.DockerClient:
    settings = config.load(env_file=None, environ={"SANDSHELL_HOME": "/nonexistent"})
    return sandshell_engine.client(settings.replace(docker_host=engine.url, docker_tls=str(engine.certs)))


def _wait(engine: Engine, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the test dockerd exited ({proc.returncode}): {engine.log.read_text()[-2000:]}")
        try:
            client(engine).ping()
            return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError(f"the test dockerd did not answer in 60 s: {engine.log.read_text()[-2000:]}")


def main_engine_still_works(c: docker.DockerClient, image: str) -> str:
    """Start a container with a network on the machine's engine; returns its address (empty: none)."""
    container = c.containers.run(image, ["sleep", "30"], detach=True, labels={"sandshell.session": "engine-check"})
    try:
        container.reload()
        return str(container.attrs["NetworkSettings"]["IPAddress"])
    finally:
        container.remove(force=True)
