"""Math: GSM8K (numeric answers) and MATH with the MATH-500 test split (LaTeX answers).

GSM8K: the official test set (1,319) is the test split; the official train set
(7,473) is cut by a salted hash of the task id into train / search / val
(80 / 10 / 10 %). MATH: MATH-500 is the test split; the other 4,500 problems of
the MATH test set (matched on the problem text) are cut the same way.

Each example's worked solution is its `reasoning` field, the name DSPy's ChainOfThought writes, so
a labeled demo (`dspy.LabeledFewShot`, or the search's labeled-demos edit) shows a reasoning
predictor a worked example; GSM8K's calculator annotations (`<<48/2=24>>`) are cut from it.
"""

from __future__ import annotations

import re
from typing import Any

import dspy

from domains.base import DatasetDomain, answer_text, assign_splits, group_by_split, parse_rows
from domains.math_verifiers import last_boxed, latex_equivalent, numbers_match
from whale_dspy.protocols import Tools

POOL_FRACTIONS = {"train": 0.8, "search": 0.1, "val": 0.1}


class GradeSchoolMath(dspy.Signature):
    """Solve the grade-school math word problem. Give the final answer as a single number."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="the final answer: a number only")


class CompetitionMath(dspy.Signature):
    """Solve the competition math problem. Give the final answer in simplest form, in LaTeX."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="the final answer only, as a LaTeX expression")


CALCULATOR_ANNOTATION = re.compile(r"<<[^>]*>>")


def gsm8k_row(row: dict[str, Any]) -> tuple[str, str, str]:
    """(question, final number, worked solution without calculator annotations) from an official GSM8K row."""
    solution, final = row["answer"].rsplit("####", 1)
    if not row["question"].strip() or not final.strip():
        raise ValueError("empty question or final answer")
    return row["question"], final.strip().replace(",", ""), CALCULATOR_ANNOTATION.sub("", solution).strip()


class MathDomain(DatasetDomain):
    """The two math domains differ in data, split source and checker; the rest is shared."""

    def metric(self, example: dspy.Example, pred: Any, trace: Any = None) -> float:
        """1.0 when the answer equals the gold final answer (as numbers, or as LaTeX); else 0.0."""
        return 1.0 if self.check(example.answer, answer_text(pred)) else 0.0

    @staticmethod
    def check(gold: str, answer: str | None) -> bool:
        raise NotImplementedError

    def tools(self, example: dspy.Example) -> Tools:
        return {}


class GSM8KDomain(MathDomain):
    name = "math"
    signature = GradeSchoolMath
    check = staticmethod(numbers_match)

    def _build_splits(self) -> dict[str, list[dspy.Example]]:
        folder = self.data_dir / "math"
        splits = {}
        for source in ("train", "test"):
            rows = parse_rows(folder / f"gsm8k_{source}.jsonl.gz", gsm8k_row)
            splits[source] = [
                dspy.Example(
                    task_id=f"gsm8k-{source}-{i:05d}", question=q, answer=a, reasoning=worked
                ).with_inputs("question")
                for i, (q, a, worked) in enumerate(rows)
            ]
        split_of = assign_splits([ex.task_id for ex in splits["train"]], POOL_FRACTIONS, salt="gsm8k")
        out = group_by_split(splits["train"], lambda ex: split_of[ex.task_id])
        out["test"] = splits["test"]
        return out


def math500_example(row: dict[str, Any]) -> dspy.Example:
    return dspy.Example(
        task_id=f"math500-{row['unique_id']}",
        question=row["problem"],
        answer=row["answer"],
        reasoning=row["solution"],
        subject=row["subject"],
        level=f"Level {row['level']}",
    ).with_inputs("question")


def math5000_example(row: dict[str, Any]) -> dspy.Example:
    answer = last_boxed(row["solution"])
    if answer is None:
        raise ValueError("the solution has no \\boxed{...} answer")
    return dspy.Example(
        task_id=f"math-{int(row['idx']):04d}",
        question=row["problem"],
        answer=answer,
        reasoning=row["solution"],
        subject=row["type"],
        level=row["level"],
    ).with_inputs("question")


class Math500Domain(MathDomain):
    name = "math500"
    signature = CompetitionMath
    check = staticmethod(latex_equivalent)

    def _build_splits(self) -> dict[str, list[dspy.Example]]:
        folder = self.data_dir / "math"
        test = list(parse_rows(folder / "math500_test.jsonl.gz", math500_example))
        held_out = {ex.question for ex in test}
        pool = [
            ex
            for ex in parse_rows(folder / "math_test5000.jsonl.gz", math5000_example)
            if ex.question not in held_out
        ]
        split_of = assign_splits([ex.task_id for ex in pool], POOL_FRACTIONS, salt="math")
        out = group_by_split(pool, lambda ex: split_of[ex.task_id])
        out["test"] = test
        return out
