"""Harness decisions that carry over: acceptance rules judged by what their picks do on held-out tasks.

For each rule and seed, one harness search from h0 (MetaHarness, the same proposer); every decision
is then read on held-out tasks (the domain's val split, never searched), paired with the incumbent
it would replace, on the same rollout ids:
  - an adopted harness whose held-out gain's 95% bootstrap CI over tasks does not clear zero "did
    not carry over";
  - a refused decision whose leading candidate does clear zero there was a false refusal;
  - the winner's curse: adopted harnesses' mean held-out gain over their mean gain on the tasks
    that decided (the ratio; 1 means no curse);
  - rollouts and policy LM calls per decision, and wall time.
Rules: `argmax8` (WHALE's and Meta-Harness's: the best mean on the 8 tasks the proposer sees),
`argmax-large` (argmax on the whole selection slice), `paired` (the default: a race with the paired
lower bound). Goal: paired at most one failure in ten adoptions and a ratio of at least 0.5, as good
as argmax-large for fewer rollouts a decision.

    python bench/selection.py --domain squad:score=f1 --model qwen2.5-coder-0.5b --seeds 0 1 2 \
        --out runs/selection-squad                # real: the embedded server (or --server-url)
    python bench/selection.py --tiny --out DIR    # CI: scripted LM, synthetic harnesses, seconds
    python bench/selection.py --synthetic --races 2000 --out DIR   # the rules' error rate, power, cost
    python bench/selection.py --replay bench/records/selection-squad.tar.gz --out DIR   # recorded races

--synthetic (bench/race_synthetic.py) simulates races of the library's rules on per-task differences
at the measured spread; --replay (bench/race_replay.py) re-decides recorded races from their
per-task scores under every rule and judges them on the held-out reads the records hold. Neither
spends a rollout; both have a tiny size CI runs (--races 200, one record).

A rerun with the same --out resumes: archives continue, held-out reads are cached per harness code.
Records worth keeping are packed into bench/records with bench/pack_records.py (a kept one resumes
once unpacked into a folder: `mkdir -p runs/selection-squad && tar -xzf
bench/records/selection-squad.tar.gz -C runs/selection-squad`).
--tiny is a synthetic world on the shipped doubles: every candidate answers correctly on a fixed
pseudo-random share of tasks (its true rate); most proposals are as good as their parent and one
in four is 0.2 better, so luck on 8 tasks is the only thing argmax8 can mistake for a gain.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modes' own modules beside this script

from optimizers.engine import WhaleConfig
from optimizers.harness import MetaHarness, MetaHarnessConfig, sandboxed_evaluator
from whale_dspy.evaluation import EvalRequest, InProcessEvaluator
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.jsonl import atomic_write_json
from whale_dspy.records import ProposerUsage
from whale_dspy.stats import paired_gain

RULES: dict[str, Callable[..., MetaHarnessConfig]] = {
    "argmax8": lambda **f: MetaHarnessConfig.paper(**f),
    "argmax-large": lambda **f: MetaHarnessConfig(acceptance="argmax", **f),
    "paired": lambda **f: MetaHarnessConfig(**f),
}
HELD_OUT_NAMESPACE = "selection-bench-held-out"

SYNTHETIC = '''"""Synthetic harness: right on a fixed pseudo-random share RATE of tasks."""

import random

import dspy

RATE = {rate}
SALT = {salt}


class Synthetic(dspy.Module):
    def __init__(self, signature, tools):
        super().__init__()
        self.predict = dspy.Predict(signature)

    def forward(self, question):
        answer = self.predict(question=question).answer
        draw = random.Random(f"{{SALT}}:{{question}}").random()  # a string seed is hashed (sha512)
        return dspy.Prediction(answer=answer if draw < RATE else "wrong")


def build(signature, tools):
    return Synthetic(signature, tools)
'''


class SyntheticProposer:
    """Proposes children of the incumbent-to-be: as good as their parent, or (one in four) 0.2 better."""

    label = "synthetic"

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def usage(self) -> ProposerUsage:
        return ProposerUsage(0, 0)

    def propose(self, archive: Any, k: int) -> list[HarnessSource]:
        parent = archive.parents(1)[0]
        rate = float(archive.source(parent.name).code.split("RATE = ")[1].split("\n")[0])
        out = []
        for _ in range(k):
            better = self.rng.random() < 0.25
            child = min(0.95, rate + (0.2 if better else 0.0))
            code = SYNTHETIC.format(rate=round(child, 3), salt=self.rng.randrange(1, 10**6))
            out.append(HarnessSource("synthetic", code, parent=parent.name, hypothesis=f"rate {child:.2f}"))
        return out


class QA(dspy.Signature):
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def tiny_world(args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    from whale_dspy.testing.scripted_lm import ScriptedLM

    def tasks(prefix: str, n: int) -> list[dspy.Example]:
        return [
            dspy.Example(task_id=f"{prefix}{i}", question=f"{prefix} {i}?", answer="yes").with_inputs(
                "question"
            )
            for i in range(n)
        ]

    h0 = HarnessSource("h0", SYNTHETIC.format(rate=0.4, salt=1)).vouched()
    return {
        "student": HarnessProgram(h0, QA, lm=ScriptedLM({"": {"answer": "yes"}})),
        "metric": lambda example, pred, trace=None: float(pred.answer == example.answer),
        "search": tasks("s", args.tasks + args.selection),
        "held_out": tasks("h", args.held_out),
        "proposer": SyntheticProposer,
        "evaluator": lambda config: InProcessEvaluator(threads=args.threads, run_unvouched_in_process=True),
        "machine": "scripted LM (synthetic harnesses)",
    }


def real_world(args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    from domains import domain_entry, get_domain
    from harness_programs import seed_harness
    from optimizers.harness import ProposerOptions, proposer_from_spec
    from whale_cli.wiring import backend_for_model

    domain = get_domain(args.domain)
    backend = backend_for_model(args.model, args.out / "server", args.server_url)
    backend.start()
    stack.callback(backend.stop)
    lm = backend.lm(temperature=1.0, max_tokens=args.max_tokens)
    source = seed_harness(domain_entry(args.domain).seed_harness)
    return {
        "student": HarnessProgram(source, domain.signature, domain.tools, lm=lm),
        "metric": domain.metric,
        "search": domain.load("search", args.tasks + args.selection, 0),
        "held_out": domain.load("val", args.held_out, 0),
        "proposer": lambda seed: proposer_from_spec(args.proposer, ProposerOptions(seed=seed)),
        "evaluator": sandboxed_evaluator,
        "machine": f"{args.model} on {backend.served_model()}, {platform.processor() or platform.machine()}",
    }


def search(world: dict[str, Any], rule: str, seed: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One search under one rule; each decision with what it cost and the contenders it weighed."""
    config = RULES[rule](
        candidates=args.candidates, tasks=args.tasks, seed=seed, threads=args.threads,
        **({} if rule == "argmax8" else {"selection_tasks": args.selection}),
    )  # fmt: skip
    meta = MetaHarness(
        proposer=world["proposer"](seed),
        metric=world["metric"],
        archive_dir=args.out / rule / f"seed-{seed}" / "archive",
        config=config,
        evaluator=world["evaluator"](config),
    )
    decisions, incumbent = [], "c0000"
    for signal, _ in meta.iterations(world["student"], world["search"]):
        if signal.decision is not None:
            decisions.append(decision_row(signal, incumbent, meta))
        incumbent = signal.best_name
        if signal.iteration + 1 >= args.iterations:
            break
    return decisions


def decision_row(signal: Any, incumbent: str, meta: MetaHarness) -> dict[str, Any]:
    """The decision's contender (the adopted one, else the leader on the deciding tasks)."""
    decision = signal.decision
    rounds = decision["rounds"]
    means = rounds[-1]["means"] if rounds else {}
    leader = decision["adopted"] or max(
        (c for c in decision["candidates"] if c in means), key=lambda c: means[c], default=None
    )
    return {
        "iteration": signal.iteration,
        "incumbent": incumbent,
        "contender": leader,
        "adopted": decision["adopted"] is not None,
        "search_gain": (means[leader] - means[incumbent]) if leader and incumbent in means else None,
        "rollouts": signal.rollouts,
        "lm_calls": signal.lm_calls,
        "wall_s": signal.seconds,  # as recorded when the iteration ran: a resumed search replays it
        "archive": str(meta.archive_dir),
    }


def held_out(world: dict[str, Any], archive: Path, name: str, args: argparse.Namespace) -> dict[str, list]:
    """A harness's per-task scores on the held-out tasks, read once per code (every rule's search
    starts from h0, and one seeded proposer's first candidates are the same under every rule)."""
    from optimizers.harness import HarnessArchive

    source = HarnessArchive(archive).source(name) if name != "c0000" else world["student"].source
    cache = args.out / "held-out" / f"{source.digest[:16]}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    program = world["student"].with_source(source)
    evaluator = world["evaluator"](MetaHarnessConfig(threads=args.threads, timeout_s=args.read_timeout_s))
    report, _ = evaluator.evaluate(
        program,
        EvalRequest(
            world["held_out"], metric=world["metric"], lm=program.bound_lm, k=1, namespace=HELD_OUT_NAMESPACE
        ),
    )
    atomic_write_json(cache, report.per_task)
    return report.per_task


def judge(world: dict[str, Any], rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> None:
    for row in rows:
        if row["contender"] is None:
            row["held_out"] = None
            continue
        archive = Path(row["archive"])
        before = held_out(world, archive, row["incumbent"], args)
        after = held_out(world, archive, row["contender"], args)
        row["held_out"] = paired_gain(before, after).to_dict()


def summary(rule: str, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    adopted = [r for r in rows if r["adopted"]]
    failed = [r for r in adopted if not (r["held_out"] and r["held_out"]["low"] > 0)]
    refused = [r for r in rows if not r["adopted"] and r["held_out"]]
    false_refusals = [r for r in refused if r["held_out"]["low"] > 0]
    search_gain = sum(r["search_gain"] or 0.0 for r in adopted)
    held_gain = sum(r["held_out"]["gain"] for r in adopted if r["held_out"])
    return {
        "rule": rule,
        "decisions": len(rows),
        "adopted": len(adopted),
        "did_not_carry_over": len(failed),
        "false_refusals": len(false_refusals),
        "gain_ratio": held_gain / search_gain if search_gain > 0 else None,
        "rollouts_per_decision": sum(r["rollouts"] for r in rows) / max(1, len(rows)),
        "calls_per_decision": sum(r["lm_calls"] or 0 for r in rows) / max(1, len(rows)),
        "wall_s": sum(r["wall_s"] for r in rows),
    }


def table(summaries: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| rule | decisions | adopted | did not carry over | false refusals | held-out/search gain "
        "| rollouts/decision | LM calls/decision | wall s |",
        "|" + "---|" * 9,
    ]
    for s in summaries:
        ratio = "n/a" if s["gain_ratio"] is None else f"{s['gain_ratio']:.2f}"
        lines.append(
            f"| {s['rule']} | {s['decisions']} | {s['adopted']} | {s['did_not_carry_over']} "
            f"| {s['false_refusals']} | {ratio} | {s['rollouts_per_decision']:.0f} "
            f"| {s['calls_per_decision']:.0f} | {s['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="synthetic harnesses on the scripted LM (CI)")
    parser.add_argument("--domain", default="squad:score=f1")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--server-url", dest="server_url")
    parser.add_argument("--proposer", default=WhaleConfig.proposer)
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=4, help="iterations per search, h0's included")
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8, help="feedback tasks (argmax8 decides on them)")
    parser.add_argument("--selection", type=int, default=64, help="selection tasks")
    parser.add_argument("--held-out", dest="held_out", type=int, default=300)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, default=128)
    parser.add_argument("--read-timeout-s", dest="read_timeout_s", type=float, default=7200.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--synthetic", action="store_true", help="simulate the rules' races (no LM)")
    parser.add_argument("--races", type=int, default=2000, help="--synthetic: races a cell")
    parser.add_argument(
        "--cells", default="32:0,32:0.1,64:0,64:0.05,64:0.1,128:0,128:0.05,128:0.07,256:0,256:0.05",
        help="--synthetic: TASKS:GAIN,... (gain 0 measures false adoption)",
    )  # fmt: skip
    parser.add_argument("--replay", nargs="+", type=Path, help="record folders or archives to re-decide")
    parser.add_argument("--replay-rules", dest="replay_rules", nargs="+", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.synthetic:
        return synthetic(args, argv)
    if args.replay:
        return replayed(args, argv)
    with ExitStack() as stack:
        world = (tiny_world if args.tiny else real_world)(args, stack)
        summaries = []
        for rule in args.rules:
            rows = [row for seed in args.seeds for row in search(world, rule, seed, args)]
            judge(world, rows, args)
            atomic_write_json(args.out / rule / "decisions.json", rows)
            summaries.append(summary(rule, rows))
    text = table(summaries)
    record = {
        "argv": sys.argv[1:] if argv is None else argv,
        "machine": world["machine"],
        "node": platform.node(),
        "summaries": summaries,
    }
    atomic_write_json(args.out / "summary.json", record)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    return summaries


def synthetic(args: argparse.Namespace, argv: list[str] | None) -> list[dict[str, Any]]:
    import race_synthetic

    cells = [(int(t), float(g)) for t, g in (c.split(":") for c in args.cells.split(","))]
    rows = race_synthetic.run(cells, list(race_synthetic.RULES), args.races, args.seeds[0])
    return _write(args, argv, "synthetic", rows, race_synthetic.table(rows))


def replayed(args: argparse.Namespace, argv: list[str] | None) -> list[dict[str, Any]]:
    import race_replay

    from whale_dspy.record_archives import RecordArchives

    with RecordArchives() as archives:
        roots = [archives.local(path) for path in args.replay]
        results = list(race_replay.run(roots, args.replay_rules or list(race_replay.REPLAY_RULES)))
    summaries = [s for s, _ in results]
    for summary_, rows in results:
        atomic_write_json(
            args.out / "replay" / f"{summary_['rule'].replace(', ', '-').replace(' ', '-')}.json", rows
        )
    return _write(args, argv, "replay", summaries, race_replay.table(summaries))


def _write(args, argv, mode: str, rows: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    record = {"argv": sys.argv[1:] if argv is None else argv, "machine": platform.processor(), "rows": rows}
    atomic_write_json(args.out / f"{mode}.json", record)
    (args.out / f"{mode}.md").write_text(text + "\n")
    print(text)
    return rows


if __name__ == "__main__":
    main()
