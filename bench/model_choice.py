"""Which embedded model, with or without constrained decoding, gives real signal on CPU?

For each embedded model and each domain's seed harness, evaluates the test
split with DSPy's ChatAdapter ("chat") and with JSONAdapter, which the server
turns into schema-constrained decoding ("json"), in one run on one server per
model. Prints parse rate, mean@k with its CI, completion tokens per rollout and
rollouts per second as a Markdown table.

    python bench/model_choice.py --models smollm2-135m qwen2.5-coder-0.5b --limit 10 --k 2

`--tiny` serves each name in --models with the shipped fake vLLM instead
(whale_dspy.testing.fake_vllm: real HTTP and json_schema requests, one fixed
JSON answer, no model) and fills the same table in seconds (CI runs it). Its
parse rates and scores are the fake's, so they say nothing about a model.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from whale_dspy.offline import local_only

local_only()  # before dspy is imported

import dspy  # noqa: E402

from domains import domain_entry, get_domain  # noqa: E402
from harness_programs import seed_harness  # noqa: E402
from whale_dspy.evaluation import EvalRequest, evaluate  # noqa: E402
from whale_dspy.harness import HarnessProgram  # noqa: E402
from whale_dspy.testing import fake_vllm  # noqa: E402

FORMATS = {"chat": dspy.ChatAdapter, "json": dspy.JSONAdapter}


def measure(model: str, domains: list[str], args: argparse.Namespace, out: Path) -> list[str]:
    rows = []
    with fake_vllm.embedded_or_fake(model, out / model, fake=args.tiny) as server:
        lm = server.lm(max_tokens=args.max_tokens, temperature=1.0)  # sampled, as every run samples
        for name in domains:
            domain = get_domain(name)
            source = seed_harness(domain_entry(name).seed_harness)
            program = HarnessProgram(source, domain.signature, domain.tools, lm=lm)
            tasks = domain.load("test", args.limit, 0)
            for fmt, adapter in FORMATS.items():
                with dspy.context(adapter=adapter()):
                    report, _ = evaluate(
                        program,
                        EvalRequest(
                            tasks,
                            metric=domain.metric,
                            k=args.k,
                            namespace=f"choice-{fmt}",
                            trace_path=out / model / f"{name}-{fmt}.jsonl",
                        ),
                        threads=args.threads,
                    )
                row = (
                    f"| {model} | {name} | {fmt} | {report.parse_rate:.0%} | {report.mean_at_k:.3f} "
                    f"[{report.ci_low:.2f}, {report.ci_high:.2f}] | "
                    f"{report.completion_tokens / max(report.rollouts, 1):.0f} | "
                    f"{report.rollouts_per_second:.2f} |"
                )
                print(row, flush=True)
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-coder-0.5b"])
    parser.add_argument("--domains", nargs="+", default=["math", "search", "chess"])
    parser.add_argument("--limit", type=int, default=10, help="test tasks per domain")
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=None, help="traces and logs (default: a new temp folder)")
    parser.add_argument("--tiny", action="store_true", help="each model on the shipped fake vLLM (CI)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="whale-model-choice-"))
    served = " on the shipped fake vLLM (--tiny)" if args.tiny else ""
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} limit={args.limit} k={args.k}{served} traces in {out}")
    print("| model | domain | output | parsed | mean@k [95% CI] | tokens/rollout | rollouts/s |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models:
        with contextlib.suppress(KeyboardInterrupt):
            measure(model, args.domains, args, out)
    print(f"# load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
