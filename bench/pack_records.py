"""Pack one comparison's run records into a record archive and print its sha256.

    python bench/pack_records.py runs/decisive-squad bench/records/decisive-squad.tar.gz

The archive holds the folder's files under names relative to it (sorted, no dates or owners, gzip
without a timestamp), so packing the same files again gives the same bytes and checksum: record the
checksum in bench/records/README.md. `whale report`, `whale paired` and bench/power.py read it as the
folder it was, e.g. bench/records/decisive-squad.tar.gz/whale-fixed/seed-1.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from whale_dspy.errors import ConfigError
from whale_dspy.record_archives import ARCHIVE_SUFFIX, pack


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", type=Path, metavar="SRC_FOLDER", help="the comparison's folder of records")
    parser.add_argument(
        "out", type=Path, metavar="OUT.tar.gz", help="the archive to write, outside SRC_FOLDER"
    )
    args = parser.parse_args(argv)
    if not args.out.name.endswith(ARCHIVE_SUFFIX):
        parser.error(f"OUT must end in {ARCHIVE_SUFFIX}: the readers know a record archive by it")
    try:
        digest = pack(args.src, args.out)
    except ConfigError as error:
        parser.error(str(error))
    print(f"{digest}  {args.out}")
    return digest


if __name__ == "__main__":
    main()
