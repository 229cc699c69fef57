"""The teacher adapter: what a frozen 3D foundation model must provide to be distilled from.

A teacher is any ``nn.Module`` with
- ``patch``: pixels per token side (spatial tokens form an (H/patch, W/patch) grid);
- ``forward(rgb (B, T, 3, H, W) in [0, 1])`` -> ``z`` (B, T, D) pose tokens, ``F`` (B, T, n, D)
  state-augmented spatial tokens, ``enc`` (B, T, n, D) stateless encoder tokens; the recurrent
  state is carried from frame 0 through the clip;
- frozen heads ``decode_depth(F (..., n, D), grid)`` -> metric-up-to-scale depth (..., H, W),
  ``decode_pose(z)`` -> motion since the previous frame as (..., 4, 4) (camera t in camera t-1),
  ``decode_fov(z)`` -> horizontal field of view in radians.

A checkpoint is a folder holding ``adapter.json`` (``{"adapter": NAME, ...constructor args}``)
and ``weights.pt`` (a state dict). ``tiny_cut3r`` is the teacher trained here. ``cut3r`` is the
slot for the paper's CUT3R (ARCroco3DStereo): its encoder gives ``enc``, its state decoder the
pose token ``z`` and spatial tokens ``F``, its DPT head the depth and its pose head the motion;
building it needs CUT3R's own code, which no package registry carries, so that slot refuses with
a message saying so rather than running anything else.
"""
from __future__ import annotations

from pathlib import Path

from components.common.io import load_torch, read_json, save_torch, write_json_atomic

CONFIG_FILE, WEIGHTS_FILE = "adapter.json", "weights.pt"


class AdapterError(ValueError):
    """A teacher checkpoint folder this code cannot build a teacher from."""


def build_tiny(args: dict):
    """TinyCUT3R from its constructor arguments (an adapter.json or a teacher.pt blob)."""
    from components.fr3d.teacher import TinyCUT3R

    return TinyCUT3R(int(args["dim"]), int(args["state_tokens"]), int(args["heads"]),
                     int(args.get("mix_layers", 1)), int(args.get("max_shift", 0)),
                     int(args.get("depth_context", 0)))


def _build_cut3r(args: dict):
    raise AdapterError("adapter 'cut3r' needs CUT3R's model code (github.com/CUT3R/CUT3R), "
                       "which is not installable from a package registry; wrap its "
                       "ARCroco3DStereo in the interface of components/fr3d/adapter.py")


BUILDERS = {"tiny_cut3r": build_tiny, "cut3r": _build_cut3r}
REQUIRED_METHODS = ("forward", "decode_depth", "decode_pose", "decode_fov")


def check_teacher(model) -> None:
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(model, m, None))]
    if missing or not isinstance(getattr(model, "patch", None), int):
        raise AdapterError(f"{type(model).__name__} lacks the teacher interface: "
                           f"{', '.join(missing) or 'an int patch size'}")


def read_adapter_config(folder) -> dict:
    folder = Path(folder)
    if not (folder / CONFIG_FILE).is_file():
        raise AdapterError(f"{folder}: no {CONFIG_FILE}")
    args = read_json(folder / CONFIG_FILE)
    if args.get("adapter") not in BUILDERS:
        raise AdapterError(f"{folder / CONFIG_FILE}: adapter must be one of {sorted(BUILDERS)}, "
                           f"got {args.get('adapter')!r}")
    return args


def save_teacher_checkpoint(model, folder, adapter: str, **args) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / CONFIG_FILE, {"adapter": adapter, **args})
    save_torch(folder / WEIGHTS_FILE, model.state_dict())
    return folder


def load_teacher_checkpoint(folder):
    """A frozen teacher in eval mode from a checkpoint folder, checked against the interface."""
    folder = Path(folder)
    args = read_adapter_config(folder)
    model = BUILDERS[args["adapter"]](args)
    if not (folder / WEIGHTS_FILE).is_file():
        raise AdapterError(f"{folder}: no {WEIGHTS_FILE}")
    model.load_state_dict(load_torch(folder / WEIGHTS_FILE))
    check_teacher(model)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model
