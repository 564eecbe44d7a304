"""What LM and agent proposers are told: the task, and the archive as code, scores and RAW traces.

Meta-Harness's ablation: proposers that read full traces found better harnesses
than ones reading summaries (50.0 vs 34.9), so traces go in as recorded, only
cut to a character budget.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from typing import Any

from optimizers.harness.archive import CandidateMeta, HarnessArchive
from optimizers.harness.validation import ALLOWED_IMPORTS
from whale_dspy.records import Rollout
from whale_dspy.seeding import derive_seed

TASK = """You improve an LLM agent's harness: the Python code around the model (what context it sees,
which tools it calls and how, how many turns it takes, how its answer is parsed, checked and retried).
A harness is ONE standalone Python module that defines `build(signature, tools) -> dspy.Module`:
`signature` is the task's dspy.Signature (inputs and the output field(s) the metric reads) and `tools`
is a dict name -> plain Python callable for this task. Knobs are module-level constants.
Rules: import only these top-level modules: {imports}. Keep `build(signature, tools)`.
Add exactly ONE new mechanism relative to the parent and state it as a testable hypothesis.
Mechanisms within reach: reasoning (dspy.ChainOfThought); the harness's own sampling
(`dspy.Predict(signature, temperature=0.0, max_tokens=256)`; the sandbox caps max_tokens); few-shot
demos (`predictor.demos = [dspy.Example(field=value, ...)]` copied from successful traces below, or
labeled from the search tasks' gold fields, a worked solution as `reasoning` where given; a task
must never see its own demo); retrieval (a keyword query written for the search tool, a second
search with a title the first hit names, more passages); constrained output (dspy.JSONAdapter; an
answer field typed `Literal[...]` of the values a tool lists, or `float`, is decoded under the server's
JSON schema); majority votes and verify-and-retry (only where no tool holds an episode's state: a tool
with `stateful = True` must not be re-run), reading the answer off a raw completion.
Write complete, runnable code: no placeholders, no ellipses."""

PROMPT_ONLY = """PROMPT-ONLY MODE: change nothing but prompt text (string constants, docstrings, instructions,
field descriptions). Any change to code structure is rejected."""

FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)```", re.DOTALL)


def task_text(prompt_only: bool = False) -> str:
    text = TASK.format(imports=", ".join(sorted(ALLOWED_IMPORTS)))
    return f"{text}\n\n{PROMPT_ONLY}" if prompt_only else text


def strip_code_fences(text: str) -> str:
    """The code inside the longest fenced block, or the text itself when it has no fence."""
    blocks = FENCE.findall(text or "")
    return (max(blocks, key=len) if blocks else (text or "")).strip() + "\n"


def summary_line(meta: CandidateMeta) -> str:
    verdict = (
        f"score {meta.scores.mean:.3f}" if meta.valid else f"{meta.status} at {meta.stage}: {meta.error}"
    )
    return (
        f"{meta.name} (parent {meta.parent}, iteration {meta.iteration}) {verdict}; "
        f"turns {meta.cost.mean_turns:.1f}; tokens/rollout {meta.cost.tokens_per_rollout:.0f}; "
        f"hypothesis: {meta.hypothesis or '-'}"
    )


def clipped(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + f"\n... [{len(text) - max_chars} chars cut]"


def raw_trace(rollout: Rollout, max_chars: int) -> str:
    return clipped(json.dumps(rollout.to_dict(), indent=1, default=str), max_chars)


def sample_traces(rollouts: list[Rollout], n: int, rng: random.Random) -> list[Rollout]:
    """Up to n traces, failures first (half at least when there are any), then successes."""
    failing = [r for r in rollouts if r.score < 1.0]
    passing = [r for r in rollouts if r.score >= 1.0]
    chosen = rng.sample(failing, min(len(failing), max(n - len(passing), (n + 1) // 2)))
    return chosen + rng.sample(passing, min(len(passing), n - len(chosen)))


def archive_context(
    archive: HarnessArchive, *, top: int = 3, traces: int = 4, trace_chars: int = 6000, seed: int = 0
) -> str:
    """The task card (signature, tools, metric), every candidate in one line, then the best candidates'
    code, its diff against its parent and a sample of their raw traces, a failing one with the search
    task's gold answer beside it."""
    rng = random.Random(derive_seed("context", seed, len(archive)))
    parts = [archive.task_card() or "", "# All candidates so far", *map(summary_line, archive.candidates)]
    failed = [m for m in archive.candidates if not m.valid][-top:]
    labels = archive.labels()
    for meta in [*archive.best(top), *failed]:
        code = archive.source(meta.name).code
        parts += [f"\n# Candidate {meta.name}", summary_line(meta), "```python", code, "```"]
        diff = archive.parent_diff(meta.name)
        if diff:
            parts += [
                f"## Diff against its parent {meta.parent}",
                "```diff",
                clipped(diff, trace_chars),
                "```",
            ]
        for rollout in sample_traces(archive.traces(meta.name), traces, rng):
            parts.append(f"## Raw trace: task {rollout.task_id}, score {rollout.score}")
            gold = labels.get(rollout.task_id) if rollout.score < 1.0 else None
            if gold:
                parts.append(f"Gold (what the verifier expected; a search task): {json.dumps(gold)}")
            parts.append(raw_trace(rollout, trace_chars))
    return "\n".join(parts)


def history_tokens(entries: Iterable[dict[str, Any]]) -> int:
    """Prompt plus completion tokens of DSPy LM history entries."""
    total = 0
    for entry in entries:
        usage = entry.get("usage") or {}
        total += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return total
