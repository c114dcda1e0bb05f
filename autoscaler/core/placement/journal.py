"""An undo log for a plan in progress: a gang that cannot be placed whole is taken back, and so is a trial
move of a node's pods during scale-down."""

from __future__ import annotations

from collections.abc import Callable


class Journal:
    """Records how to undo each change while at least one mark is open."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._open = 0

    def mark(self) -> int:
        """Start recording; ``rollback(mark)`` undoes everything since, ``commit(mark)`` keeps it."""
        self._open += 1
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        """Undo every change since ``mark``, newest first, and close the mark."""
        while len(self._undo) > mark:
            self._undo.pop()()
        self._close(mark)

    def commit(self, mark: int) -> None:
        """Keep the changes since ``mark`` and close it (an enclosing mark can still undo them)."""
        self._close(mark)

    def _close(self, mark: int) -> None:
        self._open -= 1
        if self._open == 0:
            del self._undo[mark:]

    @property
    def open(self) -> bool:
        """Whether a trial is under way (a mark not yet committed or rolled back)."""
        return self._open > 0

    def log(self, undo: Callable[[], None]) -> None:
        """How to take back the change just made (kept only while a mark is open)."""
        if self._open:
            self._undo.append(undo)
