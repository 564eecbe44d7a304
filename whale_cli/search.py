"""`whale search`: a Meta-Harness search, then the best harness against h0 on held-out tests.

Everything that can be wrong with the arguments (domain, proposer, harness,
config) is checked before the server starts (an embedded one, or --server-url
reuses a running `whale serve`). The archive lands in
RUN_DIR/archive; RUN_DIR/search_report.json holds the search report and the
test scores of h0 and of the best harness, whose per-task reads are in RUN_DIR/test.

Candidate code runs contained: every evaluation (the search's and the held-out
test's) goes through a SandboxedEvaluator, one confined child process per
candidate, unless --no-sandbox asks for in-process evaluation (trusted code
only; faster).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from domains import DOMAIN_HELP
from optimizers.engine import DECISION_FIELDS, DEFAULT_PRESET, WhaleConfig, get_preset, proposer_lm
from whale_cli.arguments import (
    add_agent_arguments,
    add_decision_arguments,
    add_model_argument,
    add_thinking_argument,
    proposer_help,
)
from whale_cli.eval import add_harness_arguments, load_adapter_folder
from whale_cli.read_folder import TRACES_FILE, write_read
from whale_cli.report import decision_cell
from whale_cli.run_settings import agent_jail
from whale_cli.wiring import DATA_SEED
from whale_dspy.backends import RemoteServer
from whale_dspy.defaults import DEFAULT_EVAL_K
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalRequest, InProcessEvaluator
from whale_dspy.harness import HarnessProgram
from whale_dspy.jsonl import atomic_write_json
from whale_dspy.protocols import CandidateEvaluator, InferenceBackend
from whale_dspy.provenance import adapter_checksums, environment
from whale_dspy.reporting.tables import count_cell
from whale_dspy.stats import PairedGain, paired_gain

TEST_SPLIT = "test"
TEST_READS = "test"
"""RUN_DIR/test/h0 and RUN_DIR/test/best: the held-out reads, each a `whale eval`-style folder
(traces.jsonl, report.json) that `whale paired` pairs with other searches' and reads' (a search from
a weight checkpoint against one from the base weights, say)."""


SEARCH = get_preset(DEFAULT_PRESET).meta_harness_config()
"""The harness phase `whale run` runs on its default preset: `whale search`'s defaults are its sizes."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "search", help="search harness code with Meta-Harness (harness phase only)"
    )
    parser.add_argument("--domain", required=True, help=DOMAIN_HELP)
    parser.add_argument(
        "--proposer",
        default=WhaleConfig.proposer,
        help=proposer_help(),
    )
    add_agent_arguments(parser)
    add_decision_arguments(parser)
    add_model_argument(parser)
    add_harness_arguments(parser)
    add_thinking_argument(parser)
    parser.add_argument(
        "--adapter",
        default=None,
        help="LoRA adapter folder: search harnesses for these weights (a weight phase's checkpoint; "
        "default: base)",
    )
    parser.add_argument(
        "--iterations", type=int, default=SEARCH.max_iterations, help="at most N iterations after h0"
    )
    parser.add_argument("--min-iterations", dest="min_iterations", type=int, default=None)
    parser.add_argument(
        "--patience", type=int, default=SEARCH.patience, help="stop after N iterations without a gain"
    )
    parser.add_argument(
        "--candidates", type=int, default=SEARCH.candidates, help="candidates per iteration (M)"
    )
    parser.add_argument(
        "--tasks",
        type=int,
        default=SEARCH.tasks,
        help="feedback tasks: every candidate's, shown to the proposer",
    )
    parser.add_argument("--test-tasks", dest="test_tasks", type=int, default=20, help="held-out test tasks")
    parser.add_argument(
        "--eval-k", dest="eval_k", type=int, default=DEFAULT_EVAL_K, help="samples per test task"
    )
    parser.add_argument("--prompt-only", dest="prompt_only", action="store_true", help="prompt edits only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-tokens",
        dest="max_tokens",
        type=int,
        default=None,
        help="each LM call's completion budget, search and test (default: the server's; `whale run` "
        "samples at its preset's)",
    )
    parser.add_argument("--threads", type=int, default=SEARCH.threads)
    parser.add_argument("--server-url", dest="server_url", help="reuse a running `whale serve` server")
    parser.add_argument(
        "--no-sandbox",
        dest="sandbox",
        action="store_false",
        help="run candidate harness code in this process (trusted code only; faster)",
    )
    parser.add_argument("--run-dir", dest="run_dir", type=Path, default=None, help="default runs/search-...")
    parser.set_defaults(func=run)


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """Domain, seed harness, tasks, proposer and config: every ConfigError before the server starts."""
    from domains import get_domain
    from optimizers.harness import MetaHarnessConfig, ProposerOptions, proposer_from_spec
    from whale_cli.eval import resolve_harness

    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    domain = get_domain(args.domain)
    source = resolve_harness(args.harness, args.domain, trusted=args.trust_harness)
    config = MetaHarnessConfig(
        candidates=args.candidates,
        tasks=args.tasks,
        min_iterations=min(5, args.iterations) if args.min_iterations is None else args.min_iterations,
        patience=args.patience,
        max_iterations=args.iterations,
        smoke_tasks=min(2, args.tasks),
        prompt_only=args.prompt_only,
        seed=args.seed,
        threads=args.threads,
        **{key: getattr(args, key) for key in DECISION_FIELDS if getattr(args, key) is not None},
    )
    return {
        "domain": domain,
        "source": source,
        "config": config,
        "proposer": proposer_from_spec(
            args.proposer,
            ProposerOptions(
                seed=args.seed,
                prompt_only=args.prompt_only,
                jail=agent_jail(args.agent_read, args.agent_env, args.agent_network),
                make_lm=lambda model: proposer_lm(
                    model, RemoteServer(args.server_url) if args.server_url else None
                ),
            ),
        ),
        "searchset": domain.load("search", config.tasks + config.selection_tasks, DATA_SEED),
        "testset": domain.load(TEST_SPLIT, args.test_tasks, DATA_SEED),
        "run_dir": args.run_dir or Path("runs") / f"search-{args.domain}-{time.strftime('%Y%m%d-%H%M%S')}",
    }


def search_evaluator(args: argparse.Namespace, config: Any) -> CandidateEvaluator:
    """The search's evaluator: the sandbox by default, in process with --no-sandbox."""
    from optimizers.harness import sandboxed_evaluator

    if args.sandbox:
        return sandboxed_evaluator(config)
    return InProcessEvaluator(threads=args.threads, run_unvouched_in_process=True)


def held_out_evaluator(evaluator: CandidateEvaluator, rollouts: int) -> CandidateEvaluator:
    """The held-out test's evaluator: the search's, with room for `rollouts` rollouts per harness."""
    limits = getattr(evaluator, "limits", None)
    if limits is None:
        return evaluator
    waves = math.ceil(rollouts / limits.threads)  # worst case: every wave takes its full task limit
    seconds = max(limits.candidate_seconds, waves * limits.task_seconds + limits.startup_seconds)
    return type(evaluator)(replace(limits, candidate_seconds=seconds))


def iteration_table(report: Any) -> Table:
    table = Table(title=f"Meta-Harness iterations (stopped: {report.stopped})")
    for column in (
        "iter",
        "candidates",
        "valid",
        "iter best",
        "best so far",
        "best",
        "decision",
        "rollouts",
        "LM calls",
        "prop. tokens",
    ):
        table.add_column(column, justify="left" if column == "decision" else "right")
    for s in report.iterations:
        table.add_row(
            str(s.iteration),
            str(s.candidates),
            str(s.valid),
            f"{s.iteration_best_score:.3f}",
            f"{s.best_score:.3f}",
            s.best_name,
            decision_cell(s.decision),
            str(s.rollouts),
            count_cell(s.lm_calls),
            count_cell(s.proposer_tokens),
        )
    return table


def test_table(results: dict[str, Any], k: int) -> Table:
    table = Table(title=f"held-out test: mean@{k} (95% bootstrap CI over tasks)")
    for column in ("harness", "mean@k", "CI", "pass@k", "parse rate", "turns", "tokens"):
        table.add_column(column, justify="left" if column == "harness" else "right")
    for name, r in results.items():
        ci = f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        tokens = str(r["prompt_tokens"] + r["completion_tokens"])
        cells = (
            f"{r['mean_at_k']:.3f}",
            ci,
            f"{r['pass_at_k']:.3f}",
            f"{r['parse_rate']:.2f}",
            f"{r['mean_turns']:.1f}",
        )
        table.add_row(name, *cells, tokens)
    return table


def gain_line(gain: PairedGain) -> str:
    verdict = "beyond noise" if gain.beyond_noise else "within noise (the CI includes 0)"
    return (
        f"best - h0 on the same {gain.tasks} tasks: {gain.gain:+.3f} "
        f"[{gain.low:+.3f}, {gain.high:+.3f}] (paired 95% bootstrap CI): {verdict}"
    )


def run(args: argparse.Namespace) -> int:
    from whale_cli.wiring import backend_for_model, served, thinking_server_options
    from whale_dspy.rundir import sole_writer

    setup = prepare(args)
    own = thinking_server_options(args.server_url, args.thinking)
    backend = backend_for_model(args.model, setup["run_dir"], args.server_url, **own)
    # the lock first: two searches in one folder would mix their archives
    with sole_writer(setup["run_dir"]), served(backend) as server:
        return search(setup, server, args, Console())


def search(
    setup: dict[str, Any], backend: InferenceBackend, args: argparse.Namespace, console: Console
) -> int:
    """Run the search on a started backend, then score h0 and the best harness on the test tasks."""
    from optimizers.harness import MetaHarness, lm_sampling

    domain, run_dir = setup["domain"], setup["run_dir"]
    adapter = load_adapter_folder(backend, args.adapter, args.model, "search")
    adapter_folder = str(Path(args.adapter).resolve()) if args.adapter else None
    # the search's sampling, test included
    sampling = {"temperature": setup["config"].temperature}
    if args.max_tokens is not None:
        sampling["max_tokens"] = args.max_tokens
    lm = backend.lm(adapter=adapter, **sampling)
    student = HarnessProgram(setup["source"], domain.signature, domain.tools, lm=lm, adapter_name=adapter)
    optimizer = MetaHarness(
        proposer=setup["proposer"],
        metric=domain.metric,
        archive_dir=run_dir / "archive",
        config=setup["config"],
        evaluator=search_evaluator(args, setup["config"]),
    )
    best = optimizer.compile(student, trainset=setup["searchset"])
    console.print(iteration_table(best.report))
    best_label = f"best ({best.source.name})"
    programs = {"h0": ("h0", student)}  # label: (read folder, program)
    if best.source.digest != student.source.digest:
        programs[best_label] = ("best", best)
    reports = {}
    served, serving = backend.served_model(), backend.serving()  # what ran, for the reads and the record
    evaluator = held_out_evaluator(optimizer.evaluator, len(setup["testset"]) * args.eval_k)
    for label, (folder, program) in programs.items():  # the best is candidate code: contained as well
        read = run_dir / TEST_READS / folder
        reports[label], _ = evaluator.evaluate(
            program,
            EvalRequest(
                setup["testset"],
                metric=domain.metric,
                lm=program.bound_lm,
                k=args.eval_k,
                namespace="search-test",
                trace_path=read / TRACES_FILE,
            ),
        )
        write_read(
            read, reports[label], domain=args.domain, harness=program.source.name, split=TEST_SPLIT,
            model=served, adapter=adapter_folder, contained=args.sandbox, serving=serving,
        )  # fmt: skip
    results = {
        label: {key: value for key, value in report.to_dict().items() if key != "per_task"}
        for label, report in reports.items()
    }
    console.print(test_table(results, args.eval_k))
    record = {"search": asdict(best.report), "test": results, "served_model": served}
    record["sampling"] = lm_sampling(lm)  # as the archive recorded it
    record["adapter"] = adapter_folder
    record["adapter_sha256"] = adapter_checksums(adapter_folder)
    record["serving"] = serving
    record["environment"] = environment()
    if best_label in reports:  # a best unlike h0, on the same tasks and sample ids: pair them
        gain = paired_gain(reports["h0"].per_task, reports[best_label].per_task)
        record["gain_over_h0"] = gain.to_dict()
        console.print(gain_line(gain))
    atomic_write_json(run_dir / "search_report.json", record)
    console.print(f"archive: {run_dir / 'archive'}; report: {run_dir / 'search_report.json'}")
    return 0
