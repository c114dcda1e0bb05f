"""The client tokens a launch has used up: EC2 answers a token it has seen with its first answer, so a launch
whose request launched nothing goes on under the next one (see :func:`providers.aws.fleet.client_token`)."""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["SpentTokens"]

_KEPT = 4096  # launches remembered; the oldest are forgotten beyond this


class SpentTokens:
    """How many client tokens each launch (by its idempotency token) has spent; thread-safe and bounded."""

    def __init__(self, kept: int = _KEPT) -> None:
        self._spent: OrderedDict[str, int] = OrderedDict()
        self._kept = kept
        self._lock = threading.Lock()

    def count(self, token: str) -> int:
        """Client tokens ``token`` has spent (the next one to use has this index)."""
        with self._lock:
            return self._spent.get(token, 0)

    def spend(self, token: str) -> None:
        """The current client token of ``token`` launched nothing: the next request uses a new one."""
        with self._lock:
            self._spent[token] = self._spent.pop(token, 0) + 1
            while len(self._spent) > self._kept:
                self._spent.popitem(last=False)

    def forget(self, token: str) -> None:
        """``token`` launched an instance: nothing to remember of it."""
        with self._lock:
            self._spent.pop(token, None)
