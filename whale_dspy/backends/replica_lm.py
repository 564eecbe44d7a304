"""A dspy.LM whose every call goes to one replica of a set, chosen per call, and fails over.

Imported only when a replica set hands out an LM (it needs dspy at import time). The request is
DSPy's own; only its `api_base` is chosen per call (DSPy's cache ignores it, so any replica's
answer serves a cached one). Callbacks see one call however many replicas it tried, so a replica
that died under it is not the harness's failure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from whale_dspy.dspy_lm_seam import RoutedLM

if TYPE_CHECKING:
    from whale_dspy.backends.replica_router import Router


class ReplicaLM(RoutedLM):
    """`dspy.LM` for `adapter` (None: the base) on whichever replica the router picks per call."""

    def __init__(self, model: str, *, router: Router, adapter: str | None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.router = router
        self.adapter = adapter

    def route(self, send: Callable[[str], Any]) -> Any:
        return self.router.call(self.adapter, send)

    async def aroute(self, send: Callable[[str], Awaitable[Any]]) -> Any:
        return await self.router.acall(self.adapter, send)
