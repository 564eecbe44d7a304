"""Harness building blocks that the mutation proposer copies, as source, into candidate harnesses.

They are real Python here so they are linted and unit-tested; the mutation
proposer copies a block's source (`inspect.getsource`) into the candidate, which
must stay a standalone file. Each wrapper takes the program `build` made and
runs it under one new mechanism. Blocks read their knob (VOTES, RETRIES,
OUTPUT_ADAPTER, TEMPERATURE, MAX_TOKENS, DEMOS, ANSWER_VALUES) and the names they share with the
library (WINNING_SAMPLE, DEMO_GROUP, GROUP_SETTING) as module-level constants of the harness
they are copied into. Tool blocks (`second_hop`, `rewritten_queries`) change what a tool does before the
harness gets it.
"""

from __future__ import annotations

import collections
import re
from typing import Any, Literal

import dspy

from whale_dspy.records import GROUP_SETTING, WINNING_SAMPLE

VOTES = 5
"""Samples the majority vote draws."""
RETRIES = 2
"""Extra attempts when the answer is empty or the validator rejects it."""
OUTPUT_ADAPTER = "json"
"""'json': dspy.JSONAdapter (vLLM constrains output to the signature's JSON schema); 'chat': ChatAdapter."""

TEMPERATURE: float | None = 0.0
"""The harness's own sampling temperature (None: the run's)."""
MAX_TOKENS: int | None = None
"""The harness's own completion budget per LM call (None: the run's; the sandbox caps it)."""
DEMOS: list[dict[str, Any]] = []
"""Worked examples (one predictor call's input and output fields) from accepted search rollouts."""
DEMO_GROUP = "_task_group"
"""A demo's key for its source task's group key (never a signature field: pydantic keeps names with a
leading underscore private), so no task of that group is shown it."""

ANSWER_VALUES = "choices"
"""What the answer field may hold: 'choices' (one of the values a tool lists, e.g. the legal moves) or
'number'; decoded under the server's structured output, so nothing else can come out."""

VALIDATOR_WORDS = ("verify", "check", "validate")
CHOICE_WORDS = ("legal", "choices", "options")
"""A tool whose name holds one of these lists the values an answer may take."""
REJECTION_WORDS = ("invalid", "illegal", "error", "false", "incorrect")


def run_with(inner: dspy.Module, inputs: dict[str, Any], **settings: Any) -> dspy.Prediction:
    """Run `inner` on a copy of the rollout's LM with `settings` changed.

    The copy's LM calls go back into the rollout LM's history, which is the trace
    the optimizer records and trains on, with the settings they were made under (a call's own
    and a nested block's settings win, as they did in the request).
    """
    lm = dspy.settings.lm
    own = lm.copy(**settings)
    try:
        with dspy.context(lm=own):
            return inner(**inputs)
    finally:
        for entry in own.history:
            entry["kwargs"] = {**settings, **(entry.get("kwargs") or {})}
        lm.history.extend(own.history)


def sample_id(index: int) -> int:
    """The rollout id sample `index` runs under: one of its own for every sample (the first too), so
    nested blocks (a vote inside a retry) never give two samples one id."""
    return (dspy.settings.lm.kwargs.get("rollout_id") or 0) * 1009 + index + 1


def run_sample(inner: dspy.Module, inputs: dict[str, Any], index: int) -> dspy.Prediction:
    """Run `inner` once under a distinct rollout id and seed, so neither DSPy's cache nor a
    seeded server sampler can repeat a sample; the prediction names the sample (WINNING_SAMPLE),
    so only the LM calls that produced a kept answer are trained on."""
    lm = dspy.settings.lm
    distinct = {"rollout_id": sample_id(index)}
    if lm.kwargs.get("seed") is not None:  # same seed, same prompt: the server draws the same sample
        distinct["seed"] = (lm.kwargs["seed"] * 1009 + index + 1) % 2**31
    prediction = run_with(inner, inputs, **distinct)
    if isinstance(prediction, dspy.Prediction) and WINNING_SAMPLE not in prediction:
        prediction[WINNING_SAMPLE] = distinct["rollout_id"]  # an inner block's own pick is more precise
    return prediction


def named_tool(tools: dict[str, Any], words: tuple[str, ...]) -> Any:
    """The first tool whose name holds one of `words` (a validator, a listing of values), or None."""
    return next((tool for name, tool in tools.items() if any(w in name.lower() for w in words)), None)


def refuse_stateful(block: str, tools: dict[str, Any]) -> None:
    """A block that re-runs the harness cannot share one episode's tools between runs (each later
    run would play on in the same episode), and forking the episode would let a harness search
    against the verifier's replies: refused. (`stateful` is `whale_dspy.protocols.STATEFUL_TOOL`.)"""
    held = sorted(name for name, tool in tools.items() if getattr(tool, "stateful", False))
    if held:
        raise ValueError(f"{block} re-runs the harness, but its tools {held} hold one episode's state")


class WithSampling(dspy.Module):
    """Run the harness under its own sampling: TEMPERATURE and MAX_TOKENS (None keeps the run's)."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: Any) -> dspy.Prediction:
        settings = {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS}
        return run_with(self.inner, inputs, **{k: v for k, v in settings.items() if v is not None})


class WithDemos(dspy.Module):
    """Show each predictor the DEMOS its fields can hold (DSPy few-shot), never one of the task at hand
    (a demo drawn from a search task would hand that task its own answer) or of its group (the rollout
    names it in dspy's settings: a demo from a task's article helps it as no held-out task is helped)."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner
        set_demos(inner, {})

    def forward(self, **inputs: Any) -> dspy.Prediction:
        group = dspy.settings.get(GROUP_SETTING)
        if not any(own_task(demo, inputs, group) for demo in DEMOS):
            return self.inner(**inputs)
        program = self.inner.deepcopy()
        set_demos(program, inputs, group)
        return program(**inputs)


def own_task(demo: dict[str, Any], inputs: dict[str, Any], group: str | None = None) -> bool:
    """Whether `demo` came from the task at hand (an input value of its own) or from its group."""
    if group is not None and demo.get(DEMO_GROUP) == group:
        return True
    return any(key in demo and demo[key] == value for key, value in inputs.items())


def set_demos(program: dspy.Module, inputs: dict[str, Any], group: str | None = None) -> None:
    """Each predictor gets the demos that hold one of its inputs and one of its outputs (DSPy's own
    rule for a demo it can show; a missing field shows as not supplied), cut to its fields: a
    labeled demo's worked solution reaches a reasoning predictor, a plain one sees the answer."""
    for _, predictor in program.named_predictors():
        signature = predictor.signature
        predictor.demos = [
            dspy.Example(**{name: demo[name] for name in signature.fields if name in demo})
            for demo in DEMOS
            if set(signature.input_fields) & set(demo)
            and set(signature.output_fields) & set(demo)
            and not own_task(demo, inputs, group)
        ]


def second_hop(tools: dict[str, Any]) -> dict[str, Any]:
    """`search` searching twice: the query, then the query with the first hit's title (a bridge)."""
    search = tools.get("search")
    if search is None:
        return tools

    def search_twice(query: str, k: int = 1) -> str:
        """Search the passage collection twice (the query, then it with the first hit's title)."""
        first = str(search(query=query, k=k))
        title = re.match(r"\[([^\]]+)\]", first)
        if title is None:
            return first
        second = str(search(query=f"{query} {title.group(1)}", k=k))
        return first if second == first else f"{first}\n\n{second}"

    return {**tools, "search": search_twice}


def rewritten_queries(tools: dict[str, Any]) -> dict[str, Any]:
    """`search` asking the LM for a keyword query first, and searching with that."""
    search = tools.get("search")
    if search is None:
        return tools
    rewrite = dspy.Predict("question -> keywords")

    def search_rewritten(query: str, k: int = 1) -> str:
        """Search the passage collection with a keyword query the LM writes for the question."""
        keywords = str(rewrite(question=query).keywords or "").strip()
        return str(search(query=keywords or query, k=k))

    return {**tools, "search": search_rewritten}


class MajorityVote(dspy.Module):
    """Sample the harness VOTES times and keep the most common answer (self-consistency)."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature], tools: dict[str, Any]) -> None:
        super().__init__()
        refuse_stateful("majority vote", tools)
        self.inner = inner
        self.output = next(iter(signature.output_fields))

    def forward(self, **inputs: Any) -> dspy.Prediction:
        predictions, failure = [], None
        for index in range(VOTES):
            try:
                predictions.append(run_sample(self.inner, inputs, index))
            except Exception as error:
                failure = error
        if not predictions:
            raise failure or RuntimeError("no sample answered")
        votes = collections.Counter(str(p.get(self.output, "")).strip() for p in predictions)
        winner = votes.most_common(1)[0][0]
        return next(p for p in predictions if str(p.get(self.output, "")).strip() == winner)


class VerifyAndRetry(dspy.Module):
    """Check the answer (with a validator tool when the harness has one) and retry when it fails."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature], tools: dict[str, Any]) -> None:
        super().__init__()
        refuse_stateful("verify-and-retry", tools)
        self.inner = inner
        self.output = next(iter(signature.output_fields))
        self.validator = named_tool(tools, VALIDATOR_WORDS)

    def forward(self, **inputs: Any) -> dspy.Prediction:
        prediction, failure = None, None
        for attempt in range(RETRIES + 1):
            try:
                prediction = run_sample(self.inner, inputs, attempt)
            except Exception as error:
                failure = error
                continue
            if self.accepts(prediction.get(self.output)):
                return prediction
        if prediction is None:
            raise failure or RuntimeError("no attempt answered")
        return prediction

    def accepts(self, answer: Any) -> bool:
        if answer is None or not str(answer).strip():
            return False
        if self.validator is None:
            return True
        try:
            verdict = self.validator(answer)
        except Exception:
            return False
        if isinstance(verdict, bool):
            return verdict
        return not any(word in str(verdict).lower() for word in REJECTION_WORDS)


def extract_answer(text: str) -> str | None:
    """The text after the last 'answer' marker, else the last number, else the last non-empty line."""
    marked = re.findall(r"answer\W*(?:is\b)?[\s:=#\]\"']*([^\n\"{}]+)", text, flags=re.IGNORECASE)
    if marked and marked[-1].strip(" ."):
        return marked[-1].strip(" .")
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    if numbers:
        return numbers[-1].replace(",", "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def last_completion() -> str:
    """The raw text of the rollout LM's latest completion ('' when there is none)."""
    history = dspy.settings.lm.history
    outputs = (history[-1].get("outputs") or [""]) if history else [""]
    first = outputs[0]
    return (first.get("text") or "") if isinstance(first, dict) else str(first)


class AnswerFallback(dspy.Module):
    """When the harness raises (a parse failure) or leaves the answer empty, read it off the raw text."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature]) -> None:
        super().__init__()
        self.inner = inner
        self.output = next(iter(signature.output_fields))

    def forward(self, **inputs: Any) -> dspy.Prediction:
        try:
            prediction = self.inner(**inputs)
        except Exception as error:
            prediction, failure = None, error
        else:
            if str(prediction.get(self.output, "") or "").strip():
                return prediction
            failure = None
        answer = extract_answer(last_completion())
        if answer is None:
            if failure is not None:
                raise failure
            return prediction
        return dspy.Prediction(**{self.output: answer})


class UseAdapter(dspy.Module):
    """Run the harness under the output adapter OUTPUT_ADAPTER names."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: Any) -> dspy.Prediction:
        active = dspy.settings.adapter
        if OUTPUT_ADAPTER == "json":  # a JSON adapter already active (one that constrains an answer) stays
            adapter = active if isinstance(active, dspy.JSONAdapter) else dspy.JSONAdapter()
        else:
            adapter = dspy.ChatAdapter()
        with dspy.context(adapter=adapter):
            return self.inner(**inputs)


class ConstrainedAnswer(dspy.Module):
    """Decode each predictor's answer field under ANSWER_VALUES through the server's structured
    output: one of the values a tool lists (read again before every call, as an episode moves on)
    or a number."""

    def __init__(self, inner: dspy.Module, signature: type[dspy.Signature], tools: dict[str, Any]) -> None:
        super().__init__()
        self.inner = inner
        self.answer = next(iter(signature.output_fields))
        self.choices = named_tool(tools, CHOICE_WORDS)
        if ANSWER_VALUES == "choices" and self.choices is None:
            raise ValueError(f"no tool lists the answer's values (a tool named with one of {CHOICE_WORDS})")

    def forward(self, **inputs: Any) -> dspy.Prediction:
        with dspy.context(adapter=ValueAdapter(self.answer, self.value_type)):
            return self.inner(**inputs)

    def value_type(self) -> Any:
        """The answer's type for the next call (None: leave the field as it is)."""
        if ANSWER_VALUES == "number":
            return float
        listed = self.choices()
        listed = listed.replace(",", " ").split() if isinstance(listed, str) else listed
        values = tuple(dict.fromkeys(str(value) for value in listed))
        return Literal[values] if values else None


class ValueAdapter(dspy.JSONAdapter):
    """dspy.JSONAdapter with one output field retyped per call: the field named like the task's
    answer, else a predictor's only output besides its reasoning; a predictor with other outputs (a
    tool-calling step, a plan) is left as it is. Where the server takes no JSON schema, the parse
    still refuses a value outside the type."""

    def __init__(self, answer: str, value_type: Any) -> None:
        super().__init__()
        self.answer = answer
        self.value_type = value_type

    def __call__(self, lm: Any, lm_kwargs: Any, signature: Any, demos: Any, inputs: Any) -> Any:
        return super().__call__(lm, lm_kwargs, self.retyped(signature), demos, inputs)

    async def acall(self, lm: Any, lm_kwargs: Any, signature: Any, demos: Any, inputs: Any) -> Any:
        return await super().acall(lm, lm_kwargs, self.retyped(signature), demos, inputs)

    def retyped(self, signature: Any) -> Any:
        outputs = [name for name in signature.output_fields if name != "reasoning"]
        field = self.answer if self.answer in outputs else outputs[0] if len(outputs) == 1 else None
        kind = self.value_type() if field is not None else None
        return signature if kind is None else signature.with_updated_fields(field, type_=kind)
