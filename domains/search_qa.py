"""Search QA: HotpotQA (multi-hop) and SQuAD v1.1 dev (single-hop) over a local BM25 corpus.

HotpotQA splits follow the bundled `split` field: RPT test (500) -> test, RPT
dev (300) -> val, and the other 668 are cut by a salted hash into train (70 %)
and search (30 %). SQuAD is split by article (60 / 10 / 10 / 20 % of the 48
articles), so no article's questions cross splits; each SQuAD task names its
article as its `task_group`, so a few-shot demo of one search task is never
shown to another of its article. The search tool always sees the whole corpus
of its dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy

from domains.base import DatasetDomain, answer_text, assign_splits, group_by_split, parse_rows
from domains.bm25_index import make_search_tool
from domains.qa_metrics import SCORERS, best_score
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import Tools
from whale_dspy.records import TASK_GROUP

HOTPOT_POOL_FRACTIONS = {"train": 0.7, "search": 0.3}
SQUAD_ARTICLE_FRACTIONS = {"train": 0.6, "search": 0.1, "val": 0.1, "test": 0.2}
_HOTPOT_SPLITS = {"test": "test", "dev": "val"}


class SearchQA(dspy.Signature):
    """Answer the question using the search tool over Wikipedia passages. Answer with a short phrase."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a short factual answer: a few words copied from the passages")


def hotpot_example(row: dict[str, Any]) -> dspy.Example:
    if not row["question"].strip() or not row["answer"].strip():
        raise ValueError("empty question or answer")
    return dspy.Example(
        task_id=f"hotpot-{row['id']}",
        question=row["question"],
        answer=row["answer"],
        answers=[row["answer"]],
        gold_titles=list(row["gold_titles"]),
        kind=row["type"],
        source_split=row["split"],
    ).with_inputs("question")


def squad_example(row: dict[str, Any]) -> dspy.Example:
    answers = list(row["answers"])
    if not row["question"].strip() or not answers:
        raise ValueError("empty question or no answers")
    return dspy.Example(
        task_id=f"squad-{row['id']}",
        question=row["question"],
        answer=answers[0],
        answers=answers,
        title=row["title"],
        passage_id=row["passage_id"],
        **{TASK_GROUP: row["title"]},
    ).with_inputs("question")


class SearchQADomain(DatasetDomain):
    """Shared by both datasets: EM (default) or F1 against any gold answer; a BM25 search tool."""

    signature = SearchQA
    corpus_file: str

    def __init__(self, data_dir: Path | str | None = None, score: str = "em") -> None:
        super().__init__(data_dir)
        if score not in SCORERS:
            raise ConfigError(f"unknown score {score!r}; valid scores are {', '.join(SCORERS)}")
        self.score = score

    @property
    def corpus_path(self) -> Path:
        return self.data_dir / "search_qa" / self.corpus_file

    def metric(self, example: dspy.Example, pred: Any, trace: Any = None) -> float:
        """The best exact match (or token F1, with score=f1) of the answer against the gold answers."""
        answer = answer_text(pred)
        return 0.0 if answer is None else best_score(answer, example.answers, self.score)

    def tools(self, example: dspy.Example) -> Tools:
        return {"search": make_search_tool(self.corpus_path)}


class HotpotQADomain(SearchQADomain):
    name = "search"
    corpus_file = "hotpotqa_corpus.jsonl.gz"

    def _build_splits(self) -> dict[str, list[dspy.Example]]:
        rows = parse_rows(self.data_dir / "search_qa" / "hotpotqa_questions.jsonl.gz", hotpot_example)
        pool = [ex.task_id for ex in rows if ex.source_split not in _HOTPOT_SPLITS]
        split_of = assign_splits(pool, HOTPOT_POOL_FRACTIONS, salt="hotpotqa")
        return group_by_split(rows, lambda ex: _HOTPOT_SPLITS.get(ex.source_split) or split_of[ex.task_id])


class SquadDomain(SearchQADomain):
    name = "squad"
    corpus_file = "squad_corpus.jsonl.gz"

    def _build_splits(self) -> dict[str, list[dspy.Example]]:
        rows = parse_rows(self.data_dir / "search_qa" / "squad_questions.jsonl.gz", squad_example)
        split_of = assign_splits([ex[TASK_GROUP] for ex in rows], SQUAD_ARTICLE_FRACTIONS, salt="squad")
        return group_by_split(rows, lambda ex: split_of[ex[TASK_GROUP]])
