"""Tiny stand-ins for the paper profile's inputs, in the published layouts: a DDPM checkpoint
(google/ddpm-*'s flat layout: the UNet2DModel folder with scheduler_config.json beside it, or a
pipeline folder), a DINOv2 encoder folder from Dinov2Config (TinyCheckpoints has no DINOv2
family), and a folder of 16 reference images."""
from __future__ import annotations

from pathlib import Path

from components.common.hf_models import save_model
from components.common.tiny_models import build_tiny
from tests.paper.layouts import write_image_folder

def write_flat_ddpm(root: Path, unet_folder: Path) -> Path:
    """A copy of a UNet2DModel folder (e.g. TinyCheckpoints' unet2d) with the DDPM scheduler
    config saved beside it."""
    import shutil

    from diffusers import DDPMScheduler

    shutil.copytree(unet_folder, root)
    DDPMScheduler(num_train_timesteps=1000).save_pretrained(str(root))
    return Path(root)


def write_ddpm_pipeline(root: Path, **unet_overrides) -> Path:
    """google/ddpm-*'s layout: a DDPMPipeline saved with save_pretrained."""
    from diffusers import DDPMPipeline, DDPMScheduler

    unet = build_tiny("unet2d", **unet_overrides)
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000)).save_pretrained(str(root))
    return Path(root)


def write_dinov2(root: Path) -> Path:
    return save_model(build_tiny("dinov2"), root)   # 32² inputs, 4 patches a side


def write_reference_images(root: Path, n_classes: int = 4, per_class: int = 4, size: int = 16) -> Path:
    return write_image_folder(root, [f"c{i}" for i in range(n_classes)], per_class=per_class, size=size)


def write_ldm_pipeline(root: Path) -> Path:
    """CompVis/ldm-*'s layout: an LDMPipeline (unet/, vqvae/, scheduler/) around a 4-channel
    latent UNet2DModel and the tiny autoencoder (latents at half the pixel resolution)."""
    from diffusers import DDIMScheduler, LDMPipeline

    unet = build_tiny("unet2d", in_channels=4, out_channels=4, sample_size=8)
    LDMPipeline(vqvae=build_tiny("vae"), unet=unet, scheduler=DDIMScheduler()).save_pretrained(str(root))
    return Path(root)
