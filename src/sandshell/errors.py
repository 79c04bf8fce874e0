"""Errors a user can cause or meet: each carries one sentence that says what is wrong and what to do."""


class SandshellError(Exception):
    """Base: `str(err)` is the one sentence shown to the user."""


class SettingsError(SandshellError):
    """A setting in the environment or `.env` is wrong."""


class DockerUnavailable(SandshellError):
    """No Docker engine answers."""


class ClusterUnavailable(DockerUnavailable):
    """The Kubernetes API server does not answer, or refuses what a session needs."""


class ImageError(SandshellError):
    """The sandbox image could not be found or built."""


class SandboxError(SandshellError):
    """The sandbox could not be started or talked to."""


class SandboxDied(SandboxError):
    """The container or its agent died; the next command starts a fresh one."""


class ProtocolError(SandboxError):
    """The agent answered with an error frame or something unreadable."""

    def __init__(self, message: str, code: str = "protocol") -> None:
        super().__init__(message)
        self.code = code


class ModelError(SandshellError):
    """The model could not be loaded or did not answer."""


class ContextOverflow(ModelError):
    """The model server refused the prompt as larger than its context window."""

    def __init__(self, message: str, prompt_tokens: int = 0, n_ctx: int = 0) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
