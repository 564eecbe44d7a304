"""A dspy.LM whose every call goes to one replica of a set, chosen per call, and fails over.

Imported only when a replica set hands out an LM (it needs dspy at import time). The request is
DSPy's own; only its `api_base` is chosen per call (DSPy's cache ignores it, so any replica's
answer serves a cached one). Callbacks see one call however many replicas it tried, so a replica
that died under it is not the harness's failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dspy
from dspy.utils.callback import with_callbacks

if TYPE_CHECKING:
    from whale_dspy.backends.replicas import Router

_call = dspy.BaseLM.__call__.__wrapped__  # DSPy's call without its callbacks: one attempt
_acall = dspy.BaseLM.acall.__wrapped__


class ReplicaLM(dspy.LM):
    """`dspy.LM` for `adapter` (None: the base) on whichever replica the router picks per call.

    Only the public calls are wrapped: overriding `forward` would make DSPy treat this LM as a
    legacy custom engine.
    """

    def __init__(self, model: str, *, router: Router, adapter: str | None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.router = router
        self.adapter = adapter

    @with_callbacks
    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        def send(api_base: str) -> Any:
            return _call(self, prompt, messages=messages, **kwargs, api_base=api_base)

        return self.router.call(self.adapter, send)

    @with_callbacks
    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        return await self.router.acall(
            self.adapter,
            lambda api_base: _acall(self, prompt, messages=messages, **kwargs, api_base=api_base),
        )
