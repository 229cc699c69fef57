"""Calibration of the scene knobs on the validation split of a dev data seed (never on test).

For each candidate value it generates data with ``--data-seed`` (not the committed one), trains
stage 1 and a vanilla stage-2 arm with a dev training seed, and prints the two premise numbers on
the validation split: vanilla's bias-conflicting accuracy and how often its blurred-image answers
are the noun's prior colour. The values tried and kept are recorded in CLAIMS.md.

    python -m components.vig.calibrate --knob data.contrast_max --values 0.3 0.5 0.8
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from components.common.context import LocalContext
from components.common.io import load_torch
from components.vig.config import VigConfig
from components.vig.data import prepare_data_stage
from components.vig.evaluate import colour_report, nouns_of
from components.vig.train import align_stage1_stage, load_split, new_model, train_arm_stage


def _override(knob: str, value) -> dict:
    section, key = knob.split(".")
    return {section: {key: value}}


def calibrate_point(overrides: dict, root: Path, seed: int) -> dict:
    cfg = VigConfig.for_profile("small", overrides)
    prep = LocalContext(out_dir=root / "prepare_data")
    prepare_data_stage(cfg, prep)
    align = LocalContext(out_dir=root / "align_stage1", inputs={"prepare_data": prep.out_dir})
    align_stage1_stage(cfg, align)
    arm = LocalContext(out_dir=root / "vanilla", item={"variant": "vanilla", "seed": seed},
                       inputs={"prepare_data": prep.out_dir, "align_stage1": align.out_dir, "select": None})
    train_arm_stage(cfg, arm)
    model = new_model(cfg)
    model.load_state_dict(load_torch(arm.out_dir / "model.pt"))
    report = colour_report(model, load_split(prep.out_dir, "val"), nouns_of(prep.out_dir, "val"),
                           cfg.vig.blur_sigma_frac)
    return {**report["metrics"], "final_loss": arm.summary["final_loss"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--knob", default="data.contrast_max")
    parser.add_argument("--values", nargs="+", type=float, required=True)
    parser.add_argument("--data-seed", type=int, default=4321)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--set", nargs="*", default=[], help="extra section.key=value overrides")
    args = parser.parse_args()
    for value in args.values:
        overrides = {"data": {"data_seed": args.data_seed}}
        for item in args.set:
            key, raw = item.split("=")
            section, name = key.split(".")
            overrides.setdefault(section, {})[name] = json.loads(raw)
        section, key = args.knob.split(".")
        overrides.setdefault(section, {})[key] = value
        with tempfile.TemporaryDirectory() as tmp:
            result = calibrate_point(overrides, Path(tmp), args.seed)
        print(json.dumps({"knob": args.knob, "value": value, "set": args.set,
                          **{k: round(v, 2) for k, v in result.items()}}), flush=True)


if __name__ == "__main__":
    main()
