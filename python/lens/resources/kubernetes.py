"""NeMo Lens's `nemo.lens.resources.kubernetes`: detect_kubernetes (lens.resources has it)."""

from lens.resources import detect_kubernetes

__all__ = ["detect_kubernetes"]
