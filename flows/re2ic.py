"""re2ic — Re2IC: region-based implicit image codec with wavelet-Wasserstein distortion (ICML 2026).

Overfitted per-image codecs trained for rate + lambda * {MSE, WD, WA-WD}, coded to real
bitstreams, decoded bit-exactly, evaluated for rate-distortion/perception; WA-WD is also
checked as a standalone metric on graded distortions.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.re2ic"

METHOD = Method(
    name="re2ic",
    title="Re2IC: saliency-region implicit codec with wavelet-Wasserstein distortion",
    paper="https://eedavidwu.github.io/ReReIC/",
    config=f"{M}.config:Re2icConfig",
    stages=(
        Stage("load_images", f"{M}.images:load_images_stage", params=("images",),
              description="Crops of photos bundled with scikit-image / scikit-learn"),
        Stage("saliency", f"{M}.images:saliency_stage", params=("regions",), deps=("load_images",),
              description="Spectral-residual saliency, 2-region block partition, sigma maps"),
        Stage("fit_codec", f"{M}.codec:fit_codec_stage",
              params=("codec", "regions", "distortion", "seeds"), deps=("load_images", "saliency"),
              fan_out={"loss": "codec.losses", "seed": "seeds"},
              resources=Resources(num_cpus=1, num_gpus={"paper": 1}),
              description="Per (loss, seed): overfit one codec per crop and lambda; arithmetic-coded bitstreams"),
        Stage("decode", f"{M}.evaluate:decode_stage", params=("regions", "distortion", "quality"),
              deps=("load_images", "saliency", "fit_codec"), item_deps=("fit_codec",),
              fan_out={"loss": "codec.losses", "seed": "seeds"},
              description="Per fit item: decode every bitstream from its bytes, bit-exact check, "
                          "PSNR / WD / WA-WD / held-out texture stats (+ LPIPS, DISTS in paper)"),
        Stage("metric_eval", f"{M}.evaluate:metric_eval_stage",
              params=("metric_eval", "distortion"), deps=("load_images",),
              description="WD / WA-WD vs severity of blur, noise, JPEG; texture resampling"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("codec", "distortion", "quality"),
              deps=("load_images", "fit_codec", "decode", "metric_eval"),
              description="Premise (validation), claims (test), BD-rates, RD curves, convergence"),
    ),
)
