"""A `whale run` on the shipped doubles whose libraries log as a real run's do (test_cli_output.py).

`python noisy_run.py [-v] run --domain scripted --run-dir DIR` goes through `whale`'s own entry
point, which parses the flags and sets up the log; the `run` command it dispatches to is whale_helpers'
scripted run (scripted phases on a FakeBackend). Its libraries are made to speak where a real run's
do: each adapter swap also POSTs through httpx (to a MockTransport, where VLLMServer POSTs to vLLM),
the run first builds a BM25 index of a small corpus (as a squad run's first search does), and the
curve plot writes matplotlib's font-manager line when the caller gives a fresh MPLCONFIGDIR.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx
import whale_helpers

from whale_cli import main as whale
from whale_cli import run as run_command
from whale_dspy.records import AdapterRef
from whale_dspy.testing.fake_backend import FakeBackend
from whale_dspy.testing.scripted_lm import ScriptedLM


class HttpBackend(FakeBackend):
    """A FakeBackend whose adapter loads go over HTTP, as VLLMServer's do (to a transport, no server)."""

    def __init__(self, lm: ScriptedLM):
        super().__init__(lm)
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text="Success"))
        self.client = httpx.Client(base_url="http://127.0.0.1:8000", transport=transport)

    def load_adapter(self, ref: AdapterRef) -> None:
        self.client.post("/v1/load_lora_adapter", json={"lora_name": ref.name, "lora_path": ref.path})
        super().load_adapter(ref)


def build_search_index(folder: Path) -> None:
    """A passage index built through the squad domain's own code (bm25s), in the run's cache."""
    from domains.bm25_index import get_index

    corpus = folder / "corpus.jsonl"
    rows = [{"title": f"T{i}", "text": f"passage {i} about the number four"} for i in range(8)]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    get_index(corpus).search("four")


def scripted(args: argparse.Namespace) -> int:
    args.run_dir.mkdir(parents=True, exist_ok=True)
    build_search_index(args.run_dir)
    whale_helpers.scripted_run(args.run_dir)
    return 0


if __name__ == "__main__":
    whale_helpers.backend = lambda: HttpBackend(ScriptedLM({"": {"answer": "4"}}))
    run_command.run = scripted  # `register` reads it when the parser is built: `run` dispatches here
    sys.exit(whale.main(sys.argv[1:]))
