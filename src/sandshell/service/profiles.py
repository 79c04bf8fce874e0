"""Which sandbox profiles API clients may ask for: SANDSHELL_API_PROFILES (default: `locked` only).

`standard` gives the model root and the network, so the HTTP API offers it only when the operator
lists it: anyone holding the token could otherwise reach the network from the server's machine.
A request that names no profile gets SANDSHELL_PROFILE when it is offered, else the first offered.
"""

from __future__ import annotations

from sandshell.config import SandboxSettings, ServiceSettings
from sandshell.errors import SandshellError

PROFILES = ("standard", "locked")


class Forbidden(SandshellError):
    """A request for a profile the server does not offer to API clients."""


def offered(service: ServiceSettings) -> tuple[str, ...]:
    """The profiles of SANDSHELL_API_PROFILES, in its order (the settings were checked at load)."""
    return tuple(dict.fromkeys(p.strip() for p in service.api_profiles.split(",") if p.strip()))


def choose(service: ServiceSettings, sandbox: SandboxSettings, asked: str | None) -> str:
    """The profile a task or conversation runs with; Forbidden (one sentence) when it is not offered."""
    allowed = offered(service)
    if asked is None:
        return sandbox.profile if sandbox.profile in allowed else allowed[0]
    if asked not in allowed:
        raise Forbidden(
            f"the profile {asked!r} is not offered to API clients: the server's SANDSHELL_API_PROFILES "
            f"(now {','.join(allowed)!r}) allows it when it lists {asked}"
        )
    return asked
