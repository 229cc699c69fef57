"""caft — Concept Ablation Fine-Tuning (Casademunt, Juang et al.), CPU-scale reproduction with MiniLM."""
