"""Every model and data file is local: no hub lookup and no cost-map fetch over the network.

DSPy refreshes its model metadata over the network on an LM's first use (a 5 s timeout and a
warning on an offline machine); its bundled snapshot describes a served model as well. Set where
the CLI starts and wherever one of our backends makes an LM, so the short form, the explicit form
and the bench scripts all run quiet offline. A user's own setting of any of these wins.
"""

from __future__ import annotations

import os

LOCAL_ONLY = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def local_only() -> None:
    """Default the environment to local files only (what the user set stays)."""
    for name, value in LOCAL_ONLY.items():
        os.environ.setdefault(name, value)
