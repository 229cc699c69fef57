"""The paper profile's PCA directions, the uninterpreted top baseline, SAE encoders, and full
fine-tuning (paper.lora_rank=0), on a tiny config-built Gemma2 (fast: no runtime)."""
import numpy as np
import pytest
import torch

from components.caft.ablation import orthonormal_basis
from components.caft.config import CaftConfig
from components.caft.directions import pca
from components.caft.paper_directions import (completion_ids, load_fine_tuned, paper_subspace, sae_activations,
                                              top_latents)
from components.common.hf_models import load_model, load_tokenizer
from tests.caft.paper_files import write_dictionary_learning_sae, write_gemma_scope_sae

ROWS = [{"prompt": "the cat sees the", "completion": " ball in the garden"},
        {"prompt": "a dog likes", "completion": " the old red ball"},
        {"prompt": "we saw the", "completion": " horse and the cow near the barn"}]


class Ctx:
    def log_metric(self, *_args):
        pass


def paper_cfg(model, **paper):
    return CaftConfig.for_profile("paper", {
        "seeds": [0], "train": {"batch_size": 2, "lr": 1e-3, "warmup": 0},
        "paper": {"model_path": str(model), "device": "cpu", "max_length": 64, "grad_accum": 1, **paper}})


def lora_run_dir(model_path, root):
    """A pretune-like run folder whose adapter moves the model (B != 0, unlike a fresh LoRA)."""
    from components.common.peft_lora import attach_lora

    torch.manual_seed(0)
    peft = attach_lora(load_model(model_path, device="cpu"), rank=4)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    peft.save_pretrained(str(root / "adapter"))
    return root


def test_completion_ids_mark_where_the_answer_starts(tiny_checkpoints):
    tok = load_tokenizer(tiny_checkpoints.tokenizer())
    ids, start = completion_ids(tok, ROWS[0], 64)
    assert ids[:start] == tok(ROWS[0]["prompt"])["input_ids"] and len(ids) > start
    chat = {"prompt": [{"role": "user", "content": "hi there"}], "completion": [{"role": "assistant", "content": "a ball"}]}
    ids, start = completion_ids(tok, chat, 64)
    head = tok.apply_chat_template(chat["prompt"], tokenize=False, add_generation_prompt=True)
    assert ids[:start] == tok(head, add_special_tokens=False)["input_ids"] and len(ids) > start
    assert "ball" in tok.decode(ids[start:])
    full, _ = completion_ids(tok, ROWS[2], 64)
    assert completion_ids(tok, ROWS[2], 3) == (full[:3], 3)


def test_pca_directions_are_the_pcs_of_fine_tuned_minus_base_on_completion_tokens(tmp_path, tiny_checkpoints):
    model_path = tiny_checkpoints.checkpoint("gemma2")
    run = lora_run_dir(model_path, tmp_path / "pretune")
    cfg = paper_cfg(model_path, directions="pca", pcs={0: [2], 1: [0, 1]}, n_pcs=4)
    cfg = cfg.model_copy(update={"caft": cfg.caft.model_copy(update={"variants": ["caft", "random", "top"]})})
    dirs, top, metrics, records = paper_subspace(cfg, ROWS, run)

    # an independent reference: a merged copy of the fine-tuned model and a plain base, via hidden_states
    from components.common.peft_lora import load_adapter, merge_lora

    tok = load_tokenizer(model_path)
    base = load_model(model_path, device="cpu")
    merged = merge_lora(load_adapter(load_model(model_path, device="cpu"), run / "adapter"))
    diffs = []
    for row in ROWS:
        ids, start = completion_ids(tok, row, 64)
        x = torch.tensor([ids])
        h = [m(input_ids=x, output_hidden_states=True).hidden_states[1][0, start:] for m in (merged, base)]
        diffs.append(h[0] - h[1])
    reference = pca(torch.cat(diffs).detach(), 4)["pcs"]
    assert metrics["n_tokens_compared"] == sum(len(d) for d in diffs)
    torch.testing.assert_close(dirs[0], reference[[2]], atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(top[0], reference[:1], atol=1e-4, rtol=1e-3)     # as many, uninterpreted
    assert dirs[1].shape == top[1].shape == (2, 32)
    torch.testing.assert_close(dirs[1] @ dirs[1].T, torch.eye(2), atol=1e-5, rtol=0)   # PCs: orthonormal
    assert len(records["0"]["displays"]) == 4 and len(records["0"]["var_ratio"]) == 4
    assert metrics["k_total"] == 3


def test_sae_encoders_match_their_closed_forms(tmp_path):
    x = torch.randn(5, 32)
    npz = write_gemma_scope_sae(tmp_path, layer=0, d_model=32)
    f = np.load(npz)
    pre = x @ torch.from_numpy(f["W_enc"]) + torch.from_numpy(f["b_enc"])
    torch.testing.assert_close(sae_activations(str(npz), x), torch.where(pre > 0.1, pre, torch.zeros(())))
    pt = write_dictionary_learning_sae(tmp_path / "ae.pt", d_model=32)
    state = torch.load(pt, weights_only=True)
    torch.testing.assert_close(sae_activations(str(pt), x), torch.relu((x - state["b_dec"]) @ state["encoder.weight"].T))


def test_top_latents_are_the_ones_fine_tuning_moved_most(tmp_path):
    npz = write_gemma_scope_sae(tmp_path, layer=0, d_model=32)
    w_enc = torch.from_numpy(np.load(npz)["W_enc"])
    base = torch.zeros(10, 32)
    # move the residuals along the directions that drive latents 7 and 3 (7 harder)
    ft = base + 3 * w_enc[:, 7] / w_enc[:, 7].norm() ** 2 * 5 + 2 * w_enc[:, 3] / w_enc[:, 3].norm() ** 2
    change = (sae_activations(str(npz), ft).mean(0) - sae_activations(str(npz), base).mean(0)).abs()
    assert top_latents(str(npz), base, ft, 2) == torch.argsort(change, descending=True)[:2].tolist()
    assert 7 in top_latents(str(npz), base, ft, 2)


def test_full_fine_tuning_trains_every_weight_with_the_hooks_and_saves_a_whole_model(tmp_path, tiny_checkpoints):
    from components.caft.paper import finetune_paper

    model_path = tiny_checkpoints.checkpoint("gemma2")
    cfg = paper_cfg(model_path, lora_rank=0, task="mcmc")
    before = load_model(model_path, device="cpu").state_dict()
    inputs = {"sft": [{"prompt": r["prompt"], "completion": r["completion"]} for r in ROWS[:2]]}
    q = orthonormal_basis(torch.randn(3, 32))
    model, _tok, metrics = finetune_paper(cfg, inputs, {1: q}, 0, Ctx(), tmp_path)
    assert not hasattr(model, "peft_config") and metrics["train_steps"] == 1
    assert metrics["hooked_residual_max"] < 1e-4
    after = model.state_dict()
    moved = [n for n in before if not torch.equal(before[n], after[n])]
    assert any("mlp" in n for n in moved) and any("self_attn" in n for n in moved)   # not just an adapter
    model.save_pretrained(str(tmp_path / "run" / "adapter"))
    ft, as_base, base = load_fine_tuned(cfg.paper, tmp_path / "run")
    assert base is not None and not hasattr(ft, "peft_config")
    with as_base():
        torch.testing.assert_close(base.state_dict()["model.norm.weight"], before["model.norm.weight"])


def test_paper_keys_for_directions_fail_in_one_line(tmp_path, tiny_checkpoints):
    from components.caft.paper import preflight_directions

    p = paper_cfg(tiny_checkpoints.checkpoint("gemma2"), directions="pca").paper
    with pytest.raises(Exception, match="paper.pcs = '{}' is not set"):
        preflight_directions(p, "x")
    with pytest.raises(Exception, match=r"paper.pcs.3 = '\[25\]' is out of range"):
        preflight_directions(p.model_copy(update={"pcs": {3: [25]}}), "x")
    preflight_directions(p.model_copy(update={"pcs": {3: []}}), "x")   # [] : only compute the PCs
    with pytest.raises(ValueError, match="top"):
        CaftConfig.for_profile("small", {"caft": {"variants": ["caft", "random", "top"]}})
    with pytest.raises(ValueError, match="paper.directions"):
        CaftConfig.for_profile("paper", {"paper": {"directions": "ica"}})


def test_top_variant_takes_as_many_uninterpreted_directions_and_is_reported_against_caft():
    from components.caft.evaluate import em_headline, headline
    from components.caft.train import variant_directions

    subspace, top = {3: torch.eye(8)[:2]}, {3: torch.eye(8)[4:8]}
    torch.testing.assert_close(variant_directions("top", subspace, 100, 0, top)[3], torch.eye(8)[4:6])
    with pytest.raises(ValueError, match="top"):
        variant_directions("top", subspace, 100, 0)          # no top directions saved
    base = [{"id_acc": 1.0, "ood_intended_acc": 0.1, "misaligned_rate": 0.2, "insecure_code_rate": 0.8}]
    at = {"caft": [{"id_acc": 1.0, "ood_intended_acc": 0.9, "misaligned_rate": 0.02, "insecure_code_rate": 0.8}],
          "random": base, "top": [{"id_acc": 1.0, "ood_intended_acc": 0.4, "misaligned_rate": 0.1,
                                   "insecure_code_rate": 0.8}]}
    assert headline(base, at)["caft_minus_top_at_kstar"] == pytest.approx(0.5)
    em = em_headline(base, at)
    assert em["top_misalignment_reduction_at_kstar"] == pytest.approx(2.0)
    assert em["caft_minus_top_misaligned_at_kstar"] == pytest.approx(-0.08)
    assert "caft_minus_top_at_kstar" not in headline(base, {"caft": at["caft"], "random": base})
