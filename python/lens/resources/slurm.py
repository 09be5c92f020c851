"""NeMo Lens's `nemo.lens.resources.slurm`: detect_slurm (lens.resources has it)."""

from lens.resources import detect_slurm

__all__ = ["detect_slurm"]
