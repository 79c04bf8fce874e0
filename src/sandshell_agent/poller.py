"""The agent loop's epoll: `selectors.EpollSelector`'s interface as the agent uses it, compiled with the
agent (the standard one is Python, ~30 µs of a `true`'s round trip in its select and lookups).

`get_map()` is a plain dict by descriptor number; keys are `selectors.SelectorKey`s."""

from __future__ import annotations

import math
import select
from selectors import EVENT_READ, EVENT_WRITE, SelectorKey
from typing import Any, Protocol


class HasFileno(Protocol):
    def fileno(self) -> int: ...


FileObj = int | HasFileno


def _fd(fileobj: FileObj) -> int:
    fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
    if fd < 0:
        raise ValueError(f"invalid file descriptor: {fd}")
    return fd


def _mask(events: int) -> int:
    if not events or events & ~(EVENT_READ | EVENT_WRITE):
        raise ValueError(f"invalid events: {events!r}")
    return (select.EPOLLIN if events & EVENT_READ else 0) | (select.EPOLLOUT if events & EVENT_WRITE else 0)


class Poller:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._keys: dict[int, SelectorKey] = {}

    def get_map(self) -> dict[int, SelectorKey]:
        return self._keys

    def register(self, fileobj: FileObj, events: int, data: Any = None) -> SelectorKey:
        fd = _fd(fileobj)
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} (FD {fd}) is already registered")
        self._epoll.register(fd, _mask(events))
        key = SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def _lookup(self, fileobj: FileObj) -> int:
        """Its descriptor; for an object closed since it was registered, the one it was registered with."""
        try:
            return _fd(fileobj)
        except ValueError:
            for key in self._keys.values():
                if key.fileobj is fileobj:
                    return key.fd
            raise

    def unregister(self, fileobj: FileObj) -> SelectorKey:
        key = self._keys.pop(self._lookup(fileobj))  # KeyError if it is not registered, as selectors says
        try:
            self._epoll.unregister(key.fd)
        except OSError:  # closed already (epoll forgot it then)
            pass
        return key

    def modify(self, fileobj: FileObj, events: int, data: Any = None) -> SelectorKey:
        fd = self._lookup(fileobj)
        key = self._keys[fd]
        if events != key.events:
            self._epoll.modify(fd, _mask(events))
        if events != key.events or data != key.data:
            key = SelectorKey(key.fileobj, fd, events, data)
            self._keys[fd] = key
        return key

    def select(self, timeout: float | None = None) -> list[tuple[SelectorKey, int]]:
        """The keys ready within `timeout` seconds (None: no end), with what each is ready for. As in
        selectors, a timeout is rounded up to the millisecond (epoll's unit: no busy loop below it),
        and an error or hang-up on a descriptor reports it ready for what it was registered for."""
        wait = -1.0 if timeout is None else math.ceil(max(timeout, 0.0) * 1e3) * 1e-3
        ready = []
        for fd, event in self._epoll.poll(wait, max(len(self._keys), 1)):
            key = self._keys.get(fd)
            if key is None:
                continue
            events = (EVENT_WRITE if event & ~select.EPOLLIN else 0) | (EVENT_READ if event & ~select.EPOLLOUT else 0)
            ready.append((key, key.events & events))
        return ready

    def close(self) -> None:
        self._epoll.close()
        self._keys.clear()
