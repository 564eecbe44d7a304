"""Search QA: SQuAD-standard EM/F1, the BM25 search tool and its disk cache."""

from __future__ import annotations

import dspy
import pytest

from domains import get_domain
from domains.qa_metrics import best_score, exact_match, f1_score
from whale_dspy.errors import ConfigError


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("whale-cache")
        patch.setenv("WHALE_CACHE_DIR", str(path))
        yield path


@pytest.mark.parametrize(
    ("prediction", "gold", "em"),
    [
        ("The Denver Broncos", "Denver Broncos", 1.0),
        ("denver broncos.", "Denver Broncos", 1.0),
        ("  Denver   Broncos!", "denver broncos", 1.0),
        ("an apple", "apple", 1.0),
        ("Broncos", "Denver Broncos", 0.0),
        ("", "Denver Broncos", 0.0),
    ],
)
def test_exact_match_normalises_case_articles_punctuation(prediction, gold, em):
    assert exact_match(prediction, gold) == em


def test_f1_partial_overlap_and_empty_cases():
    assert f1_score("Broncos", "Denver Broncos") == pytest.approx(2 / 3)
    assert f1_score("the", "a") == 1.0  # both normalise to nothing
    assert f1_score("", "Denver") == 0.0
    assert f1_score("Carolina Panthers", "Denver Broncos") == 0.0


def test_any_gold_answer_counts():
    assert best_score("Santa Clara", ["Levi's Stadium", "Santa Clara, California"], "f1") == pytest.approx(
        0.8
    )
    assert best_score("Santa Clara", ["Levi's Stadium", "santa clara"]) == 1.0


def test_metric_options_and_missing_answers():
    example = get_domain("squad").load("test", limit=1)[0]
    partial = dspy.Prediction(answer=f"{example.answer} and more words")
    assert get_domain("squad").metric(example, partial) == 0.0
    assert 0.0 < get_domain("squad", score="f1").metric(example, partial) < 1.0
    assert get_domain("squad").metric(example, None) == 0.0
    with pytest.raises(ConfigError, match="em, f1"):
        get_domain("squad", score="accuracy")


@pytest.mark.parametrize("name", ["search", "squad"])
def test_bm25_finds_gold_passages(name, cache_dir):
    domain = get_domain(name)
    examples = domain.load("val", limit=10, seed=1)
    search = domain.tools(examples[0])["search"]
    hits = 0
    for example in examples:
        result = search(example.question, k=5)
        titles = example.gold_titles if name == "search" else [example.title]
        hits += any(f"[{title}]" in result for title in titles)
    assert hits >= 7
    assert list((cache_dir / "bm25").iterdir())


def test_search_tool_formats_and_bounds():
    domain = get_domain("squad")
    search = domain.tools(domain.load("train", limit=1)[0])["search"]
    one = search("Super Bowl 50 AFC champion")
    assert one.startswith("[") and "\n\n" not in one
    assert search("Super Bowl 50", k="3").count("\n\n") == 2
    assert search("the of and") == "No passages found."
    tool = dspy.Tool(search)
    assert tool.name == "search" and set(tool.args) == {"query", "k"}
