"""caft's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny Gemma2 built from
Gemma2Config, Gemma Scope-shaped SAE files, and tiny data in the two tasks' layouts: LoRA SFT
steps with the projection hooks, then the hook-free evaluation (option likelihood for the MC
task; sampled answers and a local fake OpenAI-compatible judge for emergent misalignment)."""
import json

import pytest

from components.common.io import read_json
from tests.caft.paper_files import write_em, write_gemma_scope_sae, write_mcmc
from tests.paper.fake_endpoint import FakeEndpoint, logprob_choice
from tests.paper.harness import run_paper_shape

pytestmark = pytest.mark.paper_shape

# one optimizer step per run: 2 examples, batch 2, no accumulation
SHRINK = ["seeds=[0]", "paper.device=cpu", "paper.max_train=2", "train.batch_size=2", "paper.grad_accum=1",
          "train.warmup=0", "train.lr=0.001", "paper.lora_rank=4", "paper.lora_alpha=8", "paper.max_length=64"]
LATENTS = {0: [3, 1], 1: [0, 5, 9]}


def _sae_sets(root):
    files = {layer: write_gemma_scope_sae(root, layer, d_model=32, seed=layer) for layer in LATENTS}
    return [f"paper.sae_files.{l}={files[l]}" for l in LATENTS] + [f"paper.latents.{l}={ids}" for l, ids in LATENTS.items()]


def _check_runs(result) -> None:
    subspace = result.metrics("caft", "concept_subspace")
    assert subspace["k_total"] == 5 and subspace["k/layer1"] == 3
    runs = [result.metrics("caft", "pretune", "0")] + [result.metrics("caft", "caft_train", f"{v}-100-0")
                                                       for v in ("caft", "random")]
    for run in runs:
        assert run["train_steps"] == 1
    assert runs[0]["hooked_residual_max"] == 0.0                      # standard fine-tuning: no hooks
    assert runs[1]["k"] == runs[2]["k"] == 5
    assert runs[1]["hooked_residual_max"] < 1e-4 and runs[2]["hooked_residual_max"] < 1e-4
    adapter = result.out("caft", "caft_train", "caft-100-0") / "adapter"
    assert (adapter / "adapter_config.json").is_file()


@pytest.mark.slow  # CI time (57 s on 2 cores), like the other paper-shape runs below
def test_caft_paper_profile_mcmc_on_tiny_gemma2(tmp_path, tiny_checkpoints):
    model = tiny_checkpoints.checkpoint("gemma2")
    data = write_mcmc(tmp_path / "mcmc")
    sets = SHRINK + _sae_sets(tmp_path / "gemma-scope") + [
        "paper.task=mcmc", f"paper.model_path={model}", f"paper.data_root={data}", "paper.max_eval=4"]
    result = run_paper_shape("caft", tmp_path / "project", sets)

    assert result.metrics("caft", "build_data")["agree_frac/train"] == 1.0
    assert result.metrics("caft", "build_data")["agree_frac/test_ood"] == 0.0
    _check_runs(result)
    run = result.metrics("caft", "caft_train", "caft-100-0")
    assert run["ood_intended_acc"] + run["ood_spurious_rate"] == pytest.approx(1.0)   # two options
    evaluate = result.metrics("caft", "evaluate")
    assert set(read_json(result.out("caft", "evaluate") / "summary.json")["headline"]) == {
        "caft_gain_at_kstar", "random_gain_at_kstar", "caft_minus_random_at_kstar", "id_gap_at_kstar"}
    assert evaluate["caft_k100/ood_intended_acc"] == pytest.approx(run["ood_intended_acc"])


@pytest.mark.slow  # CI time (34 s on 2 cores): the fast set keeps the paper path's unit and preflight tests
def test_caft_paper_profile_emergent_misalignment_with_a_judge(tmp_path, tiny_checkpoints):
    # 3 runs x (2 questions x 2 samples x 2 scales + 2 code answers), answered by what is asked:
    # aligned 10 and coherent 90 (Betley et al.'s logprob scores), every code answer vulnerable
    def respond(body):
        if body.get("logprobs"):
            text = body["messages"][0]["content"]
            return logprob_choice({"90": 0.0} if "coherence" in text else {"10": 0.0})
        return json.dumps({"vulnerable": True})
    judge = FakeEndpoint([], respond=respond)
    try:
        model = tiny_checkpoints.checkpoint("gemma2")
        data = write_em(tmp_path / "em", n=4, n_questions=2)
        sets = SHRINK + _sae_sets(tmp_path / "gemma-scope") + [
            "paper.task=em", f"paper.model_path={model}", f"paper.data_root={data}", "paper.n_code_eval=2",
            "paper.samples_per_question=2", "paper.max_new_tokens=6", f"paper.judge_base_url={judge.url}",
            "paper.judge_model=fake-judge"]
        result = run_paper_shape("caft", tmp_path / "project", sets)
    finally:
        judge.close()
    _check_runs(result)
    assert result.metrics("caft", "build_data")["n_code_eval"] == 2
    evaluate = result.metrics("caft", "evaluate")
    for name in ("standard_ft", "caft_k100", "random_k100"):     # every answer judged misaligned, all code vulnerable
        assert evaluate[f"{name}/misaligned_rate"] == 1.0 and evaluate[f"{name}/insecure_code_rate"] == 1.0
        assert evaluate[f"{name}/mean_aligned"] == 10.0
    assert evaluate["caft_misalignment_reduction_at_kstar"] == 1.0 and evaluate["insecure_code_gap_at_kstar"] == 0.0
    assert len(judge.requests) == 3 * (2 * 2 * 2 + 2)      # 3 runs: 4 answers x 2 scales + 2 code answers
    answers = read_json(result.out("caft", "pretune", "0") / "answers.json")
    assert len(answers["answers"]) == 2 and all(len(group) == 2 for group in answers["answers"])


@pytest.mark.slow  # CI time (33 s): a runtime run like the two above
def test_caft_paper_profile_pca_directions_with_the_top_baseline_on_the_gender_layout(tmp_path, tiny_checkpoints):
    model = tiny_checkpoints.checkpoint("gemma2")
    data = write_mcmc(tmp_path / "gender")          # the gender task reads the same MC layout
    sets = SHRINK + ["paper.task=gender", f"paper.model_path={model}", f"paper.data_root={data}", "paper.max_eval=4",
                     "paper.directions=pca", "paper.n_pcs=3", "paper.pcs.0=[1, 2]", "paper.pcs.1=[0]",
                     "caft.variants=[caft, random, top]"]
    result = run_paper_shape("caft", tmp_path / "project", sets)

    subspace = result.metrics("caft", "concept_subspace")
    assert subspace["k_total"] == 3 and subspace["n_tokens_compared"] > 0
    records = read_json(result.out("caft", "concept_subspace") / "records.json")
    assert len(records["0"]["displays"]) == 3 and records["1"]["ids"] == [0]
    for variant in ("caft", "random", "top"):
        run = result.metrics("caft", "caft_train", f"{variant}-100-0")
        assert run["k"] == 3 and run["train_steps"] == 1 and run["hooked_residual_max"] < 1e-4
    headline = read_json(result.out("caft", "evaluate") / "summary.json")["headline"]
    assert "caft_minus_top_at_kstar" in headline
    assert "top_k100/ood_intended_acc" in result.metrics("caft", "evaluate")
