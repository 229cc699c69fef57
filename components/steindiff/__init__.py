"""steindiff: Stein-derived step rescaling for large-step diffusion ODE samplers.

mixture.py (exact-denoiser Gaussian mixture), stein.py (the correction), verify.py (identity
checks), data/train/sample/evaluate/report.py (stages). Generic diffusion pieces live in
components/common/diffusion.py.
"""
