"""The diffusers backbones behind the stage interfaces: shapes, a resolution-free decoder,
the unconditional (null-token) path, and a checkpoint that reloads as the class it was."""
import pytest
import torch


@pytest.fixture(scope="module")
def tiny():
    from components.dibilps.backbones import DiffusersFieldVAE, DiffusersLatentDenoiser, DiffusersPixelUNet

    torch.manual_seed(0)
    vae = DiffusersFieldVAE(4, [8, 16], 1, 4, feature_channels=8, fourier_freqs=2, res=15).eval()
    latent = DiffusersLatentDenoiser(4, [16, 32], 1, 4, attention_head_dim=4, d_cond=8, sample_size=8,
                                     grid_channels=4).eval()
    pixel = DiffusersPixelUNet([8, 16], 1, 4, sample_size=16).eval()
    return vae, latent, pixel


def test_autoencoderkl_vae_pads_compresses_and_decodes_at_any_resolution(tiny):
    vae, _, _ = tiny
    x = torch.randn(2, 2, 15, 15)
    with torch.no_grad():
        mean, logvar = vae.encode(x)
        assert mean.shape == logvar.shape == (2, 4, 8, 8) and vae.latent_size(15) == 8
        coarse, fine = vae.decode(mean, 15), vae.decode(mean, 29)
    assert coarse.shape == (2, 2, 15, 15) and fine.shape == (2, 2, 29, 29)
    torch.testing.assert_close(fine[..., ::2, ::2], coarse, rtol=1e-4, atol=1e-5)   # nested nodes agree
    assert torch.isfinite(vae(x)).all()


def test_unet2dcondition_denoiser_uses_its_condition_and_the_null_token(tiny):
    _, latent, _ = tiny
    z, t = torch.randn(2, 4, 8, 8), torch.tensor([10, 900])
    obs = torch.randn(2, 5, 8)
    with torch.no_grad():
        fwd = latent(z, t, latent.condition(obs, torch.ones(2)))
        inv = latent(z, t, latent.condition(obs, -torch.ones(2)))
        null = latent.condition(None, torch.ones(2), n_points=5)
        dropped = latent.condition(obs, torch.ones(2), drop=torch.tensor([True, True]))
    assert fwd.shape == z.shape and not torch.allclose(fwd, inv)           # the direction token acts
    torch.testing.assert_close(null, dropped)
    grid = torch.randn(2, 4, 8, 8)                                         # the spatial condition acts
    with torch.no_grad():
        with_grid = latent(z, t, latent.condition(obs, torch.ones(2)), grid)
        null_grid = latent(z, t, latent.condition(obs, torch.ones(2)), torch.zeros_like(grid))
    assert with_grid.shape == z.shape and not torch.allclose(with_grid, null_grid)
    torch.testing.assert_close(null_grid, fwd)                             # None = the zero grid


def test_checkpoints_reload_as_the_class_they_were(tmp_path, tiny):
    from components.dibilps.models import UNet
    from components.dibilps.train import load_model, save_model

    _, _, pixel = tiny
    args = {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4, "sample_size": 16}
    save_model(tmp_path / "p.pt", pixel, args)
    again, blob = load_model(tmp_path / "p.pt", UNet)                       # UNet: only the fallback
    assert blob["arch"] == "DiffusersPixelUNet" and type(again) is type(pixel)
    x, t = torch.randn(1, 2, 16, 16), torch.tensor([5])
    with torch.no_grad():
        torch.testing.assert_close(again(x, t), pixel(x, t))
