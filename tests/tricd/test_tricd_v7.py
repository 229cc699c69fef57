"""v7 (issue 39): visual tokens that bind facts to objects. The merger may read a border of
context patches around its own block (``context``), and the vision tower may learn the video's
camera operation (``camera``), whose words the projector adds to every visual token."""
import torch

from components.tricd import video as V
from components.tricd.decode import MAX_TEXT
from components.tricd.model import ToyVLLM, build_vocab, camera_grounding, grounding_loss, split_grounding

torch.set_num_threads(1)


def _toy(**kw):
    torch.manual_seed(0)
    return ToyVLLM(len(build_vocab()), frames=8, size=16, patch=4, d_model=16, n_layers=1, n_heads=2,
                   max_text=MAX_TEXT, merge=2, tpatch=2, align=True, **kw).eval()


def test_patch_grid_is_the_patch_embedding_of_the_v6_patches():
    """The grid path embeds the same per-patch input (pixels + colour membership) as ``patches``."""
    model = _toy()
    video = torch.randint(0, 256, (2, 8, 16, 16, 3)).float()
    with torch.no_grad():
        old = model.patch_embed(torch.cat([model.patches(video), model.colour_membership(video)], -1))
        grid = model.patch_grid(video)                                  # (B, T', 4, 4, d)
    g, m = model.grid, model.merge
    grouped = grid.reshape(2, 4, g, m, g, m, -1).permute(0, 1, 2, 4, 3, 5, 6).reshape(2, 4, g * g, m * m, -1)
    torch.testing.assert_close(grouped, old)


def test_context_lets_a_token_see_across_its_border():
    """With context 1 a visual token changes when a pixel just outside its block changes; without
    context it does not (v1-v6)."""
    video = torch.randint(0, 256, (1, 8, 16, 16, 3)).float()
    moved = video.clone()
    moved[:, :, 0, 9] = 0.0           # first row, column 9: outside token 0 (columns 0-7), in token 1's block
    for context, changes in ((0, False), (1, True)):
        model = _toy(context=context)
        with torch.no_grad():
            a, b = model.encoder(video), model.encoder(moved)
        assert a.shape == (1, 4, 4, 16)
        assert (not torch.allclose(a[:, :, 0], b[:, :, 0])) == changes
        assert not torch.allclose(a[:, :, 1], b[:, :, 1])               # its own token always changes
        assert torch.allclose(a[:, :, 3], b[:, :, 3])                   # a far token never does


def test_camera_grounding_is_off_by_default_and_learned_when_on():
    video = torch.randint(0, 256, (3, 8, 16, 16, 3)).float()
    labels = torch.zeros(3, 4, 4, len(V.PAIRS) + len(V.MOTIONS))
    plain, cam = _toy(), _toy(camera=True)
    assert plain.ground_head.out_features == len(V.PAIRS) + len(V.MOTIONS) + len(V.SCENES)
    assert cam.ground_head.out_features == plain.ground_head.out_features + len(V.CAMERAS)
    with torch.no_grad():
        g = cam.grounding_logits(cam.encoder(video))
    assert split_grounding(g)[2].shape[-1] == len(V.SCENES)            # the scene slice stays 4 wide
    assert camera_grounding(g).shape[-1] == len(V.CAMERAS)
    assert camera_grounding(plain.grounding_logits(plain.encoder(video))).shape[-1] == 0
    scenes = torch.tensor([0, 1, 2])
    both = torch.tensor([[0, 1], [1, 2], [2, 3]])
    # the camera term adds to the v6 loss only when the model grounds the camera
    torch.testing.assert_close(grounding_loss(plain, video, labels, both), grounding_loss(plain, video, labels, scenes))
    assert grounding_loss(cam, video, labels, both) > grounding_loss(cam, video, labels, scenes)
    # the projector adds one camera reading per video to every token
    state = cam.tower_state(video)
    with torch.no_grad():
        cam.camera = False
        without = cam.project(state)
        cam.camera = True
        with_cam = cam.project(state)
    diff = with_cam - without
    torch.testing.assert_close(diff, diff[:, :1, :1].expand_as(diff))


def test_pixel_colour_gives_the_colour_mask_of_each_patch():
    """``pixel_colour``: a patch's input holds each pixel's colour membership; moving a red pixel
    inside a patch changes the patch feature (the patch mean of v1-v6 does not see it)."""
    video = torch.zeros(1, 8, 16, 16, 3)
    a, b = video.clone(), video.clone()
    a[:, :, 0, 0] = torch.tensor([220.0, 40, 40])
    b[:, :, 0, 1] = torch.tensor([220.0, 40, 40])
    b[:, :, 0, 0] = 0.0
    mean, mask = _toy(), _toy(pixel_colour=True)
    assert mask.patch_embed.in_features == 3 * 4 * 4 * 2 + len(V.COLORS) * 4 * 4 * 2
    with torch.no_grad():
        ma, mb = mean.colour_membership(a), mean.colour_membership(b)
        torch.testing.assert_close(ma, mb)                              # patch means: equal
        mean.patch_embed.weight[:, :96].zero_()                         # look at the colour part only
        mask.patch_embed.weight[:, :96].zero_()
        assert torch.allclose(mean.patch_grid(a), mean.patch_grid(b))
        assert not torch.allclose(mask.patch_grid(a), mask.patch_grid(b))


def test_feat_scale_normalises_the_tower_features_in_the_projector():
    """v1-v6 (-1) add the raw tower features; ``feat_scale`` s >= 0 adds s * layer_norm(features),
    so 0 leaves only the words of what the tower grounds."""
    video = torch.randint(0, 256, (2, 8, 16, 16, 3)).float()
    raw, zero, unit = _toy(), _toy(feat_scale=0.0), _toy(feat_scale=1.0)
    with torch.no_grad():
        feats, g = raw.tower_state(video)
        words = raw.project((torch.zeros_like(feats), g))
        torch.testing.assert_close(raw.project((feats, g)), feats + words)
        torch.testing.assert_close(zero.project((feats, g)), words)
        normed = unit.project((feats, g)) - words
    torch.testing.assert_close(normed.mean(-1), torch.zeros(normed.shape[:-1]), atol=1e-5, rtol=0)
    torch.testing.assert_close(normed.std(-1, unbiased=False), torch.ones(normed.shape[:-1]), atol=1e-3, rtol=0)
