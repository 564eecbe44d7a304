"""Answer checkers for math: the final number for GSM8K, math-verify for MATH.

Tiny models rarely answer in format, so the GSM8K extractor accepts the usual
shapes ("#### 18", "The answer is 18.", "$1,234.00", "18 eggs", "3/4",
"\\frac{3}{4}", "-5") and compares numbers exactly. MATH answers are LaTeX, so
they go to math-verify; its timeouts use SIGALRM, which only works in the main
thread, so worker threads (parallel evaluation) run it without a timeout.
"""

from __future__ import annotations

import logging
import re
import threading
from fractions import Fraction

logger = logging.getLogger(__name__)

MATH_VERIFY_TIMEOUT_S = 5
"""Parse/verify timeout in the main thread (SIGALRM cannot be used elsewhere)."""

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}")
_NUMBER = re.compile(r"(?:(?<![\w)])-)?\d+(?:\.\d+)?(?:/\d+)?")  # a minus sign only when not a hyphen
_ANCHORS = (re.compile(r"####"), re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE), re.compile(r"\\boxed\{"))


def extract_number(text: str | None) -> Fraction | None:
    """The final numeric answer in free text: after '####', 'answer is' or \\boxed, else the last number."""
    if not text:
        return None
    clean = _LATEX_FRAC.sub(r"\1/\2", _THOUSANDS.sub("", text)).replace("$", "")
    for anchor in _ANCHORS:
        hits = list(anchor.finditer(clean))
        if hits and (found := _NUMBER.search(clean, hits[-1].end())):
            return _to_fraction(found.group())
    numbers = _NUMBER.findall(clean)
    return _to_fraction(numbers[-1]) if numbers else None


def _to_fraction(token: str) -> Fraction | None:
    try:
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_match(gold: str, answer: str | None) -> bool:
    """GSM8K correctness: the answer's final number equals the gold number."""
    expected, got = extract_number(gold), extract_number(answer)
    return expected is not None and got is not None and expected == got


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} or \\fbox{...} (braces matched), or None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    begin = text.index("{", start) + 1
    depth = 1
    for pos in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[pos], 0)
        if depth == 0:
            return text[begin:pos]
    return None


def latex_equivalent(gold: str, answer: str | None) -> bool:
    """MATH correctness via math-verify; never raises (a failure to parse is a wrong answer)."""
    if not answer or not answer.strip():
        return False
    from math_verify import parse, verify  # imported here: it pulls in sympy

    timeout = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = parse(f"${gold}$", parsing_timeout=timeout)
        wrapped = answer if ("$" in answer or "\\boxed" in answer) else f"${answer}$"
        got = parse(wrapped, parsing_timeout=timeout) or parse(answer, parsing_timeout=timeout)
        return bool(gold_parsed and got and verify(gold_parsed, got, timeout_seconds=timeout))
    except Exception:  # math-verify can fail in sympy on odd input; that answer is simply wrong
        logger.debug("math-verify failed on %r vs %r", answer, gold, exc_info=True)
        return False
