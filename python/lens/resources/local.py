"""NeMo Lens's `nemo.lens.resources.local`: detect_local (lens.resources has it)."""

from lens.resources import detect_local

__all__ = ["detect_local"]
