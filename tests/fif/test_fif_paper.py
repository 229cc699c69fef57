"""fif's paper path without the runtime (fast): preflight names the key in one line, the
parsed-benchmark reader validates and renumbers, the endpoint reader parses replies and counts
tokens (resumes re-read the cache), and the CLIP encoder embeds texts and images in one space."""
from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from components.common.readers import DatasetError
from components.fif.paper import read_local_corpus
from flows.runtime.registry import get
from flows.runtime.runner import validate_config
from tests.fif.paper_files import COMP0, write_benchmark


def _paper(tmp_path, **sections):
    return validate_config(get("fif"), "paper", sections)


def _one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_paper_profile_without_a_corpus_fails_naming_the_key(tmp_path):
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path)
    message = _one_line_error(err)
    assert "corpus.data_root" in message and "is not set" in message and "components.parquet" in message


def test_a_table_without_its_column_is_named(tmp_path, benchmark):
    root = tmp_path / "bench"
    shutil.copytree(benchmark, root)
    table = pq.read_table(root / "components.parquet").drop(["image"])
    pq.write_table(table, root / "components.parquet")
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, corpus={"data_root": str(root)})
    message = _one_line_error(err)
    assert "corpus.data_root" in message and "components.parquet" in message and "'image'" in message


def _checkpoint_files(folder):
    """What preflight checks of an encoder folder (config, weights, tokenizer), without a model."""
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "clip"}')
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_missing_encoder_and_endpoint_are_named(tmp_path, benchmark):
    tiny_clip = _checkpoint_files(tmp_path / "clip")
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, corpus={"data_root": str(benchmark)})
    assert "embed.embedder" in _one_line_error(err)
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, corpus={"data_root": str(benchmark)}, embed={"embedder": str(tmp_path / "nope")})
    assert "embed.embedder" in _one_line_error(err) and "is not a folder" in str(err.value)
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, corpus={"data_root": str(benchmark)}, embed={"embedder": str(tiny_clip)})
    assert "paper.reader_base_url" in _one_line_error(err)
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, corpus={"data_root": str(benchmark)}, embed={"embedder": str(tiny_clip)},
               paper={"reader_base_url": "http://127.0.0.1:1/v1"})
    assert "paper.reader_model" in _one_line_error(err)
    with pytest.raises(SystemExit) as err:  # the offline reader would silently answer nothing
        _paper(tmp_path, corpus={"data_root": str(benchmark)}, embed={"embedder": str(tiny_clip)},
               retrieve={"reader": "reader"})
    assert "retrieve.reader" in _one_line_error(err)
    cfg = _paper(tmp_path, corpus={"data_root": str(benchmark)}, embed={"embedder": str(tiny_clip)},
                 paper={"reader_base_url": "http://127.0.0.1:1/v1", "reader_model": "m", "device": "cpu"})
    assert cfg.seeds == [0] and cfg.dev_seeds == [] and cfg.retrieve.reader == "openai"


def test_small_profile_needs_no_paper_paths():
    cfg = validate_config(get("fif"), "small", {})
    assert cfg.corpus.source == "synthwiki" and cfg.retrieve.reader == "reader"


def test_local_corpus_is_validated_and_renumbered(tmp_path, benchmark):
    tables, counts = read_local_corpus(benchmark, n_queries=5)
    comps = tables["components"]
    assert comps["comp_id"] == list(range(len(comps["comp_id"]))) and counts["n_links_dropped"] == 1
    assert max(d for ls in comps["links"] for d in ls) < counts["n_docs"]
    assert all(p.endswith(".png") for p, k in zip(comps["image"], comps["kind"]) if k == "image")
    assert counts["n_queries"] == 5 and counts["n_qrels"] == 6       # q0 has two relevant components
    assert set(tables["subcomponents"]["comp_id"]) <= set(comps["comp_id"])
    pq.write_table(pq.read_table(benchmark / "qrels.parquet").slice(0, 1).set_column(
        1, "comp_id", [[COMP0 - 1]]), tmp_path / "qrels.parquet")
    bad = tmp_path / "bad"
    shutil.copytree(benchmark, bad)
    shutil.copy(tmp_path / "qrels.parquet", bad / "qrels.parquet")
    with pytest.raises(DatasetError, match="qrels.parquet: comp_id 4999"):
        read_local_corpus(bad)


def test_llm_reader_parses_replies_counts_usage_and_resumes_from_its_cache(tmp_path, reader_server):
    from components.fif.config import Paper
    from components.fif.llm_reader import make_llm_reader
    from components.fif.reader import Candidate

    paper = Paper(reader_base_url=reader_server.url, reader_model="fake", cache_dir=str(tmp_path / "cache"))
    reader = make_llm_reader(paper)
    subs = reader.plan("What is the birth year of the founder of Kalo Labs?")
    assert subs == ["Who founded Kalo Labs?", "What is the birth year of #1?"]
    cands = [Candidate("Kalo Labs is a mining company.", []),
             Candidate("Kalo Labs was founded by Remi Tor.", ["REMI TOR", "Vo City"])]
    j = reader.judge("Who founded Kalo Labs?", cands, "select")
    assert j.answerable and j.index == 1 and j.answer == "REMI TOR"  # matched to the link's own spelling
    assert reader.calls == reader.endpoint_calls == 2 and reader.tokens_out == 14
    assert reader.tokens == reader.tokens_in + reader.tokens_out and reader.usd > 0
    assert reader_server.requests[0]["reasoning_effort" if paper.reasoning_effort else "temperature"] == 0.0
    again = make_llm_reader(paper)
    again.plan("What is the birth year of the founder of Kalo Labs?")
    again.judge("Who founded Kalo Labs?", cands, "select")
    assert again.endpoint_calls == 0 and (again.calls, again.tokens) == (reader.calls, reader.tokens)
    again.judge("Who founded Kalo Labs?", cands, "select", attempt=1)   # a re-ask is a fresh sample
    assert again.endpoint_calls == 1 and reader_server.requests[-1]["temperature"] > 0


def test_llm_reader_treats_a_reply_without_json_as_unanswerable():
    from components.fif.llm_reader import LLMReader
    from components.fif.reader import Candidate

    class Garbage:
        model = "m"

        def chat_with_usage(self, messages, **body):
            return "I think the answer is probably the second one.", {}

    reader = LLMReader(Garbage())
    assert not reader.judge("Who founded X?", [Candidate("X was founded by Y.", ["Y"])]).answerable
    assert reader.plan("Who founded X?") == ["Who founded X?"]
    assert reader.calls == 2 and reader.bad_replies == 2 and reader.tokens_in > 0   # no usage: estimated


def test_clip_encoder_embeds_texts_and_images_in_one_space(benchmark, tiny_clip):
    from components.fif.config import Embed, Paper
    from components.fif.embed import HFEncoder, embed_nodes, make_encoder

    enc = make_encoder(Embed(embedder=str(tiny_clip), max_tokens=32, batch=4), Paper(device="cpu"))
    assert isinstance(enc, HFEncoder) and enc.clip
    images = sorted(str(p) for p in (benchmark / "images").glob("*.png"))[:3]
    nodes = {"text": ["a city", "a statue", "a city", "x"], "image": ["", images[0], "", images[1]]}
    emb = embed_nodes(enc, nodes)
    assert emb.shape == (4, 16) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert np.allclose(emb[0], emb[2]) and not np.allclose(emb[1], enc.encode(["a statue"])[0])
    assert len(enc.cache) == 3                                    # memoised by text


def test_every_relevant_component_of_a_query_counts():
    """A benchmark query may have several relevant components (one qrels row each); the old
    evaluator kept only the last row, so a hit on the first one scored 0."""
    from components.fif.evaluate import qrels_by_query, score_runs

    qrels = qrels_by_query({"qid": ["q0", "q0", "q1"], "comp_id": [4, 9, 2]})
    assert qrels == {"q0": {4, 9}, "q1": {2}}
    runs = {"method": ["fif", "fif"], "qid": ["q0", "q1"], "ranked": [[4, 1], [7, 2]], "calls": [1, 1],
            "tokens": [5, 5], "latency_s": [0.0, 0.0]}
    scores = score_runs(runs, qrels)["fif"]
    assert scores["R@1"] == 50.0 and scores["R@2"] == 100.0 and scores["MRR@10"] == 75.0


def test_mmembed_folder_runs_its_own_code_only_with_trust_remote_code(tmp_path, benchmark, tiny_mmembed):
    ready = {"corpus": {"data_root": str(benchmark)}, "embed": {"embedder": str(tiny_mmembed)},
             "paper": {"reader_base_url": "http://127.0.0.1:1/v1", "reader_model": "m", "device": "cpu"}}
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, **ready)
    assert "paper.trust_remote_code" in _one_line_error(err) and "auto_map" in str(err.value)
    ready["paper"]["trust_remote_code"] = True
    assert _paper(tmp_path, **ready).paper.trust_remote_code


def test_mmembed_encoder_uses_its_encode_api_queries_with_the_instruction(benchmark, tiny_mmembed):
    from components.fif.config import Embed, Paper
    from components.fif.embed import MMEmbedEncoder, embed_nodes, make_encoder

    enc = make_encoder(Embed(embedder=str(tiny_mmembed), max_tokens=64, batch=2),
                       Paper(device="cpu", trust_remote_code=True))
    assert isinstance(enc, MMEmbedEncoder)
    image = sorted(str(p) for p in (benchmark / "images").glob("*.png"))[0]
    nodes = {"text": ["Image of a statue.", "Image of a statue.", "a city"], "image": [image, "", ""]}
    emb = embed_nodes(enc, nodes)
    assert emb.shape == (3, 16) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert not np.allclose(emb[0], emb[1])               # image + caption is one input, not the caption alone
    q = enc.encode_queries(["a city"])[0]
    assert not np.allclose(q, emb[2])                     # the query side adds the instruction
    direct = enc.model.encode([{"txt": "a city"}], is_query=True, instruction=Paper().query_instruction,
                              max_length=64)["hidden_states"][0]
    assert np.allclose(q, (direct / direct.norm()).detach().numpy(), atol=1e-6)
    assert set(enc.cache) == {"p|Image of a statue.", "p|a city", "q|a city"}


def test_retrievers_encode_subqueries_on_the_query_side(tiny):
    """An asymmetric encoder (MM-Embed) embeds queries with its instruction: run_all must hand
    the retrievers encode_queries, not the corpus-side encode."""
    from components.fif.graph_index import GraphIndex
    from components.fif.retrieve import run_all
    from tests.fif.conftest import bow_encode

    class Asymmetric:
        cache: dict = {}
        queries: list = []

        def encode(self, texts):
            raise AssertionError("corpus-side encode used for a query")

        def encode_queries(self, texts):
            self.queries += list(texts)
            return bow_encode(list(texts))

    index = GraphIndex.load(tiny["corpus"], tiny["graph"], tiny["embed"])
    p = tiny["cfg"].retrieve.model_copy(update={"methods": ["dense"], "robustness_errors": []})
    enc = Asymmetric()
    cols = run_all(index, enc, {"qid": ["q0"], "text": ["Who founded X?"]}, p, 0)
    assert enc.queries == ["Who founded X?"] and len(cols["ranked"][0]) == p.top_k


def test_queries_in_parallel_give_the_serial_runs(tiny, reader_server):
    """paper.query_workers > 1: a method's queries run in threads, one endpoint reader each;
    with a deterministic endpoint every row (ranking, trace, calls, tokens, answer) equals the
    serial run's, in query order."""
    from components.fif.config import Paper
    from components.fif.graph_index import GraphIndex
    from components.fif.llm_reader import make_llm_reader
    from components.fif.retrieve import run_all
    from tests.fif.conftest import BowEncoder

    index = GraphIndex.load(tiny["corpus"], tiny["graph"], tiny["embed"])
    queries = pq.read_table(tiny["corpus"] / "queries.parquet").to_pydict()
    p = tiny["cfg"].retrieve.model_copy(update={"methods": ["fif", "ircot_like"], "robustness_errors": []})
    paper = Paper(reader_base_url=reader_server.url, reader_model="fake")
    runs = [run_all(index, BowEncoder(), queries, p, 0, make_reader=lambda _eps: make_llm_reader(paper),
                    qa_methods=("fif",), workers=w) for w in (1, 4)]
    for key in runs[0]:
        if key != "latency_s":
            assert runs[0][key] == runs[1][key], key
    assert runs[0]["qid"][:len(queries["qid"])] == queries["qid"] and any(runs[1]["prediction"])


def test_parallel_queries_need_the_endpoint_reader(tmp_path):
    with pytest.raises(SystemExit) as err:
        validate_config(get("fif"), "small", {"paper": {"query_workers": 2}})
    assert "paper.query_workers" in _one_line_error(err)


def test_history_turns_need_a_history_column(tmp_path, benchmark):
    root = tmp_path / "bench"
    shutil.copytree(benchmark, root)
    pq.write_table(pq.read_table(root / "queries.parquet").drop(["history"]), root / "queries.parquet")
    with pytest.raises(SystemExit) as err:
        _paper(tmp_path, corpus={"data_root": str(root), "history_turns": 2})
    assert "corpus.history_turns" in _one_line_error(err)
