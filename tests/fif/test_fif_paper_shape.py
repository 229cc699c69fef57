"""fif's paper profile end to end (runtime: DVC + Prefect + MLflow): a parsed benchmark in the
paper layout (parquet tables + PNG images, gold answers, conversation history), a tiny encoder
(a random CLIP from CLIPConfig: text tower for texts, image tower for images; or a custom-code
folder with MM-Embed's encode() API, loaded with trust_remote_code) and a fake OpenAI-compatible
reader server; it checks that the paper's metrics come out per retriever (R@k, MRR@10, tokens,
calls, $; QA EM/F1 for the generator's methods)."""
import json

import pytest

from tests.paper.harness import run_paper_shape

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]   # ~30 s each: CI is at its time limit

METHODS = ("dense", "bm25", "lilac_like", "ircot_like", "fif", "fif_no_backtrack", "fif_no_escalation",
           "always_max")


@pytest.mark.parametrize("encoder", ["clip", "mmembed"])
def test_fif_paper_profile_on_a_parsed_benchmark_tiny_encoder_and_a_fake_reader(tmp_path, benchmark, encoder,
                                                                              reader_server, request):
    folder = request.getfixturevalue(f"tiny_{encoder}")
    sets = [f"corpus.data_root={benchmark}", f"embed.embedder={folder}", "embed.max_tokens=32",
            "corpus.n_queries=6", "corpus.history_turns=2", "paper.device=cpu",
            f"paper.reader_base_url={reader_server.url}", "paper.reader_model=fake-reader",
            f"paper.cache_dir={tmp_path / 'replies'}"] + (["paper.trust_remote_code=true"] if encoder == "mmembed" else [])
    result = run_paper_shape("fif", tmp_path / "project", sets)

    assert len(result.executed) == 4 + 1                      # one corpus (no dev seed), then evaluate
    corpus = result.metrics("fif", "build_corpus", "0")
    assert corpus["n_queries"] == 6 and corpus["n_qrels"] == 7 and corpus["n_links_dropped"] == 1
    assert corpus["n_queries_with_answers"] == 6
    embed = result.metrics("fif", "embed", "0")
    assert embed["dim"] == 16 and embed["n_image_nodes"] == corpus["n_images"] > 0
    retrieve = result.metrics("fif", "retrieve", "0")
    assert retrieve["endpoint_calls"] > 0 and retrieve["bad_replies"] == 0
    prompts = [r["messages"][-1]["content"] for r in reader_server.requests]
    for role in ("Split the question", "Does one of the candidates", "Pick the candidate", "Order the components",
                 "Answer the question"):
        assert any(p.startswith(role) for p in prompts), role
    assert any("(earlier in the conversation: " in p for p in prompts)       # MMCoQA-style history reached the reader
    assert all(r["model"] == "fake-reader" and r["reasoning_effort"] == "low" for r in reader_server.requests)

    metrics = result.metrics("fif", "evaluate")
    for m in METHODS:
        assert 0.0 <= metrics[f"{m}/MRR@10"] <= metrics[f"{m}/R@10"] <= 100.0
        assert metrics[f"{m}/tokens"] == pytest.approx(metrics[f"{m}/tokens_in"] + metrics[f"{m}/tokens_out"])
    assert metrics["dense/calls"] == 0 and metrics["fif/calls"] > 0 and metrics["fif/usd"] > 0
    assert {"G1_pass", "G2_pass", "G3_pass"} <= set(metrics)
    for m in ("fif", "ircot_like"):                                         # the QA generator's methods (default)
        assert 0.0 <= metrics[f"{m}/EM"] <= metrics[f"{m}/F1"] <= 100.0 and metrics[f"{m}/qa_calls"] == 1
    assert "dense/EM" not in metrics
    results = json.loads((result.out("fif", "evaluate") / "results.json").read_text())
    assert {"R@1", "R@2", "R@5", "R@10", "MRR@10", "latency_s"} <= set(results["mean"]["fif"])
    assert results["dev"] == []
