"""One set of weights served at a time: requests hold the weights they need, a swap waits for them.

Merged serving (merged_server.py) folds an adapter into the served weights, so
the base and each adapter can no longer be told apart by a request's model
name. Each LM is bound to its weights instead, and every call goes through the
gate: it runs at once when the server already serves its weights, and otherwise
waits until the calls in flight finish, then swaps. Calls on the served weights
keep going while any are in flight (fewest swaps), so a swap waits for the end
of a stream of calls such as one evaluation, not for ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Weights = str | None
"""An adapter's name, or None for the base weights."""

_UNKNOWN = object()
"""What the server serves after a failed swap (maybe half the new weights): any call swaps again."""


class WeightsGate:
    """Counts the calls in flight on the served weights and swaps (`swap(weights)`) between them."""

    def __init__(self, swap: Callable[[Weights], None], current: Weights = None) -> None:
        self._swap = swap
        self._current: Weights | object = current
        self._active = 0
        self._changed = threading.Condition()
        self.swaps = 0
        self.swap_seconds = 0.0

    @property
    def current(self) -> Weights | object:
        return self._current

    @contextmanager
    def serving(self, weights: Weights) -> Iterator[None]:
        """Hold `weights` served for the duration of one call."""
        self.acquire(weights)
        try:
            yield
        finally:
            self.release()

    def switch(self, weights: Weights) -> None:
        """Serve `weights` now (for instance just after loading them), with no call to make."""
        with self.serving(weights):
            pass

    def acquire(self, weights: Weights) -> None:
        with self._changed:
            while self._current != weights:
                if self._active == 0:
                    self._swap_to(weights)
                else:
                    self._changed.wait()
            self._active += 1

    def release(self) -> None:
        with self._changed:
            self._active -= 1
            self._changed.notify_all()

    def _swap_to(self, weights: Weights) -> None:
        started = time.perf_counter()
        try:
            self._swap(weights)
        except BaseException:
            self._current = _UNKNOWN
            raise
        self._current = weights
        self.swaps += 1
        self.swap_seconds += time.perf_counter() - started
        self._changed.notify_all()  # the other calls waiting for these weights may run too

    def __deepcopy__(self, memo: dict) -> WeightsGate:
        """Copies of an LM (dspy's `LM.copy`) share the server's one gate."""
        return self
