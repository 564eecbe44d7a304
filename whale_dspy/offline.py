"""Every model and data file is local: no hub lookup and no cost-map fetch over the network.

DSPy refreshes its model metadata over the network on an LM's first use (a 5 s timeout and a
warning on an offline machine); its bundled snapshot describes a served model as well, so every LM
our backends make turns that fetch off (`no_metadata_fetch`), in a user's process too. The
project's own entry points (the CLI, the bench scripts, the tests) go further and keep Hugging Face
off the network (`local_only`); a library must not decide that for a user, whose trainer may still
download a hub model. A user's own setting of any of these wins.
"""

from __future__ import annotations

import os

NO_METADATA_FETCH = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
LOCAL_ONLY = {**NO_METADATA_FETCH, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def no_metadata_fetch() -> None:
    """DSPy reads its bundled model metadata instead of fetching it (what the user set stays)."""
    _default(NO_METADATA_FETCH)


def local_only() -> None:
    """Default the environment to local files only (what the user set stays)."""
    _default(LOCAL_ONLY)


def _default(settings: dict[str, str]) -> None:
    for name, value in settings.items():
        os.environ.setdefault(name, value)
