"""A standard session's own bridge network: the outside reachable, other sessions not."""

from __future__ import annotations

import contextlib

import docker
import docker.errors

from sandshell.errors import SandboxError


def create(client: docker.DockerClient, name: str, labels: dict[str, str]) -> None:
    """On Docker's default bridge every container reaches every other one's ports, so two sessions could
    talk. A bridge of the session's own (inter-container traffic off as well) reaches the outside
    through the host's NAT, and other bridges not at all (the engine's isolation rules)."""
    with contextlib.suppress(docker.errors.NotFound):  # a leftover of this session's last container
        client.api.remove_network(name)
    try:
        client.api.create_network(
            name,
            driver="bridge",
            options={"com.docker.network.bridge.enable_icc": "false"},
            labels=labels,
            check_duplicate=True,
        )
    except docker.errors.APIError as e:
        why = str(e.explanation or e)
        if "address pool" in why or "overlap" in why:
            raise SandboxError(
                f"the Docker engine has no free address range for one more session's network ({why}); end "
                "some sessions, remove unused networks (`docker network prune`) or widen the engine's "
                "default-address-pools"
            ) from None
        raise


def remove(client: docker.DockerClient, name: str) -> None:
    with contextlib.suppress(docker.errors.APIError):  # gone already
        client.api.remove_network(name)
