"""`whale eval`: mean@k of one harness on one domain split, with its traces written to disk.

`--out DIR` holding an interrupted read of the same settings continues it (whale_cli.read_folder);
a finished one is shown again without starting a server.
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import dspy
from rich.console import Console

from domains import DOMAIN_HELP
from optimizers.engine import PRESET_HELP, PRESETS, WhaleConfig
from whale_cli.arguments import add_dtype_argument, add_model_argument, add_thinking_argument
from whale_cli.read_folder import TRACES_FILE, continued_rollouts, read_settings, record_settings, write_read
from whale_cli.run_settings import RunSettings
from whale_dspy.backends.vllm_server import DEFAULT_MODEL
from whale_dspy.defaults import DEFAULT_EVAL_K, DEFAULT_THREADS
from whale_dspy.errors import ConfigError
from whale_dspy.evaluation import EvalReport, EvalRequest
from whale_dspy.harness import HarnessProgram, HarnessSource
from whale_dspy.protocols import SPLITS
from whale_dspy.records import Rollout
from whale_dspy.reporting.reads import READ_REPORT

OUTPUT_FORMATS = ("chat", "json")
"""chat: DSPy's ChatAdapter; json: JSONAdapter, which the server turns into schema-constrained decoding."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a harness on a domain split (mean@k, traces)")
    parser.add_argument("--domain", default=None, help=f"{DOMAIN_HELP} (default: --run's)")
    parser.add_argument(
        "--run", type=Path, default=None, metavar="RUN_DIR",
        help="evaluate a finished run's final program (its domain, model, final harness and adapter, "
        "under its sampling and thinking switch) on more tasks or another split; the flags given "
        "override the run's",
    )  # fmt: skip
    add_harness_arguments(parser)
    add_thinking_argument(parser)
    parser.add_argument("--split", default="test", choices=SPLITS)
    parser.add_argument("--limit", type=int, default=20, help="tasks to evaluate (default 20)")
    parser.add_argument(
        "--k", type=int, default=DEFAULT_EVAL_K, help=f"samples per task (default {DEFAULT_EVAL_K})"
    )
    parser.add_argument(
        "--preset", choices=tuple(PRESETS), default=None,
        help=f"whose sampling to evaluate under, as a run with it does, --run's max_tokens kept "
        f"(default: --run's, else {RunSettings.preset}; {PRESET_HELP})",
    )  # fmt: skip
    parser.add_argument("--temperature", type=float, default=None, help="default: the preset's")
    parser.add_argument(
        "--max-tokens", dest="max_tokens", type=int, default=None, help="default: --run's, else the preset's"
    )
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    add_model_argument(parser, default=None, shown=f"--run's, else {DEFAULT_MODEL}")
    parser.add_argument("--server-url", default=None, help="use a running server instead of starting one")
    add_dtype_argument(parser)
    parser.add_argument("--adapter", default=None, help="LoRA adapter folder to evaluate (default: base)")
    parser.add_argument("--output-format", choices=OUTPUT_FORMATS, default="chat")
    parser.add_argument(
        "--out", type=Path, default=None,
        help="folder for traces.jsonl and report.json; one holding an interrupted read of the same "
        "settings continues it",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="task sample seed")
    parser.set_defaults(func=run)


def add_harness_arguments(parser: argparse.ArgumentParser) -> None:
    """--harness and its opt-in to run a harness file in process (eval, train, search)."""
    parser.add_argument(
        "--harness", default=None, help="seed harness name or a harness .py file (default: h0)"
    )
    parser.add_argument(
        "--trust-harness",
        dest="trust_harness",
        action="store_true",
        help="run the --harness file in this process: only for code you wrote or checked yourself "
        "(a file the search wrote runs in the sandbox without this)",
    )


def resolve_harness(name_or_file: str | None, domain: str, *, trusted: bool = False) -> HarnessSource:
    """A harness file path (vouched for only when `trusted`), or a seed harness by domain or stem."""
    from domains import DOMAINS, domain_entry
    from harness_programs import seed_harness, seed_harness_stems

    if name_or_file and Path(name_or_file).is_file():
        source = HarnessSource.from_path(name_or_file)
        return source.vouched() if trusted else source
    name = name_or_file or domain
    if name.partition(":")[0] in DOMAINS:
        return seed_harness(domain_entry(name).seed_harness)
    if name not in seed_harness_stems():
        valid = ", ".join(sorted({*DOMAINS, *seed_harness_stems()}))
        raise ConfigError(f"no harness file or seed harness {name!r}; valid names are {valid}")
    return seed_harness(name)


def load_adapter_folder(backend: Any, folder: str | None, model: str, purpose: str) -> str | None:
    """Load a LoRA adapter folder (`--adapter`) into the started backend under a fresh name; None
    (the base weights) without one."""
    from whale_dspy.records import AdapterRef

    if not folder:
        return None
    name = f"{purpose}-{Path(folder).name}-{uuid.uuid4().hex[:12]}"  # unique on a server others share
    # The served base (a resolved folder), not the model's short name: load_adapter checks it.
    backend.load_adapter(AdapterRef(name, str(Path(folder).resolve()), backend.base_model or model))
    return name


def eval_sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The preset's sampling with the flags given laid over it (`with_run_defaults` fills a run's
    max_tokens in where its flag is silent)."""
    given = {"temperature": args.temperature, "max_tokens": args.max_tokens}
    return {
        **WhaleConfig.for_preset(args.preset).sampling,
        **{key: value for key, value in given.items() if value is not None},
    }


def with_run_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The flags with `--run`'s final program and sampling where they are silent; without --run,
    --domain is required and the rest default as for a new run (`RunSettings`). A run's final
    harness is a file the search may have written, so it runs sandboxed like any unvouched file."""
    given = vars(args)
    if args.run is None:
        if args.domain is None:
            raise ConfigError("whale eval needs --domain (or --run RUN_DIR)")
        return argparse.Namespace(
            **{**given, "model": args.model or DEFAULT_MODEL, "preset": args.preset or RunSettings.preset}
        )
    from optimizers.engine import load_report

    settings, final = RunSettings.from_run(args.run), load_report(args.run)
    if not final.finished:
        raise ConfigError(
            f"{args.run} is unfinished: finish it (whale run --resume) to evaluate its final program"
        )
    adapter = final.adapter["path"] if final.adapter else None
    if args.adapter is None and adapter is not None and not Path(adapter).is_dir():
        raise ConfigError(f"{args.run}'s final adapter {adapter} is gone; give its copy with --adapter DIR")
    return argparse.Namespace(
        **{
            **given,
            "domain": args.domain or settings.domain,
            "model": args.model or settings.model,
            "harness": args.harness or str(args.run / final.harness["path"]),
            "adapter": args.adapter or adapter,
            "preset": args.preset or settings.preset,
            "max_tokens": settings.max_tokens if args.max_tokens is None else args.max_tokens,
            "thinking": settings.thinking if args.thinking is None else args.thinking,
        }
    )


def adapter_context(output_format: str):
    return dspy.context(adapter=dspy.JSONAdapter()) if output_format == "json" else contextlib.nullcontext()


def run(args: argparse.Namespace) -> int:
    from domains import get_domain
    from whale_dspy.evaluation import measured
    from whale_dspy.rundir import sole_writer

    args = with_run_defaults(args)
    own = own_server_options(args)
    domain = get_domain(args.domain)
    source = resolve_harness(args.harness, args.domain, trusted=args.trust_harness)
    examples = domain.load(args.split, args.limit, args.seed)
    out = args.out or Path("runs") / f"eval-{args.domain}-{source.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    with sole_writer(out):
        settings = read_settings(args, source, eval_sampling(args))
        done = continued_rollouts(out, settings)
        kept = len(measured(done, examples, args.k))
        if kept == len(examples) * args.k and (out / READ_REPORT).exists():
            Console().print(f"{out} holds this read, finished: {out / READ_REPORT}")
            return 0
        _evaluate(args, own, domain, source, examples, out, settings, done, kept)
    return 0


def own_server_options(args: argparse.Namespace) -> dict[str, Any]:
    """The own server's thinking switch and dtype; a --server-url server was started with its own."""
    from whale_cli.wiring import thinking_server_options

    if args.dtype and args.server_url:
        raise ConfigError("--dtype is the own server's: start the shared one with `whale serve --dtype`")
    options = thinking_server_options(args.server_url, args.thinking)
    return {**options, "dtype": args.dtype} if args.dtype else options


def _evaluate(
    args: argparse.Namespace,
    own: dict[str, Any],
    domain: Any,
    source: HarnessSource,
    examples: list[Any],
    out: Path,
    settings: dict[str, Any],
    done: list[Rollout],
    kept: int,
) -> None:
    from whale_cli.wiring import backend_for_model, served
    from whale_dspy.sandbox import ContainedEvaluator

    with served(backend_for_model(args.model, out, args.server_url, **own)) as backend:
        model_served, serving = backend.served_model(), backend.serving()  # what ran, whatever was asked
        record_settings(out, settings, model_served, serving.get("dtype"))  # None: a remote can't say
        adapter_name = load_adapter_folder(backend, args.adapter, args.model, "eval")
        lm = backend.lm(adapter=adapter_name, **settings["sampling"])
        program = HarnessProgram(source, domain.signature, domain.tools, lm=lm, adapter_name=adapter_name)
        total = len(examples) * args.k
        with adapter_context(args.output_format), _progress(total, kept) as advance:
            report, _ = ContainedEvaluator.for_long_evaluations(args.threads).evaluate(
                program,
                EvalRequest(
                    examples,
                    metric=domain.metric,
                    lm=lm,
                    k=args.k,
                    namespace=f"eval-{args.split}",
                    trace_path=out / TRACES_FILE,
                    on_rollout=lambda rollout: advance(),
                    done=done,
                ),
            )
    _write_and_print(report, out, args, settings, source, model_served, serving)


@contextlib.contextmanager
def _progress(total: int, completed: int, console: Console | None = None):
    """A live bar of the read's rollouts; where the console cannot redraw (a log), one plain line at
    each tenth of them instead, since every rollout is saved as it comes and a line each would flood."""
    from rich.progress import Progress

    console = console or Console()
    with Progress(console=console, transient=True, disable=not console.is_interactive) as progress:
        task = progress.add_task("rollouts", total=total, completed=completed)

        def advance() -> None:
            progress.advance(task)
            state = progress.tasks[task]
            done, left = int(state.completed), state.time_remaining
            if not console.is_interactive and done * 10 // total > (done - 1) * 10 // total:
                when = "?" if left is None else timedelta(seconds=int(left))
                console.print(f"rollouts {done}/{total} ({done / total:.0%}), {when} left", highlight=False)

        yield advance


def _write_and_print(
    report: EvalReport,
    out: Path,
    args: argparse.Namespace,
    settings: dict[str, Any],
    harness: HarnessSource,
    served: str,
    serving: dict[str, Any],
) -> None:
    """report.json and the table; `served` is the model the server said it serves."""
    from rich.table import Table

    contained = not harness.trusted  # unvouched code ran in the sandbox
    write_read(
        out, report, domain=args.domain, harness=harness.name, split=args.split, model=served,
        adapter=settings["adapter"], run=str(args.run) if args.run else None, contained=contained,
        serving=serving, output_format=args.output_format,
    )  # fmt: skip
    where = "sandboxed" if contained else "in process"
    table = Table(
        title=f"{args.domain} / {harness.name} / {args.split} ({args.output_format} output, {where})"
    )
    for column in (
        "tasks",
        "k",
        f"mean@{report.k}",
        "95% CI",
        f"pass@{report.k}",
        "parsed",
        "tokens/rollout",
        "rollouts/s",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        str(report.tasks),
        str(report.k),
        f"{report.mean_at_k:.3f}",
        f"[{report.ci_low:.3f}, {report.ci_high:.3f}]",
        f"{report.pass_at_k:.3f}",
        f"{report.parse_rate:.0%}",
        f"{report.completion_tokens / max(report.rollouts, 1):.0f}",
        f"{report.rollouts_per_second:.2f}",
    )
    Console().print(table)
    Console().print(f"traces: {out / TRACES_FILE}")
