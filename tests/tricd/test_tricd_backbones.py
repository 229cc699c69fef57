"""The backbone interface the decoder and the router share (toy side), and the split loader."""
import numpy as np
import pandas as pd
import pytest
import torch

from components.tricd import benchmark as B
from components.tricd.backbones import ToyBackbone
from components.tricd.decode import MAX_TEXT, load_split, run_pass
from components.tricd.model import ToyVLLM, build_vocab

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from components.common.io import save_torch, write_table

    root = tmp_path_factory.mktemp("tricd-bench")
    videos, _, items = B.build_split("val", 5, 2, np.random.default_rng(0), frames=8, size=16, world=24,
                                     bias=0.0, biased_types=[], adversarial_rate=0.67)
    save_torch(root / "val_videos.pt", torch.from_numpy(videos))
    write_table(root / "val_qa.parquet", pd.DataFrame(items))
    return root


def _toy():
    torch.manual_seed(0)
    return ToyVLLM(len(build_vocab()), frames=8, size=16, patch=4, d_model=16, n_layers=1, n_heads=2,
                   max_text=MAX_TEXT, merge=2, tpatch=2, align=True).eval()


def test_a_limited_split_keeps_every_task(bench):
    """Regression: ``limit`` took the first rows; the release's files are ordered by task, so a
    paper-profile training cut held S-YN items only. Rows are now spread over the split."""
    full = load_split(bench, "val")
    cut = load_split(bench, "val", limit=len(full.qa) // 3)
    assert set(cut.qa.task) == set(full.qa.task)
    assert len(cut.qa) == len(full.qa) // 3 and cut.target.shape == (len(cut.qa),)


def test_indexed_videos_give_the_row_aligned_pass(bench):
    model = ToyBackbone(_toy())
    data = load_split(bench, "val", backbone=model)
    assert data.target is None and data.text.shape == (len(data.qa), MAX_TEXT)
    aligned = run_pass(model, data.videos[data.video_idx], data.text, batch=3)
    indexed, hidden, pad = run_pass(model, data.videos, data.text, batch=3, hidden=True, video_idx=data.video_idx)
    torch.testing.assert_close(aligned, run_pass(model.model, data.videos[data.video_idx], data.text))
    torch.testing.assert_close(indexed, aligned, atol=1e-5, rtol=1e-5)
    assert hidden.shape[:2] == pad.shape == (len(data.qa), MAX_TEXT - 1 + model.model.n_visual + 1)
    assert pad[:, MAX_TEXT - 1:].sum() == 0          # visual tokens and <ans> are never padding


def test_toy_tool_descriptions_are_word_embeddings():
    model = ToyBackbone(_toy())
    emb, pad = model.describe(["blur every frame", "reverse the order of the frames"])
    assert emb.shape == (2, 6, 16) and pad[0].tolist() == [True] * 3 + [False] * 3
    index = model.index
    torch.testing.assert_close(emb[0, 3], model.model.tok_emb.weight[index["blur"]])
