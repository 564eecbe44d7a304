"""Math verifiers: GSM8K number extraction and math-verify equivalence (also in worker threads)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from domains import get_domain
from domains.math_verifiers import extract_number, last_boxed, latex_equivalent, numbers_match


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("1234", "$1,234.00"),
        ("1234", "1234"),
        ("18", "The answer is 18."),
        ("18", "18 eggs"),
        ("18", "She sells 16 - 3 - 4 = 9 eggs and makes 9 * 2 = 18.\n#### 18"),
        ("0.75", "3/4"),
        ("0.75", "\\frac{3}{4}"),
        ("-5", "The temperature fell to -5 degrees"),
        ("12", "ages 10-12"),
        ("7", "answer: 7 (since 3 + 4)"),
    ],
)
def test_gsm8k_numeric_formats_match(gold, answer):
    assert numbers_match(gold, answer)


@pytest.mark.parametrize("answer", ["19", "-18", "", None, "no number here", "18/0"])
def test_gsm8k_wrong_or_missing_numbers_fail(answer):
    assert not numbers_match("18", answer)


def test_extract_number_prefers_the_marked_answer():
    assert extract_number("12 apples and 3 pears. The answer is 15, not 12") == 15
    assert extract_number("#### 1,000,000") == 1_000_000


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "1/2"),
        ("\\frac{1}{2}", "$\\boxed{\\frac12}$"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("x^2+1", "1+x^2"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "$(3,\\frac{\\pi}{2})$"),
    ],
)
def test_math_equivalences(gold, answer):
    assert latex_equivalent(gold, answer)


@pytest.mark.parametrize("answer", ["0.6", "\\frac{1}{3}", "", None, "\\frac{"])
def test_math_non_equivalences(answer):
    assert not latex_equivalent("\\frac{1}{2}", answer)


def test_math_verify_works_in_worker_threads():
    cases = [("\\frac{1}{2}", "0.5", True), ("2\\sqrt{2}", "\\sqrt{8}", True), ("3", "4", False)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda case: latex_equivalent(case[0], case[1]), cases))
    assert results == [expected for _, _, expected in cases]


def test_last_boxed_matches_nested_braces():
    assert last_boxed("so $\\boxed{1}$ then \\boxed{\\frac{a}{b}}.") == "\\frac{a}{b}"
    assert last_boxed("\\fbox{x}") == "x" and last_boxed("none") is None


@pytest.mark.parametrize("name", ["math", "math500"])
def test_metric_scores_gold_one_and_junk_zero(name):
    domain = get_domain(name)
    example = domain.load("test", limit=1, seed=3)[0]
    assert domain.metric(example, dspy.Prediction(answer=example.answer)) == 1.0
    assert domain.metric(example, dspy.Prediction(answer="no idea")) == 0.0
    assert domain.metric(example, None) == 0.0
    assert domain.metric(example, dspy.Prediction(reasoning="...")) == 0.0
    assert domain.tools(example) == {}


def test_math500_test_is_the_500_and_the_pool_excludes_them():
    domain = get_domain("math500")
    test = domain.load("test")
    pool = [ex for split in ("train", "search", "val") for ex in domain.load(split)]
    assert len(test) == 500 and len(pool) == 4500
    assert not {ex.question for ex in test} & {ex.question for ex in pool}
