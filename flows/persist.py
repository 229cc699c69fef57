"""persist — "Beyond Pixel Histories: World Models with Persistent 3D State" (PERSIST, ICML 2026).
A procedural voxel world and ray caster stand in for Luanti; W (3D latent dynamics), C (camera)
and P (renderer-conditioned pixels) are trained separately and composed at inference, against a
pixel-history baseline with the same backbone and budget."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.persist"
# the model stages train or sample on one GPU each in the paper profile (none in smoke/small);
# the paper trained each module on 8 GPUs (a data-parallel launcher is not part of this repo)
GPU = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="persist",
    title="World model with a persistent latent 3D scene vs pixel history",
    paper="https://icml.cc/virtual/2026/poster/60565",
    config=f"{M}.config:PersistConfig",
    stages=(
        Stage("gen_worlds", f"{M}.data:gen_worlds_stage", params=("world",),
              description="Procedural voxel worlds: terrain, water, trees, landmark pillars"),
        Stage("rollout_env", f"{M}.data:rollout_env_stage", params=("world", "rollout"),
              deps=("gen_worlds",),
              description="Agent rollouts: frames, depth, class maps, cameras, voxel crops"),
        Stage("train_vae3d", f"{M}.train:train_vae3d_stage", params=("vae3d", "device"),
              deps=("rollout_env",), resources=GPU,
              description="3D conv autoencoder of the agent-centred voxel crops (CE loss)"),
        Stage("encode_latents", f"{M}.train:encode_latents_stage", params=("world", "pixel_model", "device"),
              deps=("rollout_env", "train_vae3d"), resources=GPU,
              description="Cached latents; teacher-forced w_2D projections of decoded GT"),
        Stage("train_world_model", f"{M}.train:train_world_model_stage",
              params=("world", "world_model", "seeds", "device"), deps=("rollout_env", "encode_latents"),
              fan_out={"seed": "seeds"}, resources=GPU,
              description="W: rectified-flow 3D latent dynamics with diffusion forcing"),
        Stage("train_camera_model", f"{M}.train:train_camera_model_stage",
              params=("camera_model", "seeds", "device"), deps=("rollout_env", "encode_latents"),
              fan_out={"seed": "seeds"}, resources=GPU,
              description="C: residual camera dynamics"),
        # v6: the baseline is a stage of its own that needs only the rollouts, so on two cores it
        # trains beside the 3D VAE and the latents (same function, backbone, budget, data as P)
        Stage("train_baseline", f"{M}.train:train_baseline_stage",
              params=("world", "pixel_model", "seeds", "device"), deps=("rollout_env",),
              fan_out={"seed": "seeds"}, resources=GPU,
              description="Pixel-history baseline (Oasis-like, 8 frames): P's backbone, budget and data"),
        Stage("train_pixel_model", f"{M}.train:train_pixel_model_stage",
              params=("world", "pixel_model", "seeds", "device"), deps=("rollout_env", "encode_latents"),
              fan_out={"seed": "seeds"}, resources=GPU,
              description="P: the deferred shader on w_2D + 2 frames"),
        Stage("rollout_eval", f"{M}.evaluate:rollout_eval_stage",
              params=("world", "world_model", "pixel_model", "evaluate", "seeds", "device"),
              deps=("gen_worlds", "rollout_env", "train_vae3d", "encode_latents",
                    "train_world_model", "train_camera_model", "train_pixel_model", "train_baseline"),
              fan_out={"part": "evaluate.parts", "seed": "seeds"}, resources=GPU,
              description="Held-out worlds: spin-and-return memory, free play, editing, controls "
                          "(items: the test probe rows / the rest, per seed)"),
        Stage("report", f"{M}.report:report_stage", params=("world", "evaluate"), deps=("rollout_eval",),
              description="Pass criteria of CLAIMS.md and every metric side by side"),
    ),
)
