"""SQuAD-standard answer scoring: normalise, then exact match or token F1 (best over golds).

The normalisation is the official SQuAD v1.1 evaluation script's (lower case,
drop punctuation and the articles a/an/the, collapse whitespace), so scores are
comparable with published numbers on SQuAD and HotpotQA.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token-overlap F1; when either side normalises to nothing, 1.0 only if both do."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


SCORERS = {"em": exact_match, "f1": f1_score}


def best_score(prediction: str, golds: Iterable[str], score: str = "em") -> float:
    """The best score of the prediction against any gold answer."""
    scorer = SCORERS[score]
    return max((scorer(prediction, gold) for gold in golds), default=0.0)
