"""Fast checks of the paper path: preflight names the key in one line, the DiffusionPDE reader
keeps the published arrays, the refined test grid is solved (not upsampled), and the builders
give the own models unchanged and the diffusers families for the paper profile."""
import numpy as np
import pytest

from components.common.preflight import PreflightError
from components.dibilps.config import DibilpsConfig
from components.dibilps.paper_data import read_split, refine_inputs, refined_test
from tests.dibilps.paper_layout import fields, write_diffusionpde, write_mat


def paper(**sections):
    return DibilpsConfig.for_profile("paper", sections)


def test_smoke_and_small_keep_the_own_models_and_need_no_data():
    for profile in ("smoke", "small"):
        cfg = DibilpsConfig.for_profile(profile)
        cfg.preflight()
        assert (cfg.paper.enabled, cfg.paper.backbone, cfg.paper.device) == (False, "own", "cpu")
    cfg = paper()
    assert (cfg.paper.backbone, cfg.paper.device, cfg.data.res) == ("diffusers", "auto", 128)
    assert round(cfg.masks.obs_fraction * 128**2) == 500          # the official 500 points


def test_paper_preflight_names_the_key_and_the_layout_in_one_line(tmp_path):
    root = write_diffusionpde(tmp_path / "dpde", pdes=("poisson",), n_train=4, n_test=2, train_files=1)
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken"
    write_mat(broken / "training" / "poisson" / "p_1.mat", "poisson", *fields("poisson", 2, 8, 0))
    (broken / "testing").mkdir()
    (broken / "testing" / "poisson.mat").write_bytes(b"not a mat file")
    wrong = tmp_path / "wrong"
    write_mat(wrong / "training" / "poisson" / "p_1.mat", "poisson", *fields("poisson", 2, 8, 0))
    import scipy.io
    (wrong / "testing").mkdir()
    scipy.io.savemat(str(wrong / "testing" / "poisson.mat"), {"f_data": np.zeros((1, 8, 8))})
    cases = [("", "is not set"), (str(tmp_path / "nope"), "is not a folder"),
             (str(tmp_path / "empty"), "training/poisson/*.mat"),
             (str(broken), "unreadable poisson.mat"), (str(wrong), "'phi_data'")]
    for value, problem in cases:
        with pytest.raises(PreflightError) as err:
            paper(data={"pdes": ["poisson"]}, paper={"data_root": value}).preflight()
        message = str(err.value)
        assert err.value.key == "paper.data_root" and problem in message and "\n" not in message
        assert "training/<pde>/*.mat" in message                   # the expected layout is named
    with pytest.raises(PreflightError, match="training/darcy"):  # every PDE asked for is checked
        paper(data={"pdes": ["poisson", "darcy"]}, paper={"data_root": str(root)}).preflight()
    paper(data={"pdes": ["poisson"]}, paper={"data_root": str(root)}).preflight()


def test_unusable_diffusers_widths_fail_before_anything_runs():
    with pytest.raises(PreflightError) as err:
        paper(paper={"data_root": "", "unet_block_out_channels": [20, 40]}).preflight()
    assert err.value.key == "paper.unet_block_out_channels" and "norm_num_groups = 32" in str(err.value)


def test_npz_layout_names_its_files(tmp_path):
    (tmp_path / "darcy").mkdir()
    np.savez(tmp_path / "darcy" / "train.npz", a=np.zeros((2, 8, 8)), u=np.zeros((2, 8, 8)))
    with pytest.raises(PreflightError, match="darcy/test.npz"):
        paper(data={"pdes": ["darcy"]}, paper={"data_root": str(tmp_path), "layout": "npz"}).preflight()


def test_diffusionpde_reader_concatenates_training_files_and_keeps_the_arrays(tmp_path):
    root = write_diffusionpde(tmp_path / "dpde", pdes=("darcy",), res=8, n_train=7, n_test=3, train_files=2)
    cfg = paper(paper={"data_root": str(root)}).paper
    u, a = read_split(cfg, "darcy", "train", 6)
    u_all, a_all = fields("darcy", 7, 8, seed=0)
    assert u.shape == a.shape == (6, 8, 8) and u.dtype == np.float32
    np.testing.assert_allclose(u, u_all[:6], rtol=1e-6)
    np.testing.assert_array_equal(a, a_all[:6])
    u_t, _ = read_split(cfg, "darcy", "test", 100)                  # fewer on disk: all of them
    assert u_t.shape == (3, 8, 8)


def test_refined_test_grid_is_solved_from_inputs_that_keep_the_coarse_nodes():
    u, a = fields("darcy", 2, 9, seed=3)
    a_hr = refine_inputs("darcy", a, 17)
    np.testing.assert_array_equal(a_hr[:, ::2, ::2], a)               # nested grid, values kept
    assert set(np.unique(a_hr)) <= {3.0, 12.0}
    u_hr, _ = refined_test("poisson", fields("poisson", 2, 9, seed=4)[1], 17, 1.0)
    u_coarse = fields("poisson", 2, 9, seed=4)[0]
    # the same PDE solved twice as finely: close to, but not the copy of, the coarse solution
    gap = np.abs(u_hr[:, ::2, ::2] - u_coarse).max() / np.abs(u_coarse).max()
    assert 0 < gap < 0.2


def test_builders_keep_the_own_models_and_their_arguments():
    from components.dibilps.backbones import latent_spec, pixel_spec, vae_spec

    cfg = DibilpsConfig.for_profile("small")
    assert vae_spec(cfg, 32) == ("FieldVAE", {"latent_channels": 4, "width": 16, "feature_channels": 32,
                                              "fourier_freqs": 4, "res": 32})
    assert latent_spec(cfg, 4, 64, 8) == ("LatentDenoiser", {"latent_channels": 4, "ch": 32, "d_cond": 64,
                                                             "grid_channels": 4})
    assert pixel_spec(cfg, 32) == ("UNet", {"in_ch": 2, "ch": 16, "levels": 2, "d_cond": 0})
    assert pixel_spec(cfg, 64, equal_width=True)[1]["ch"] == 32
    cfg = paper()
    name, args = vae_spec(cfg, 128)
    assert name == "DiffusersFieldVAE" and args["block_out_channels"] == [128, 256, 512, 512]
    assert vae_spec(cfg, 64, down=2)[1]["block_out_channels"] == [128, 256, 512]
    name, args = latent_spec(cfg, 4, 768, 16)
    assert name == "DiffusersLatentDenoiser" and args["grid_channels"] == 4
    assert pixel_spec(cfg, 128, equal_width=True)[1]["block_out_channels"] == [320, 640, 1280, 1280]


def test_paper_stages_declare_a_gpu_and_small_ones_do_not():
    from flows.dibilps import METHOD

    heavy = {s.name: s for s in METHOD.stages if s.resources.gpus("paper")}
    assert {"train_vae", "train_latent_diffusion", "train_pixel_diffusion", "infer", "baselines"} <= set(heavy)
    assert all(s.resources.gpus("small") == 0 and "paper" in s.params for s in heavy.values())


def test_matlab_v73_files_without_h5py_fail_in_preflight_naming_h5py(tmp_path, monkeypatch):
    from components.dibilps import paper_data

    monkeypatch.setattr(paper_data, "_h5py", lambda: None)   # as on a machine without it
    root = tmp_path / "dpde"
    write_mat(root / "training" / "darcy" / "darcy_1.mat", "darcy", *fields("darcy", 2, 8, 0))
    (root / "testing").mkdir()
    # the published Darcy files are HDF5 behind MATLAB's 128-byte text header
    (root / "testing" / "darcy.mat").write_bytes(b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(512, b" "))
    with pytest.raises(PreflightError) as err:
        paper(data={"pdes": ["darcy"]}, paper={"data_root": str(root)}).preflight()
    assert err.value.key == "paper.data_root" and "needs h5py" in str(err.value)
    assert "\n" not in str(err.value)


def test_matlab_v73_files_are_read_with_matlab_s_axis_order(tmp_path):
    """The published Darcy files are HDF5 behind MATLAB's text header (a 512-byte userblock),
    with each array stored axes-reversed; read_mat gives back (N, S, S) as MATLAB sees it."""
    h5py = pytest.importorskip("h5py")
    from components.dibilps import paper_data

    u, a = fields("darcy", 3, 8, 0)
    a[:, 0, 1] = 7.0                     # marks (row 0, column 1): a transposed read moves it
    path = tmp_path / "darcy.mat"
    a_key, u_key = paper_data.MAT_KEYS["darcy"]
    with h5py.File(path, "w", userblock_size=512) as f:
        f[a_key] = a.transpose(2, 1, 0)
        f[u_key] = u.transpose(2, 1, 0)
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Tue Dec  1 2026 HDF5 schema 1.00 .")
    assert paper_data.is_v73(path)
    got = paper_data.read_mat(path, (a_key, u_key))
    np.testing.assert_array_equal(got[a_key], a)
    np.testing.assert_allclose(got[u_key], u, rtol=1e-6)   # read as float32
