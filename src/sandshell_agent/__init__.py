"""The in-container agent: one persistent bash, driven over a framed socket protocol."""

import os as _os
import sys as _sys

PROTOCOL_VERSION = 2
AGENT_NAME = "sandshell-agent/2"
# The agent's folder (bashloop.so is there), taken here: this module is never compiled, and in a
# module compiled with mypyc `__file__` is not the module's own path.
AGENT_HOME = _os.path.dirname(_os.path.abspath(__file__))
# The command path compiled with mypyc when the image was built (`compiled/`, extension modules
# only), found before the sources unless the host asks for those (SANDSHELL_AGENT_CODE=source).
COMPILED_HOME = _os.path.join(AGENT_HOME, "compiled")
if _os.environ.get("SANDSHELL_AGENT_CODE", "compiled") != "source" and _os.path.isdir(COMPILED_HOME):
    __path__.insert(0, COMPILED_HOME)


def compiled(module: str) -> bool:
    """Whether `module` runs compiled (an extension module) or from its source."""
    spec = _sys.modules[module].__spec__
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")
