"""Model folders: validation names the missing file; loads give the saved model's outputs;
device/dtype policy on a CPU machine."""
import shutil

import pytest
import torch

from components.common.devices import resolve_device, resolve_dtype
from components.common.hf_models import CheckpointError, check_checkpoint, load_model, load_tokenizer
from components.common.tiny_models import build_tiny


def test_invalid_folders_name_the_missing_file(tmp_path, tiny_checkpoints):
    with pytest.raises(CheckpointError, match="not a folder"):
        check_checkpoint(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="missing config.json"):
        check_checkpoint(tmp_path / "empty")
    for family, weights in (("llama", "model.safetensors"), ("unet2d", "diffusion_pytorch_model.safetensors")):
        broken = shutil.copytree(tiny_checkpoints.checkpoint(family), tmp_path / f"no-weights-{family}")
        (broken / weights).unlink()
        with pytest.raises(CheckpointError, match=f"missing {weights}"):
            load_model(broken, tiny_checkpoints.kind(family))
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown model kind"):
        load_model(tiny_checkpoints.checkpoint("llama"), "causal")


def _forward(family: str, model):
    torch.manual_seed(0)
    if family in ("qwen3", "gemma2", "llama"):
        return model(input_ids=torch.tensor([[5, 9, 17, 3]])).logits
    if family == "esm":
        return model(input_ids=torch.tensor([[0, 5, 9, 17, 2]])).logits
    if family == "vit_mae":       # fixed noise -> fixed mask, so outputs are comparable
        return model(pixel_values=torch.rand(1, 3, 32, 32), noise=torch.rand(1, 16)).logits
    if family == "clip_vision":
        return model(pixel_values=torch.rand(1, 3, 32, 32)).pooler_output
    if family == "resnet":
        return model(pixel_values=torch.rand(1, 3, 32, 32)).logits
    if family == "unet2d":
        return model(torch.rand(1, 3, 16, 16), timestep=10).sample
    if family == "vae":
        return model.decode(model.encode(torch.rand(1, 3, 32, 32)).latent_dist.mode()).sample
    raise KeyError(family)


@pytest.mark.parametrize("family", ["qwen3", "gemma2", "llama", "esm", "vit_mae", "clip_vision", "resnet",
                                    "unet2d", "vae"])
def test_loaded_checkpoint_computes_what_the_saved_model_computed(tiny_checkpoints, family):
    loaded = load_model(tiny_checkpoints.checkpoint(family), tiny_checkpoints.kind(family), device="cpu")
    with torch.no_grad():
        assert torch.allclose(_forward(family, loaded), _forward(family, build_tiny(family)), atol=1e-5)


def test_llava_answers_about_an_image(tiny_checkpoints):
    """The LLaVA-shaped VLM takes pixels through CLIP + projector into the Llama decoder."""
    model = load_model(tiny_checkpoints.checkpoint("llava"), "vlm", device="cpu")
    n_patches = (32 // 8) ** 2
    image_id = model.config.image_token_index
    ids = torch.tensor([[2] + [image_id] * n_patches + [7, 8]])
    pixels = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        logits = model(input_ids=ids, pixel_values=pixels).logits
        other = model(input_ids=ids, pixel_values=torch.rand(1, 3, 32, 32)).logits
    assert logits.shape == (1, ids.shape[1], model.config.text_config.vocab_size)
    assert not torch.allclose(logits[0, -1], other[0, -1])        # the image changes the answer


def test_qwen2_vl_answers_about_an_image(tiny_checkpoints):
    """The Qwen2-VL-shaped VLM: flattened patches + grid (t, h, w), merged 2x2 into LM tokens,
    multimodal RoPE from the token types (what Qwen2VLProcessor returns)."""
    model = load_model(tiny_checkpoints.checkpoint("qwen2_vl"), "vlm", device="cpu")
    c = model.config
    grid = torch.tensor([[1, 4, 4]])                                 # a 16x16 image in 4x4 patches
    n_merged = int(grid.prod()) // 4
    ids = torch.tensor([[2, c.vision_start_token_id] + [c.image_token_id] * n_merged + [c.vision_end_token_id, 7]])
    types = (ids == c.image_token_id).int()

    def last_logits(pixels):
        with torch.no_grad():
            return model(input_ids=ids, pixel_values=pixels, image_grid_thw=grid, mm_token_type_ids=types).logits[0, -1]
    pixels = torch.rand(int(grid.prod()), 3 * 2 * 4 * 4)            # C x temporal x patch x patch per row
    assert last_logits(pixels).shape == (c.text_config.vocab_size,)
    assert not torch.allclose(last_logits(pixels), last_logits(torch.rand_like(pixels)))


def test_device_policy_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("CPU-only policy check")
    assert resolve_device("auto").type == "cpu"
    assert resolve_dtype("cpu") == torch.float32
    assert resolve_dtype("cpu", "bfloat16") == torch.bfloat16
    with pytest.raises(RuntimeError, match="no CUDA device"):
        resolve_device("cuda")


CUSTOM_CODE = '''
import torch
from transformers import PretrainedConfig, PreTrainedModel


class TinyEchoConfig(PretrainedConfig):
    model_type = "tiny_echo_encoder"

    def __init__(self, hidden_size=4, **kwargs):
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class TinyEchoModel(PreTrainedModel):
    config_class = TinyEchoConfig

    def __init__(self, config):
        super().__init__(config)
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def custom_method(self):
        return "ran the folder's own code"
'''


def _custom_code_folder(tmp_path):
    """A folder whose config names a model type transformers does not know and whose modelling
    code ships inside it (config auto_map), like MM-Embed's."""
    from tests.common.custom_code import save_custom_code_model

    return save_custom_code_model(tmp_path / "custom", CUSTOM_CODE, "tiny_echo_modeling", "TinyEchoConfig",
                                  "TinyEchoModel")


def test_a_folder_with_custom_code_loads_only_when_asked(tmp_path):
    folder = _custom_code_folder(tmp_path)
    config = (folder / "config.json").read_text()
    assert "auto_map" in config and (folder / "tiny_echo_modeling.py").is_file()
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_model(folder, "encoder", device="cpu")            # default: the folder's code never runs
    model = load_model(folder, "encoder", device="cpu", trust_remote_code=True)
    assert model.custom_method() == "ran the folder's own code" and not model.training
