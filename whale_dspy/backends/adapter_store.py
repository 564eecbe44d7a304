"""Adapters on storage every replica reads: one folder per versioned name, written once, atomically.

This is the layout vLLM's filesystem LoRA resolver reads (`VLLM_LORA_RESOLVER_CACHE_DIR/<name>/`):
a replica started with it loads a name on the first request for it, so a replica that restarts or
joins serves every published adapter without being told. A shared file system (NFS, a mounted
bucket) makes it reach other hosts; an object store fits the same way through vLLM's resolver
plug-in point (a resolver that downloads `<name>/` on first use), the publish step becoming an upload.
"""

from __future__ import annotations

import dataclasses
import filecmp
import logging
import os
import shutil
import tempfile
from pathlib import Path

from whale_dspy.errors import BackendError
from whale_dspy.records import AdapterRef

logger = logging.getLogger(__name__)


def _same_files(a: Path, b: Path) -> bool:
    """Whether two adapter folders hold the same files, byte for byte."""
    names = sorted(path.relative_to(a) for path in a.rglob("*") if path.is_file())
    if names != sorted(path.relative_to(b) for path in b.rglob("*") if path.is_file()):
        return False
    return all(filecmp.cmp(a / name, b / name, shallow=False) for name in names)


class AdapterStore:
    """A folder of published adapters; a name, once published, is never rewritten."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def publish(self, ref: AdapterRef) -> AdapterRef:
        """Copy the adapter to `root/<name>/` (a no-op when it lives there, or was published with the
        same files) and return it as stored.

        The copy is made beside its final place and renamed in, so a replica's resolver never
        reads a half-written adapter."""
        source = Path(ref.path).expanduser().resolve()
        target = self.root / ref.name
        if source == target:
            return ref
        if target.exists():
            if _same_files(source, target):  # published before: a resumed run serving it again
                return dataclasses.replace(ref, path=str(target))
            raise BackendError(f"adapter {ref.name!r} is already in {self.root}: names are never reused")
        if not (source / "adapter_config.json").is_file():
            raise BackendError(f"adapter {ref.name!r}: {source} is not a PEFT adapter directory")
        staging = Path(tempfile.mkdtemp(prefix=f".{ref.name}-", dir=self.root))
        try:
            shutil.copytree(source, staging, dirs_exist_ok=True)
            os.rename(staging, target)
        except OSError as error:
            shutil.rmtree(staging, ignore_errors=True)
            raise BackendError(f"publishing adapter {ref.name!r} to {self.root} failed: {error}") from error
        logger.info("published adapter %s to %s", ref.name, target)
        return dataclasses.replace(ref, path=str(target))
