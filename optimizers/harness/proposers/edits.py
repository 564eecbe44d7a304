"""The mutation proposer's catalogue: structural edits to any harness source, by AST and text.

Edits know no domain and no seed harness: they act on what every harness has
(a top-level `build(signature, tools)`, dspy calls, module-level knob constants
such as INSTRUCTIONS, MAX_TURNS, TOP_K). An edit returns the new source, or
None when it does not apply. Wrapping edits rename the current `build` and
append a block from `optimizers.harness.proposers.blocks` plus a new `build`, so the
candidate stays one standalone, readable file.
"""

from __future__ import annotations

import ast
import inspect
import json
import random
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optimizers.harness.proposers import blocks
from optimizers.harness.proposers.demos import demos_from, labeled_demos
from whale_dspy.harness import BUILD_FUNCTION
from whale_dspy.records import Rollout

EditFn = Callable[[str, random.Random], str | None]

BLOCK_IMPORTS = {
    "collections": "import collections",
    "re": "import re",
    "Any": "from typing import Any",
    "Literal": "from typing import Literal",
}
"""Names the blocks use -> the import a harness needs for them."""

INSTRUCTION_BANK = (
    "Think step by step before answering, then give only the final answer in the answer field.",
    "Double-check the answer against the question before replying.",
    "Reply with the final answer only: no explanation, no units, no extra words.",
    "If a tool returns an error, read it carefully and try a different call.",
    "Use the information from the tools; do not guess when a tool can tell you.",
    "Keep the answer short and in the exact format the question asks for.",
)


@dataclass(frozen=True)
class Edit:
    name: str
    hypothesis: str
    apply: EditFn
    prompt_only: bool = False
    settings: frozenset[str] = frozenset()
    """What of the harness the edit decides: two edits that share one compose to one of them (the
    second writes the same constant, or one makes the other idle: greedy decoding leaves a vote
    nothing to vote over), so a composed candidate takes at most one of them."""


# -- source helpers -------------------------------------------------------------------------


def _offset(code: str, line: int, col: int) -> int:
    """Character offset of an AST (line, UTF-8 byte column) position."""
    lines = code.splitlines(keepends=True)
    return sum(map(len, lines[: line - 1])) + len(lines[line - 1].encode()[:col].decode())


def _replace(code: str, node: ast.AST, text: str) -> str:
    start = _offset(code, node.lineno, node.col_offset)
    end = _offset(code, node.end_lineno, node.end_col_offset)
    return code[:start] + text + code[end:]


def module_constant(code: str, name: str) -> ast.Constant | None:
    """The literal value node of a top-level `NAME = <literal>` (or the first string of a concatenation)."""
    for node in ast.parse(code).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        named = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        if named and isinstance(getattr(node, "value", None), ast.Constant):
            return node.value
    return None


def literal(value: object, width: int = 88) -> str:
    """A readable Python literal: double-quoted strings (wrapped when long), tuples, numbers."""
    if isinstance(value, tuple):
        return "(" + ", ".join(literal(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if not isinstance(value, str):
        return repr(value)
    if len(value) <= width:
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid Python literal
    chunks = textwrap.wrap(value, width, drop_whitespace=False, replace_whitespace=False)
    return "(\n" + "".join(f"    {json.dumps(chunk, ensure_ascii=False)}\n" for chunk in chunks) + ")"


def set_constant(code: str, name: str, value: object) -> str | None:
    """The code with the top-level `NAME = <literal>` set to `value`; None when there is no such
    constant or it has that value already. The literal may be a list or dict (DEMOS)."""
    node = module_constant(code, name)
    if node is not None:
        return None if node.value == value else _replace(code, node, literal(value))
    for statement in ast.parse(code).body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in statement.targets
        ):
            try:
                same = ast.literal_eval(statement.value) == value
            except ValueError:  # not a literal: not a knob an edit sets
                return None
            return None if same else _replace(code, statement.value, literal(value))
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for node in tree.body:
        for target in getattr(node, "targets", [getattr(node, "target", None)]):
            if isinstance(target, ast.Name):
                names.add(target.id)
    return names


def _bound_imports(tree: ast.Module) -> set[str]:
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def _ensure_imports(code: str, parts: tuple[object, ...]) -> str:
    """Add the imports the copied blocks use (re, collections, typing.Any) when the source lacks them."""
    tree = ast.parse(code)
    used = "\n".join(inspect.getsource(part) for part in parts)
    bound = _bound_imports(tree) | _top_level_names(tree)
    missing = [
        line for name, line in BLOCK_IMPORTS.items() if re.search(rf"\b{name}\b", used) and name not in bound
    ]
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    if not missing:
        return code
    at = _offset(code, imports[-1].end_lineno, imports[-1].end_col_offset) if imports else 0
    return code[:at] + "".join(f"\n{line}" for line in missing) + ("\n" if not imports else "") + code[at:]


def wrap_build(
    code: str, edit: str, parts: tuple[object, ...], constants: dict[str, object], call: str
) -> str:
    """Rename `build`, append the block (its parts and knobs) and a new `build` that wraps the old one.

    `call` is the wrapper expression with `{inner}` for the old build's result (or `{build}` for the
    old build itself, to call it on changed tools).
    """
    code = _ensure_imports(code, parts)
    tree = ast.parse(code)
    present = _top_level_names(tree)
    build = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == BUILD_FUNCTION)
    inner = f"_build_before_{edit}"
    lines = code.splitlines(keepends=True)
    lines[build.lineno - 1] = lines[build.lineno - 1].replace(f"def {BUILD_FUNCTION}(", f"def {inner}(", 1)
    knobs = [f"{name} = {literal(value)}" for name, value in constants.items() if name not in present]
    pieces = ["\n".join([f"# Added by the mutation proposer ({edit}).", *knobs])]
    pieces += [inspect.getsource(part).rstrip() for part in parts if part.__name__ not in present]
    wrapper = call.format(inner=f"{inner}(signature, tools)", build=inner)
    pieces.append(f"def {BUILD_FUNCTION}(signature, tools):\n    return {wrapper}")
    return "".join(lines).rstrip() + "\n\n\n" + "\n\n\n".join(pieces) + "\n"


def _defines(code: str, name: str) -> bool:
    return name in _top_level_names(ast.parse(code))


def refresh_block(code: str, parts: tuple[object, ...], constants: dict[str, object]) -> str:
    """The code with the block's `parts` replaced by today's source, and the knobs today's parts
    read and it lacks added above the first: a parent written by an earlier version of the block
    gets no candidate that keeps the old behaviour under a new knob. Code that defines only some
    of the parts (a block written by hand or by an LM) is left as it is."""
    if not all(part.__name__ in _definitions(code) for part in parts):
        return code
    code = _ensure_imports(code, parts)
    defined, present = _definitions(code), _top_level_names(ast.parse(code))
    nodes = sorted(((defined[part.__name__], part) for part in parts), key=lambda pair: pair[0].lineno)
    for node, part in reversed(nodes):
        code = _replace(code, node, inspect.getsource(part).rstrip())
    knobs = "".join(
        f"{name} = {literal(value)}\n" for name, value in constants.items() if name not in present
    )
    first = nodes[0][0]
    at = _offset(code, min([first.lineno, *(d.lineno for d in first.decorator_list)]), 0)
    return code[:at] + (knobs + "\n\n" if knobs else "") + code[at:]


def _definitions(code: str) -> dict[str, ast.FunctionDef | ast.ClassDef]:
    return {n.name: n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


# -- the edits ------------------------------------------------------------------------------


def chain_of_thought(code: str, rng: random.Random) -> str | None:
    calls = [
        node.func
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "Predict"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "dspy"
    ]
    for func in sorted(calls, key=lambda f: (f.lineno, f.col_offset), reverse=True):
        code = _replace(code, func, "dspy.ChainOfThought")
    return code if calls else None


def _scale_constant(name: str, scale: Callable[[int], int]) -> EditFn:
    def edit(code: str, rng: random.Random) -> str | None:
        node = module_constant(code, name)
        if node is None or not isinstance(node.value, int) or isinstance(node.value, bool):
            return None
        return set_constant(code, name, scale(node.value))

    return edit


def add_instruction(code: str, rng: random.Random) -> str | None:
    node = module_constant(code, "INSTRUCTIONS")
    if node is None or not isinstance(node.value, str):
        return None
    unused = [line for line in INSTRUCTION_BANK if line not in node.value]
    if not unused:
        return None
    return set_constant(code, "INSTRUCTIONS", f"{node.value} {rng.choice(unused)}".strip())


def _wrapper(name: str, parts: tuple[object, ...], constants: dict[str, object], call: str) -> EditFn:
    def edit(code: str, rng: random.Random) -> str | None:
        if _defines(code, parts[-1].__name__):
            return None
        return wrap_build(code, name, parts, constants, call)

    return edit


def _resamples(code: str) -> bool:
    """The harness re-runs itself for another sample (a vote or a retry)."""
    return any(_defines(code, block.__name__) for block in (blocks.MajorityVote, blocks.VerifyAndRetry))


def _decodes_greedily(code: str) -> bool:
    """The harness sets its own temperature to 0 (greedy decoding)."""
    if not _defines(code, blocks.WithSampling.__name__):
        return False
    node = module_constant(code, "TEMPERATURE")
    value = node.value if node is not None else None
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


def _unless(idle: Callable[[str], bool], edit: EditFn) -> EditFn:
    """`edit`, which does not apply to a parent on which it would sit idle: greedy decoding under a
    vote or a retry reads as greedy decoding at several times the calls, and a vote or a retry
    under greedy decoding samples the same answer again. On SQuAD all three proposers offered
    greedy decoding on a voting parent (issue 56's proposer comparison, bench/RESULTS.md)."""

    def edit_unless_idle(code: str, rng: random.Random) -> str | None:
        return None if idle(code) else edit(code, rng)

    return edit_unless_idle


def own_sampling(knob: str, value: Callable[[object], object], *, add: bool = True) -> EditFn:
    """Set the harness's own TEMPERATURE or MAX_TOKENS (adding the sampling block on first use,
    unless `add` is False: an edit back towards the run's own setting)."""

    def edit(code: str, rng: random.Random) -> str | None:
        if not _defines(code, blocks.WithSampling.__name__):
            if not add:
                return None
            knobs = {"TEMPERATURE": None, "MAX_TOKENS": None, knob: value(None)}
            return wrap_build(
                code, "own_sampling", (blocks.run_with, blocks.WithSampling), knobs, "WithSampling({inner})"
            )
        node = module_constant(code, knob)
        return set_constant(code, knob, value(node.value)) if node is not None else None

    return edit


def _retrieval(name: str, block: Callable[..., object]) -> EditFn:
    """Wrap the harness's `search` tool in a retrieval block, where it has one."""

    def edit(code: str, rng: random.Random) -> str | None:
        if not SEARCH_TOOL.search(code) or _defines(code, block.__name__):
            return None
        return wrap_build(code, name, (block,), {}, f"{{build}}(signature, {block.__name__}(tools))")

    return edit


SEARCH_TOOL = re.compile(r"""tools\[\s*["']search["']\s*\]""")


def constrained_answer(values: str) -> EditFn:
    """Decode the answer as one of a tool's listed values or as a number (switching a harness that
    constrains it already to the other kind)."""

    def edit(code: str, rng: random.Random) -> str | None:
        if _defines(code, blocks.ConstrainedAnswer.__name__):
            return set_constant(code, "ANSWER_VALUES", values)
        parts = (blocks.named_tool, blocks.ValueAdapter, blocks.ConstrainedAnswer)
        knobs = {"ANSWER_VALUES": values, "CHOICE_WORDS": blocks.CHOICE_WORDS}
        call = "ConstrainedAnswer({inner}, signature, tools)"
        return wrap_build(code, f"{values}_answer", parts, knobs, call)

    return edit


FEW_SHOT_BLOCK = (blocks.own_task, blocks.set_demos, blocks.WithDemos)
FEW_SHOT_KNOBS = {"DEMO_GROUP": blocks.DEMO_GROUP, "GROUP_SETTING": blocks.GROUP_SETTING}


def few_shot(code: str, demos: list[dict[str, object]]) -> str | None:
    """Put `demos` into the harness's predictors (adding the few-shot block on first use, bringing
    an earlier version of it up to date)."""
    if not demos:
        return None
    if _defines(code, blocks.WithDemos.__name__):
        return set_constant(refresh_block(code, FEW_SHOT_BLOCK, FEW_SHOT_KNOBS), "DEMOS", demos)
    knobs = {"DEMOS": demos, **FEW_SHOT_KNOBS}
    return wrap_build(code, "few_shot", FEW_SHOT_BLOCK, knobs, "WithDemos({inner})")


FEW_SHOT_HYPOTHESIS = (
    "Worked examples from the harness's own verified successes (DSPy few-shot demos) show the model "
    "the task's format and reasoning."
)


LABELED_DEMOS_HYPOTHESIS = (
    "Worked examples from the search tasks' gold answers (DSPy labeled demos, with the worked "
    "solution as reasoning where the task gives one) show the model how a correct answer is reached."
)


def trace_edits(
    rollouts: Sequence[Rollout], labels: dict[str, dict[str, object]], rng: random.Random
) -> tuple[Edit, ...]:
    """The edits a parent's own search rollouts make possible: few-shot demos of its accepted calls,
    and labeled demos of the tasks it ran on (each only where there are demos to show)."""
    drawn = (
        ("few_shot", FEW_SHOT_HYPOTHESIS, demos_from(rollouts, rng, labels)),
        ("labeled_demos", LABELED_DEMOS_HYPOTHESIS, labeled_demos(rollouts, labels, rng)),
    )
    return tuple(_shots_edit(name, why, demos) for name, why, demos in drawn if demos)


def _shots_edit(name: str, hypothesis: str, demos: list[dict[str, object]]) -> Edit:
    return Edit(name, hypothesis, lambda code, _rng: few_shot(code, demos), settings=frozenset({"DEMOS"}))


def set_output_adapter(code: str, adapter: str) -> str | None:
    """Switch the harness to 'json' (constrained decoding on vLLM) or 'chat' output; None if it already is."""
    if adapter not in ("json", "chat"):
        raise ValueError(f"adapter must be 'json' or 'chat', not {adapter!r}")
    if _defines(code, blocks.UseAdapter.__name__):
        return set_constant(code, "OUTPUT_ADAPTER", adapter)
    if adapter == "chat":
        return None  # DSPy's default adapter already
    return wrap_build(
        code, "json_adapter", (blocks.UseAdapter,), {"OUTPUT_ADAPTER": "json"}, "UseAdapter({inner})"
    )


RESAMPLING = (blocks.run_with, blocks.sample_id, blocks.run_sample, blocks.refuse_stateful)
"""What a block that re-runs the harness needs (distinct samples, the kept one named, no episode state)."""
RESAMPLING_KNOBS = {"WINNING_SAMPLE": blocks.WINNING_SAMPLE}

RESAMPLED = ("VOTES", "RETRIES")
"""What re-runs the harness for another sample: greedy decoding leaves it the same answer again."""
ANSWER_DECODING = frozenset({"OUTPUT_ADAPTER"})
"""How the answer is decoded: JSON or chat output, or as one of listed values or a number (a JSON
adapter of its own): the outer of two such edits decides alone."""

EDITS: tuple[Edit, ...] = (
    Edit(
        "chain_of_thought",
        "Reasoning before answering (Predict -> ChainOfThought) fixes wrong answers.",
        chain_of_thought,
    ),
    Edit(
        "majority_vote",
        "Sampling several answers and voting removes unlucky samples (self-consistency).",
        _unless(
            _decodes_greedily,
            _wrapper(
                "majority_vote",
                (*RESAMPLING, blocks.MajorityVote),
                {"VOTES": blocks.VOTES, **RESAMPLING_KNOBS},
                "MajorityVote({inner}, signature, tools)",
            ),
        ),
        settings=frozenset({"VOTES"}),
    ),
    Edit(
        "verify_retry",
        "Checking the answer (with a validator tool if any) and retrying fixes empty or rejected answers.",
        _unless(
            _decodes_greedily,
            _wrapper(
                "verify_retry",
                (*RESAMPLING, blocks.named_tool, blocks.VerifyAndRetry),
                {
                    "RETRIES": blocks.RETRIES,
                    **RESAMPLING_KNOBS,
                    "VALIDATOR_WORDS": blocks.VALIDATOR_WORDS,
                    "REJECTION_WORDS": blocks.REJECTION_WORDS,
                },
                "VerifyAndRetry({inner}, signature, tools)",
            ),
        ),
        settings=frozenset({"RETRIES"}),
    ),
    Edit(
        "answer_fallback",
        "Many failures are parse failures: reading the answer off the raw completion recovers them.",
        _wrapper(
            "answer_fallback",
            (blocks.extract_answer, blocks.last_completion, blocks.AnswerFallback),
            {},
            "AnswerFallback({inner}, signature)",
        ),
    ),
    Edit(
        "more_passages",
        "Retrieving more passages (TOP_K) finds the answer more often.",
        _scale_constant("TOP_K", lambda k: k * 2 if k > 1 else 3),
    ),
    Edit(
        "more_turns",
        "A larger turn budget (MAX_TURNS) lets the agent finish more tasks.",
        _scale_constant("MAX_TURNS", lambda n: n + max(1, n // 2)),
        settings=frozenset({"MAX_TURNS"}),
    ),
    Edit(
        "fewer_turns",
        "A smaller turn budget (MAX_TURNS) stops runaway episodes at the same accuracy.",
        _scale_constant("MAX_TURNS", lambda n: max(1, n - max(1, n // 3))),
        settings=frozenset({"MAX_TURNS"}),
    ),
    Edit(
        "instructions",
        "Clearer instructions make the model follow the task's format.",
        add_instruction,
        prompt_only=True,
    ),
    Edit(
        "constrained_decoding_on",
        "JSON output constrained to the signature's schema removes parse failures.",
        lambda code, rng: set_output_adapter(code, "json"),
        settings=ANSWER_DECODING,
    ),
    Edit(
        "greedy_decoding",
        "Greedy decoding (temperature 0, the harness's own setting) stops unlucky samples.",
        _unless(_resamples, own_sampling("TEMPERATURE", lambda current: 0.0)),
        settings=frozenset({"TEMPERATURE", *RESAMPLED}),
    ),
    Edit(
        "sampled_decoding",
        "Sampling at temperature 1 (the harness's own setting) explores answers greedy decoding misses.",
        own_sampling("TEMPERATURE", lambda current: 1.0, add=False),
        settings=frozenset({"TEMPERATURE"}),
    ),
    Edit(
        "more_tokens",
        "A larger completion budget (MAX_TOKENS, the harness's own) stops truncated answers.",
        own_sampling("MAX_TOKENS", lambda current: 512 if not isinstance(current, int) else 2 * current),
    ),
    Edit(
        "second_hop",
        "Searching again with the first hit's title finds the bridge passage a multi-hop question needs.",
        _retrieval("second_hop", blocks.second_hop),
    ),
    Edit(
        "rewrite_query",
        "A keyword query written for the search engine retrieves better passages than the raw question.",
        _retrieval("rewrite_query", blocks.rewritten_queries),
    ),
    Edit(
        "answer_from_choices",
        "Decoding the answer as one of the values a tool lists (a Literal, e.g. the legal moves) stops "
        "answers outside the set.",
        constrained_answer("choices"),
        settings=ANSWER_DECODING,
    ),
    Edit(
        "numeric_answer",
        "Decoding the answer as a number (structured output) stops words and units around it.",
        constrained_answer("number"),
        settings=ANSWER_DECODING,
    ),
    Edit(
        "constrained_decoding_off",
        "Free-form chat output lets the model reason in its own format.",
        lambda code, rng: set_output_adapter(code, "chat"),
        settings=ANSWER_DECODING,
    ),
)
"""Every structural edit; `prompt_only` marks those that change nothing but prompt text."""

EDITS_BY_NAME = {edit.name: edit for edit in EDITS}
