"""fr3d — "Future Dynamic 3D Reconstruction: A 3D World Model with Disentangled Ego-Motion"
(ICML 2026). Procedural driving scenes in three domains, a tiny recurrent 3D reconstruction
teacher pre-trained here and frozen (stand-in for CUT3R), FR3D-tiny forecasting its tokens."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.fr3d"

METHOD = Method(
    name="fr3d",
    title="Future dynamic 3D reconstruction with disentangled ego-motion",
    paper="https://icml.cc/virtual/2026/poster/60566",
    config=f"{M}.config:Fr3dConfig",
    stages=(
        Stage("gen_scenes", f"{M}.data:gen_scenes_stage", params=("scenes", "paper"),
              description="Roads, buildings, cars, ego trajectories: domains A/B/C, probe, teacher set"),
        Stage("render", f"{M}.data:render_stage", params=("scenes", "paper"), deps=("gen_scenes",),
              fan_out={"split": "scenes.splits"}, resources=Resources(num_cpus=1),
              description="Ray-cast RGB, metric depth, dynamic masks, ego poses"),
        Stage("pretrain_teacher", f"{M}.teacher:pretrain_teacher_stage",
              params=("scenes", "teacher", "paper"), deps=("render",), resources=Resources(num_cpus=2),
              description="CUT3R-tiny on broad randomised renders (no B/C settings), then frozen"),
        Stage("extract_tokens", f"{M}.tokens:extract_tokens_stage",
              params=("scenes", "evaluate", "forecaster"), deps=("render", "pretrain_teacher"),
              resources=Resources(num_cpus=2),
              description="Frozen teacher: pose token z_t, spatial tokens F_t, 2D encoder features; "
                          "teacher premises P1/P2 on validation"),
        Stage("train_baselines", f"{M}.forecaster:train_baselines_stage",
              params=("forecaster", "seeds"), deps=("render", "extract_tokens"),
              fan_out={"variant": "forecaster.variants", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="scene-only, no-share (separate M_z), 2D-feature forecaster + A-only decoder; "
                          "listed before FR3D so that each seed's evaluation can start as soon as "
                          "its FR3D model is done (item_deps below)"),
        Stage("train_forecaster", f"{M}.forecaster:train_forecaster_stage",
              params=("forecaster", "seeds"), deps=("render", "extract_tokens"),
              fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1),
              description="FR3D-tiny: M_F + M_z with info-share, AR schedule, distillation"),
        Stage("rollout_eval", f"{M}.evaluate:rollout_eval_stage",
              params=("evaluate", "forecaster", "seeds", "scenes"),
              deps=("render", "pretrain_teacher", "extract_tokens", "train_forecaster",
                    "train_baselines"),
              item_deps=("train_forecaster",),
              fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1),
              description="Roll out to 2 s; AbsRel, delta1, static/dynamic, ATE/RPE; probe"),
        Stage("report", f"{M}.report:report_stage", params=("evaluate",),
              deps=("rollout_eval", "train_forecaster", "train_baselines"),
              description="Criteria F1-F5 and premise P3, tables with oracle and baselines, plot"),
    ),
)
