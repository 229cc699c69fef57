"""anompi — Anom-pi-style (reconstructed) active video anomaly understanding with temporal
operators and interactive DPO (iDPO) on a procedural surveillance-video environment."""
