"""fif — "Failure is Feedback: History-Aware Backtracking for Agentic Traversal in Multimodal
Graphs" (ICML 2026). Small: SynthWiki corpus, MiniLM embeddings, deterministic offline reader.
Paper: a parsed benchmark (MultimodalQA / MMCoQA / WebQA) from a local folder, a CLIP or text
encoder from a local folder, every reasoning role through an OpenAI-compatible endpoint."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.fif"
# the encoder (CLIP / a multimodal embedder) wants a GPU at paper scale; none in smoke/small
ENCODER = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="fif",
    title="Failure is Feedback: history-aware backtracking and cost-aware escalation",
    paper="https://arxiv.org/abs/2602.03432",
    config=f"{M}.config:FifConfig",
    stages=(
        Stage("build_corpus", f"{M}.corpus:build_corpus_stage", params=("corpus", "seeds", "dev_seeds"),
              fan_out={"seed": "corpus_seeds"},
              description="SynthWiki pages, multi-hop queries, qrels (paper: a parsed benchmark, validated)"),
        Stage("build_graph", f"{M}.graph:build_graph_stage", params=("seeds", "dev_seeds"), deps=("build_corpus",),
              fan_out={"seed": "corpus_seeds"}, description="Layered graph V0/V1/V2 and navigational edges"),
        Stage("embed", f"{M}.embed:embed_stage", params=("embed", "paper", "seeds", "dev_seeds"),
              deps=("build_graph",), fan_out={"seed": "corpus_seeds"}, resources=ENCODER,
              description="Embeddings of every node: all-MiniLM-L6-v2 (paper: CLIP text/image towers from a folder)"),
        Stage("retrieve", f"{M}.retrieve:retrieve_stage", params=("embed", "retrieve", "paper", "seeds", "dev_seeds"),
              deps=("build_corpus", "build_graph", "embed"), fan_out={"seed": "corpus_seeds"},
              resources=ENCODER,
              description="dense, BM25, LILaC-like, IRCoT-like, FiF and ablations (paper: reader via an endpoint)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("seeds", "dev_seeds"),
              deps=("build_corpus", "retrieve"), description="R@k, MRR@10, cost; CLAIMS criteria"),
    ),
)
