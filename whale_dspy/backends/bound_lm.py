"""A dspy.LM whose every call runs while its server serves the weights it is bound to.

Imported only when a merged-serving server hands out an LM (it needs dspy at import time).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from whale_dspy.backends.weights_gate import Weights, WeightsGate
from whale_dspy.dspy_lm_seam import HeldCallLM
from whale_dspy.errors import BackendError
from whale_dspy.rollouts import report_server_failure


class WeightsBoundLM(HeldCallLM):
    """`dspy.LM` plus a gate: every call, sync or async, holds `weights` served (see weights_gate)."""

    def __init__(self, model: str, *, gate: WeightsGate, weights: Weights, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.gate = gate
        self.weights = weights

    @contextmanager
    def hold(self) -> Iterator[None]:
        self._acquire()
        try:
            yield
        finally:
            self.gate.release()

    @asynccontextmanager
    async def ahold(self) -> AsyncIterator[None]:
        await self._acquire_async()
        try:
            yield
        finally:
            self.gate.release()

    async def _acquire_async(self) -> None:
        """Wait for the weights on a thread of its own (a waiter must not hold a thread of the
        loop's executor, which the holders' DSPy calls need); if the caller is cancelled meanwhile,
        the hold is released as soon as it is granted."""
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if granted.cancelled():
                if error is None:
                    self.gate.release()
            elif error is None:
                granted.set_result(None)
            else:
                granted.set_exception(error)

        def wait() -> None:
            try:
                self._acquire()
            except BaseException as error:
                loop.call_soon_threadsafe(settle, error)
                return
            try:
                loop.call_soon_threadsafe(settle, None)
            except RuntimeError:  # the loop closed while we waited: nobody will use the hold
                self.gate.release()

        # The thread runs in a copy of this context, so a failed swap reaches the rollout's watch.
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(wait,), name="whale-weights-wait", daemon=True).start()
        try:
            await granted
        except asyncio.CancelledError:  # cancelled after the hold was granted: give it back
            if granted.done() and not granted.cancelled() and granted.exception() is None:
                self.gate.release()
            raise

    def _acquire(self) -> None:
        """Hold the weights; a failed swap is the server's failure, not the harness's (the rollout
        stops its evaluation even when the harness catches the error)."""
        try:
            self.gate.acquire(self.weights)
        except BackendError as error:
            report_server_failure(error)
            raise
