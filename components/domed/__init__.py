"""DomED: domain-aware ensemble distillation for domain generalization (ICML 2026), on RotatedDigits."""
