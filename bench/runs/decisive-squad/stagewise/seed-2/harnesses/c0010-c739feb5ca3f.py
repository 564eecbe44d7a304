"""Seed search harness (h0): search once with the question as the query, then answer from the hit."""

from __future__ import annotations

from collections.abc import Callable

import dspy
from typing import Any

TOP_K = 1
"""Passages retrieved per question."""

INSTRUCTIONS = (
    "Answer the question using the passages. "
    "Reply with a short answer: a few words copied from the passages, no explanation."
)


class RetrieveThenAnswer(dspy.Module):
    def __init__(self, signature: type[dspy.Signature], search: Callable[..., str]) -> None:
        super().__init__()
        self.search = search
        with_passages = signature.prepend(
            "passages", dspy.InputField(desc="retrieved passages: [title] text")
        )
        self.answer = dspy.Predict(with_passages.with_instructions(INSTRUCTIONS))

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.search(query=question, k=TOP_K)
        return self.answer(passages=passages, question=question)


def _build_before_json_adapter(signature: type[dspy.Signature], tools: dict[str, Callable]) -> dspy.Module:
    return RetrieveThenAnswer(signature, tools["search"])


# Added by the mutation proposer (json_adapter).
OUTPUT_ADAPTER = "json"


class UseAdapter(dspy.Module):
    """Run the harness under the output adapter OUTPUT_ADAPTER names."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: Any) -> dspy.Prediction:
        adapter = dspy.JSONAdapter() if OUTPUT_ADAPTER == "json" else dspy.ChatAdapter()
        with dspy.context(adapter=adapter):
            return self.inner(**inputs)


def _build_before_few_shot(signature, tools):
    return UseAdapter(_build_before_json_adapter(signature, tools))


# Added by the mutation proposer (few_shot).
DEMOS = [{'passages': "[Yuan dynasty] A rich cultural diversity developed during the Yuan dynasty. The major cultural achievements were the development of drama and the novel and the increased use of the written vernacular. The political unity of China and much of central Asia promoted trade between East and West. The Mongols' extensive West Asian and European contacts produced a fair amount of cultural exchange. The other cultures and peoples in the Mongol World Empire also very much influenced China. It had significantly eased trade and commerce across Asia until its decline; the communications between Yuan dynasty and its ally and subordinate in Persia, the Ilkhanate, encouraged this development. Buddhism had a great influence in the Yuan government, and the Tibetan-rite Tantric Buddhism had significantly influenced China during this period. The Muslims of the Yuan dynasty introduced Middle Eastern cartography, astronomy, medicine, clothing, and diet in East Asia. Eastern crops such as carrots, turnips, new varieties of lemons, eggplants, and melons, high-quality granulated sugar, and cotton were all either introduced or successfully popularized during the Yuan dynasty.", 'question': "What was the Yuan's Persian ally?", 'answer': 'Ilkhanate'}, {'passages': "[Rhine] At the end of World War I, the Rhineland was subject to the Treaty of Versailles. This decreed that it would be occupied by the allies, until 1935 and after that, it would be a demilitarised zone, with the German army forbidden to enter. The Treaty of Versailles and this particular provision, in general, caused much resentment in Germany and is often cited as helping Adolf Hitler's rise to power. The allies left the Rhineland, in 1930 and the German army re-occupied it in 1936, which was enormously popular in Germany. Although the allies could probably have prevented the re-occupation, Britain and France were not inclined to do so, a feature of their policy of appeasement to Hitler.", 'question': 'When did the German army reoccupy Rhineland?', 'answer': '1936'}]


def own_task(demo: dict[str, Any], inputs: dict[str, Any]) -> bool:
    return any(key in demo and demo[key] == value for key, value in inputs.items())


def set_demos(program: dspy.Module, inputs: dict[str, Any]) -> None:
    for _, predictor in program.named_predictors():
        fields = set(predictor.signature.fields)
        predictor.demos = [
            dspy.Example(**demo) for demo in DEMOS if set(demo) <= fields and not own_task(demo, inputs)
        ]


class WithDemos(dspy.Module):
    """Show each predictor the DEMOS its fields can hold (DSPy few-shot), never one of the task at hand
    (a demo drawn from a search task would hand that task its own answer)."""

    def __init__(self, inner: dspy.Module) -> None:
        super().__init__()
        self.inner = inner
        set_demos(inner, {})

    def forward(self, **inputs: Any) -> dspy.Prediction:
        if not any(own_task(demo, inputs) for demo in DEMOS):
            return self.inner(**inputs)
        program = self.inner.deepcopy()
        set_demos(program, inputs)
        return program(**inputs)


def build(signature, tools):
    return WithDemos(_build_before_few_shot(signature, tools))
