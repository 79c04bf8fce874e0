"""The service's parts, put together once at start: the token and the web view's sign-ins, the task
store and manager, the conversations, the event feeds, the count of open streams and the model;
every route of the API works on them."""

from __future__ import annotations

import threading
from typing import Any

from sandshell.config import Settings
from sandshell.safe_text import say
from sandshell.sandbox import engine
from sandshell.service import profiles
from sandshell.service.auth import SignIns, cookie_name, load_token, token_file
from sandshell.service.chat import Conversations
from sandshell.service.feed import Feeds
from sandshell.service.limits import Slots
from sandshell.service.models import Models
from sandshell.service.store import Store
from sandshell.service.taskqueue import TaskManager

REAP_EVERY = 15.0
MAX_STREAMS = 64  # event streams open at once


class Service:
    """The server's parts: token and sign-ins, task store and manager, conversations, event feeds, the
    model. `port`: where it listens (the sign-in cookie's name carries it)."""

    def __init__(self, settings: Settings, log: Any = say, port: int | None = None) -> None:
        self.settings = settings
        self.token, made = load_token(settings.service, settings.session)
        self.token_made = made
        self.cookie = cookie_name(settings.session, port)
        self.sign_ins = SignIns(token_file(settings.session).parent / "sign-ins", self.token)
        self.store = Store(settings.path(settings.session.sessions_dir))
        self.feeds = Feeds()
        for name in engine.reap(engine.client()):
            log(f"removed leftover container {name}")
        self.models = Models(settings.model, settings.service, say=log)
        self.manager = TaskManager(settings, self.store, self.models, self.feeds.notify)
        self.conversations = Conversations(settings, self.store, self.models, self.feeds.notify)
        self.streams = Slots(MAX_STREAMS)
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
        every = min(REAP_EVERY, max(0.5, self.settings.service.conversation_idle / 4))
        while not self._stop.wait(every):
            self.conversations.reap()

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "backend": self.models.description,
            "profiles": list(profiles.offered(self.settings.service)),
            **self.manager.counts(),
            "conversations": self.conversations.count(),
            "generations": self.models.load(),
        }
