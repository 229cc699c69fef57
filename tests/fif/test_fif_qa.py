"""QA EM / F1 (SQuAD-style normalisation) on known cases, gold answers and conversation history
read from a parsed benchmark, and the generator's answers scored per method."""
from __future__ import annotations

import pytest

from components.fif.qa import exact_match, f1, normalize_answer, qa_scores, token_f1


def test_normalisation_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("An apple, a pear") == "apple pear"
    assert normalize_answer("1,000") == "1000"
    assert normalize_answer("theatre") == "theatre"          # "the" only as a word


def test_exact_match_takes_the_best_gold_answer():
    assert exact_match("Denver Broncos", ["The Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("the cat", ["Cat"]) == 1.0
    assert exact_match("a cat sat", ["cat"]) == 0.0
    assert exact_match("", [""]) == 1.0 and exact_match("x", []) == 0.0


def test_token_f1_known_values():
    # pred "cat sat on mat" vs gold "cat on mat": precision 3/4, recall 1 -> F1 6/7
    assert token_f1("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
    assert token_f1("Paris", "London") == 0.0
    assert token_f1("the", "a") == 1.0                     # both empty after normalisation
    assert token_f1("the", "Paris") == 0.0
    assert token_f1("red red blue", "red blue blue") == pytest.approx(2 / 3)   # counts clip: 2 common of 3
    assert f1("in 1987", ["1987", "the year 1987"]) == pytest.approx(2 / 3)


def test_qa_scores_only_for_methods_that_generated():
    runs = {"method": ["fif", "fif", "dense"], "qid": ["q0", "q1", "q0"], "prediction": ["Quin Gor", "1950", ""],
            "qa_calls": [1, 1, 0], "qa_tokens": [30, 40, 0]}
    scores = qa_scores(runs, {"q0": ["Quin Gor"], "q1": ["in 1950", "1951"]})
    assert set(scores) == {"fif"}
    assert scores["fif"]["EM"] == 50.0 and scores["fif"]["F1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert scores["fif"]["qa_tokens"] == 35.0
    assert qa_scores({"method": [], "qid": []}, {}) == {}


def test_benchmark_answers_and_history_are_read(benchmark):
    from components.fif.paper import read_local_corpus

    plain, counts = read_local_corpus(benchmark, n_queries=4)
    assert counts["n_queries_with_answers"] == 4 and len(plain["answers"]["qid"]) == 5   # q0 has two golds
    talk, _ = read_local_corpus(benchmark, n_queries=4, history_turns=1)
    q = plain["queries"]["text"]
    assert talk["queries"]["text"][0] == q[0]                                   # no earlier turn
    assert talk["queries"]["text"][2] == f"{q[2]} (earlier in the conversation: {q[1]})"


def test_generator_answers_from_the_top_components(reader_server):
    from components.fif.config import Paper
    from components.fif.llm_reader import make_llm_reader

    reader = make_llm_reader(Paper(reader_base_url=reader_server.url, reader_model="fake"))
    top = ["Infobox of Kalo Labs. founded: 1901.", "Infobox of Remi Tor. born: 1950. occupation: poet."]
    assert reader.answer("What is the birth year of the founder of Kalo Labs?", top) == "1950"
    assert reader.calls == 1 and reader_server.requests[-1]["messages"][-1]["content"].startswith("Answer")
