"""A harness's code as data: what the archive keeps, proposers return and the sandbox runs.

It sits below the harness program, the seams and the sandbox so that each of them can name it
without importing the others.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from whale_dspy.errors import HarnessError


@dataclass(frozen=True)
class HarnessSource:
    """A harness's code plus where it came from (the archive keeps all of this)."""

    name: str
    code: str
    parent: str | None = None
    hypothesis: str = ""
    vouched_digest: str | None = field(default=None, compare=False, repr=False)
    """The digest of the code someone vouched for; see `trusted`. Set only through `vouched()`."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:12]

    @property
    def trusted(self) -> bool:
        """Whether this exact code was vouched for and so may run in this process."""
        return self.vouched_digest == self.digest

    def vouched(self) -> HarnessSource:
        """The named opt-in to run this code in process: for shipped code and code you wrote yourself,
        never for what a proposer wrote (that runs in the sandbox)."""
        return replace(self, vouched_digest=self.digest)

    def unvouched(self) -> HarnessSource:
        """The same code with no vouch: what the harness search does to every proposed candidate."""
        return replace(self, vouched_digest=None)

    @classmethod
    def from_path(cls, path: str | Path) -> HarnessSource:
        path = Path(path)
        try:
            return cls(name=path.stem, code=path.read_text())
        except OSError as error:
            raise HarnessError(f"cannot read harness file {path}: {error}") from error
