"""The sandbox: a hardened, labelled Docker container with the agent inside, and the API to use it.

Here: the engine (`engine`), the image (`image`), how a container is made (`container`), the
channel to the agent (`connection`, `protocol`) and the `Sandbox` API (`sandbox`). May import
`config`, `errors`, `resources` and `sandshell_agent`'s codec; never `model`, `session` or `tui`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandshell.sandbox.protocol import FileContent, ModelState, Output, Result
    from sandshell.sandbox.sandbox import Sandbox

__all__ = ["FileContent", "ModelState", "Output", "Result", "Sandbox"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the light protocol types does not pull in the Docker SDK.
    if name == "Sandbox":
        from sandshell.sandbox.sandbox import Sandbox

        return Sandbox
    if name in __all__:
        from sandshell.sandbox import protocol

        return getattr(protocol, name)
    raise AttributeError(name)
