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
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=sandshell test CA",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        cwd=folder,
    )
    for who in ("server", "client"):
        key = "key.pem" if who == "client" else "server-key.pem"
        cert = "cert.pem" if who == "client" else "server-cert.pem"
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={who}",
            "-keyout",
            key,
            "-out",
            f"{who}.csr",
            cwd=folder,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            f"{who}.ext",
            "-out",
            cert,
            cwd=folder,
        )
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
    cmd = [
        "dockerd",
        "--config-file",
        str(root / "daemon.json"),
        "--data-root",
        str(root / "data"),
        "--exec-root",
        str(root / "exec"),
        "--pidfile",
        str(root / "docker.pid"),
        "-H",
        f"tcp://127.0.0.1:{port}",
        "--tlsverify",
        "--tlscacert",
        str(certs / "ca.pem"),
        "--tlscert",
        str(certs / "server-cert.pem"),
        "--tlskey",
        str(certs / "server-key.pem"),
        "--bridge=none",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--storage-driver=vfs",
        "--containerd-namespace",
        ns,
        "--containerd-plugins-namespace",
        f"{ns}-plugins",
        "--cgroup-parent",
        ns,
    ]
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
    return sandshell_engine.client(settings.sandbox.replace(docker_host=engine.url, docker_tls=str(engine.certs)))


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


@dataclass
class Sshd:
    """An sshd of the test's own on 127.0.0.1 in front of this machine's engine (`docker system dial-stdio`)."""

    url: str
    folder: Path
    port: int

    def shim(self, key: str = "client_key") -> Path:
        """A folder with an `ssh` that reads only our config (with `key`: client_key, or stranger_key,
        which the server does not know): put it first on PATH. ~/.ssh is never read nor written."""
        shim = self.folder / f"bin-{key}"
        shim.mkdir(exist_ok=True)
        (shim / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {self.folder}/config-{key} "$@"\n')
        (shim / "ssh").chmod(0o755)
        return shim


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextmanager
def ssh_engine(folder: Path) -> Iterator[Sshd]:
    """sshd on a free port as the current user, host key, authorized key and config all in `folder`;
    stopped after."""
    assert os.path.exists("/usr/sbin/sshd"), "sshd is missing: ./test.sh installs openssh-server"
    os.chmod(folder, 0o700)
    port = free_port()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    for key in ("host_key", "client_key", "stranger_key"):
        _keygen(folder / key)
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder}/host_key\n"
        f"AuthorizedKeysFile {folder}/authorized_keys\n"
        f"PidFile {folder}/sshd.pid\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"PermitRootLogin prohibit-password\nAllowUsers {user}\nStrictModes no\nSubsystem sftp none\n"
    )
    host_key = " ".join((folder / "host_key.pub").read_text().split()[:2])
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    for key in ("client_key", "stranger_key"):
        (folder / f"config-{key}").write_text(
            f"Host 127.0.0.1\n  IdentityFile {folder}/{key}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
            f"  UserKnownHostsFile {folder}/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
        )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation folder, as its service makes
    log = folder / "sshd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(folder / "sshd_config")], stderr=out)
    try:
        deadline = time.monotonic() + 20
        while "Server listening" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Sshd(f"ssh://{user}@127.0.0.1:{port}", folder, port)
    finally:
        proc.terminate()
        proc.wait(10)
