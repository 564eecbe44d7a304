"""Every domain: registry, split disjointness and determinism, example shape, malformed rows."""

from __future__ import annotations

import gzip

import pytest

from domains import DOMAIN_NAMES, get_domain
from domains.math_problems import GSM8KDomain
from whale_dspy.errors import ConfigError
from whale_dspy.protocols import SPLITS, Domain
from whale_dspy.records import TASK_GROUP


@pytest.fixture(scope="module", params=DOMAIN_NAMES)
def domain(request):
    return get_domain(request.param)


def test_registry_rejects_unknown_names_and_options():
    with pytest.raises(ConfigError, match="chess, math, math500, search, squad"):
        get_domain("go")
    with pytest.raises(ConfigError, match="bad options"):
        get_domain("math", max_rating=3)


def test_a_domain_spec_carries_constructor_options():
    from domains import domain_entry, parse_domain_spec

    assert parse_domain_spec("search") == ("search", {})
    assert parse_domain_spec("chess:max_rating=900,themes=mateIn1") == (
        "chess",
        {"max_rating": 900, "themes": "mateIn1"},
    )
    squad = get_domain("squad:score=f1")
    assert squad.score == "f1" and get_domain("squad:score=f1", score="em").score == "em"
    assert domain_entry("squad:score=f1") == domain_entry("squad")
    bad_specs = {"search:score": "key=value", "search:score=bleu": "unknown score", "math:x=1": "bad options"}
    for bad, message in bad_specs.items():
        with pytest.raises(ConfigError, match=message):
            get_domain(bad)


def test_splits_are_disjoint_unique_and_non_empty(domain):
    assert isinstance(domain, Domain)
    ids = {split: [ex.task_id for ex in domain.load(split)] for split in SPLITS}
    for split, split_ids in ids.items():
        assert split_ids and len(split_ids) == len(set(split_ids)), split
    all_ids = [task_id for split_ids in ids.values() for task_id in split_ids]
    assert len(all_ids) == len(set(all_ids))


def test_examples_have_signature_inputs_and_separate_labels(domain):
    inputs = set(domain.signature.input_fields)
    assert list(domain.signature.output_fields) == ["answer"]
    for example in domain.load("train", limit=5):
        assert set(example.inputs().keys()) == inputs
        assert "answer" in example.labels() and "task_id" in example.labels()


def test_subsamples_are_deterministic_shuffled_prefixes(domain):
    fresh = get_domain(domain.name)
    first = [ex.task_id for ex in domain.load("search", limit=20, seed=7)]
    assert first == [ex.task_id for ex in fresh.load("search", limit=20, seed=7)]
    assert first[:5] == [ex.task_id for ex in domain.load("search", limit=5, seed=7)]
    assert first != [ex.task_id for ex in domain.load("search", limit=20, seed=8)]
    with pytest.raises(ConfigError, match="train, search, val, test"):
        domain.load("dev")


def test_squad_splits_share_no_article_and_each_task_names_its_article_as_its_group():
    domain = get_domain("squad")
    titles = [{ex.title for ex in domain.load(split)} for split in SPLITS]
    assert sum(len(t) for t in titles) == len(set().union(*titles)) == 48
    assert all(ex[TASK_GROUP] == ex.title for split in SPLITS for ex in domain.load(split))
    assert TASK_GROUP not in domain.load("search", limit=1)[0].inputs()


def test_chess_filters_never_move_a_puzzle_to_another_split():
    full, easy = get_domain("chess", max_rating=None), get_domain("chess", themes="mateIn1")
    for split in SPLITS:
        assert {ex.task_id for ex in easy.load(split)} <= {ex.task_id for ex in full.load(split)}


def _write_gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text)


@pytest.mark.parametrize(
    "bad_line", ['{"question": "q2", "answer": "no final number"}', "{not json", '["a list"]']
)
def test_malformed_rows_name_file_and_line(tmp_path, bad_line):
    good = '{"question": "q1", "answer": "1 + 1 = 2\\n#### 2"}'
    _write_gz(tmp_path / "math" / "gsm8k_train.jsonl.gz", f"{good}\n{bad_line}\n")
    _write_gz(tmp_path / "math" / "gsm8k_test.jsonl.gz", f"{good}\n")
    with pytest.raises(ConfigError, match=r"gsm8k_train\.jsonl\.gz:2"):
        GSM8KDomain(data_dir=tmp_path).load("train")


def test_malformed_chess_row_names_file_and_line(tmp_path):
    header = "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags\n"
    good = "a,6k1/6pp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1a8,400,0,0,0,mateIn1,,\n"
    odd = "b,6k1/6pp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8,400,0,0,0,mateIn1,,\n"
    _write_gz(tmp_path / "chess" / "lichess_puzzles_train.csv.gz", header + good + odd)
    _write_gz(tmp_path / "chess" / "lichess_puzzles_test.csv.gz", header + good)
    with pytest.raises(ConfigError, match=r"lichess_puzzles_train\.csv\.gz:3"):
        get_domain("chess", data_dir=tmp_path).load("test")


def test_gsm8k_examples_carry_their_worked_solution_as_reasoning_without_calculator_notes(tmp_path):
    row = '{"question": "q1", "answer": "She sold 48/2 = <<48/2=24>>24 clips.\\n#### 24"}'
    _write_gz(tmp_path / "math" / "gsm8k_train.jsonl.gz", f"{row}\n")
    _write_gz(tmp_path / "math" / "gsm8k_test.jsonl.gz", f"{row}\n")
    (example,) = GSM8KDomain(data_dir=tmp_path).load("test")
    assert example.reasoning == "She sold 48/2 = 24 clips." and example.answer == "24"
    assert example.labels().reasoning == example.reasoning  # a label: what a labeled demo shows
