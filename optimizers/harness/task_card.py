"""What a proposer is told about the task itself: the signature, the tools and the metric.

A harness is written for one signature and one set of tools and judged by one
metric; an LM or agent proposer reading only code and traces must guess them.
The card is plain text, written once per harness phase into the archive
(`task_card.md`), where LM proposers read it first and agents find it as a file.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import dspy

from whale_dspy.protocols import Tools
from whale_dspy.sandbox.specs import describe_tools, type_text


def task_card(signature: type[dspy.Signature], tools: Tools, metric: Callable[..., Any]) -> str:
    lines = ["# The task", f"Instructions: {signature.instructions.strip()}"]
    for role, fields in (("Input", signature.input_fields), ("Output", signature.output_fields)):
        for name, info in fields.items():
            desc = (info.json_schema_extra or {}).get("desc") or ""
            said = f": {desc}" if desc and desc != f"${{{name}}}" else ""  # DSPy's placeholder says nothing
            lines.append(f"{role} field `{name}` ({type_text(info.annotation)}){said}")
    for spec in describe_tools(tools):
        params = ", ".join(
            p["name"] + (f": {p['annotation']}" if "annotation" in p else "") for p in spec["params"]
        )
        state = " [holds the episode's state: never re-run the harness on it]" if spec["stateful"] else ""
        lines.append(f"Tool `{spec['name']}({params})`{state}: {spec['doc'] or 'no description'}")
    if not tools:
        lines.append("Tools: none")
    doc = inspect.getdoc(metric) or ""
    lines.append(
        f"Metric: {getattr(metric, '__qualname__', type(metric).__name__)}{': ' + doc if doc else ''}"
    )
    return "\n".join(lines) + "\n"
