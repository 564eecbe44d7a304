"""MkDocs hook: bench/'s results and their figures are pages of the site, read from where they live.

RESULTS.md (and HISTORY.md, and records/README.md) stay in bench/ beside the benchmarks that
write them; the site serves them at bench/ with the figures they link (relative to bench/), so
their links resolve under `mkdocs build --strict` without a copy in docs/.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

IMAGES = {".png", ".svg", ".jpg"}
"""Of figures/, only images: its report.md files are run records, not pages."""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = Path(config.config_file_path).parent
    bench = root / "bench"
    pages = sorted(bench.glob("*.md"))  # RESULTS.md and the HISTORY.md it links
    pages.append(bench / "records" / "README.md")  # the run record archives and their checksums
    images = sorted(path for path in (bench / "figures").rglob("*") if path.suffix in IMAGES)
    for source in [*pages, *images]:
        uri = source.relative_to(root).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files
