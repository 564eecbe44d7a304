"""Few-shot demonstrations in DSPy's demo shape: a harness's own verified successes, or labeled ones.

A bootstrapped demo is one predictor call's fields: the inputs from the call's
last user message and the outputs from its completion, read back from the
adapter's `[[ ## field ## ]]` markers (or the JSON object JSONAdapter writes),
only from rollouts the verifier accepted. A labeled demo (DSPy's LabeledFewShot)
is a search task's inputs with its gold fields, a worked solution included where
the domain gives one as `reasoning`: the lever when the harness succeeds too
rarely to bootstrap from. Both come only from the archive, which holds search
tasks (never the test split); the few-shot block keeps a task's own demo out of
that task's prompt, and a demo of a task with a group (`TASK_GROUP` among its
labels) out of every prompt of that group.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

from optimizers.harness.proposers.blocks import DEMO_GROUP
from whale_dspy.records import TASK_GROUP, LMCall, Rollout, group_key

FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n*\[\[ ## \w+ ## \]\]|\Z)", re.S)
INSTRUCTION_TAIL = re.compile(
    r"\n+\s*Respond with (?:the corresponding output fields|a JSON object).*\Z", re.S
)
MAX_FIELD_CHARS = 1500
"""A longer field (a retrieved passage, say) is cut: a demo shows the format, not the whole text."""
DEMO_TASKS = 3
"""Tasks whose calls become demos."""


def call_fields(call: LMCall) -> dict[str, str] | None:
    """The call's input and output fields, or None when either side cannot be read."""
    users = [m for m in call.messages if m.get("role") == "user"]
    if not users:
        return None
    inputs = dict(FIELD.findall(INSTRUCTION_TAIL.sub("", str(users[-1].get("content", "")))))
    outputs = dict(FIELD.findall(call.completion)) or _json_object(call.completion)
    outputs.pop("completed", None)
    if not inputs or not outputs or set(inputs) & set(outputs):
        return None
    return {name: value.strip()[:MAX_FIELD_CHARS] for name, value in {**inputs, **outputs}.items()}


def _json_object(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return (
        {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
        if isinstance(value, dict)
        else {}
    )


def grouped(demo: dict[str, Any], label: dict[str, Any] | None) -> dict[str, Any]:
    """The demo with its source task's group key, where the task's labels name a group."""
    key = group_key((label or {}).get(TASK_GROUP))
    return demo if key is None else {**demo, DEMO_GROUP: key}


def demos_from(
    rollouts: Sequence[Rollout],
    rng: random.Random,
    labels: dict[str, dict[str, Any]] | None = None,
    tasks: int = DEMO_TASKS,
) -> list[dict[str, Any]]:
    """The parsed calls of accepted rollouts (score 1, no error) of up to `tasks` distinct tasks, each
    with its task's group from `labels`."""
    by_task: dict[str, list[dict[str, str]]] = {}
    for rollout in sorted(rollouts, key=lambda r: (r.task_id, r.sample)):
        if rollout.error is None and rollout.score >= 1.0 and rollout.task_id not in by_task:
            calls = rollout.answering_calls  # a vote's losing samples are no demos
            fields = [f for call in calls if call.parsed and (f := call_fields(call)) is not None]
            if fields:
                by_task[rollout.task_id] = fields
    chosen = sorted(rng.sample(sorted(by_task), min(tasks, len(by_task))))
    return [grouped(demo, (labels or {}).get(task)) for task in chosen for demo in by_task[task]]


def labeled_demos(
    rollouts: Sequence[Rollout],
    labels: dict[str, dict[str, Any]],
    rng: random.Random,
    tasks: int = DEMO_TASKS,
) -> list[dict[str, Any]]:
    """Up to `tasks` search tasks as demos: the inputs their rollouts ran on, with their text gold fields."""
    inputs: dict[str, dict[str, Any]] = {}
    for rollout in sorted(rollouts, key=lambda r: (r.task_id, r.sample)):
        if labels.get(rollout.task_id) and rollout.inputs:
            inputs.setdefault(rollout.task_id, rollout.inputs)
    chosen = sorted(rng.sample(sorted(inputs), min(tasks, len(inputs))))
    return [
        grouped(
            {  # inputs as the task gives them, so the few-shot block knows a task's own demo
                **inputs[task],
                **{
                    name: str(value).strip()[:MAX_FIELD_CHARS]
                    for name, value in labels[task].items()
                    if name not in inputs[task]
                    and name != TASK_GROUP
                    and isinstance(value, str | int | float)
                    and not isinstance(value, bool)
                },
            },
            labels[task],
        )
        for task in chosen
    ]
