"""`sandshell serve`: everything the API needs, put together at start, and uvicorn to run it.

Start-up, in order: the token (printed once, when it is made), the task records (those that were
running when the server last stopped are marked interrupted), leftover containers reaped, the
model loaded (or, for the openai backend, its server waited for), then the workers.
"""

from __future__ import annotations

import threading
from typing import Any

from sandshell import config
from sandshell.config import Settings
from sandshell.inert import say
from sandshell.sandbox import engine
from sandshell.service import profiles
from sandshell.service.auth import load_token, token_file
from sandshell.service.chat import Conversations
from sandshell.service.feed import Feeds
from sandshell.service.models import Models
from sandshell.service.store import Store
from sandshell.service.tasks import TaskManager

REAP_EVERY = 15.0


class Service:
    """The server's parts: token, task store and manager, conversations, event feeds, the model."""

    def __init__(self, settings: Settings, log: Any = say) -> None:
        self.settings = settings
        self.token, made = load_token(settings)
        self.token_made = made
        self.store = Store(settings.path(settings.sessions_dir))
        self.feeds = Feeds()
        for name in engine.reap(engine.client()):
            log(f"removed leftover container {name}")
        self.models = Models(settings, say=log)
        self.manager = TaskManager(settings, self.store, self.models, self.feeds.notify)
        self.conversations = Conversations(settings, self.store, self.models, self.feeds.notify)
        self.streams = 0
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_idle, name="sandshell-reaper", daemon=True)

    def start(self) -> None:
        self.manager.start()
        self._reaper.start()

    def stop(self) -> None:
        self._stop.set()
        self.conversations.close_all()
        self.manager.stop()

    def _reap_idle(self) -> None:
        every = min(REAP_EVERY, max(0.5, self.settings.conversation_idle / 4))
        while not self._stop.wait(every):
            self.conversations.reap()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "backend": self.models.description, "profiles": list(profiles.offered(self.settings)),
                **self.manager.counts(),
                "conversations": self.conversations.count(), "generations": self.models.load()}  # fmt: skip


def serve(host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None) -> int:
    """Run the API until Ctrl-C or SIGTERM; running tasks are then stopped and marked interrupted."""
    import uvicorn

    from sandshell.service.api import create_app

    s = settings or config.load()
    service = Service(s)
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}"
    if service.token_made:
        say(f"made an API token, kept in {token_file(s)} (mode 0600); it is shown this once:")
        say(f"  {service.token}")
        say(f"web view: {url}/?token={service.token}")
    else:
        where = "SANDSHELL_API_TOKEN" if s.api_token else str(token_file(s))
        say(f"web view: {url}/?token=<the token in {where}>")
    say(f"API at {url}/v1 (docs at {url}/docs); {s.max_sessions} tasks at once; model: {service.models.description}")
    app = create_app(service)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    return 0
