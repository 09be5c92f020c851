"""NeMo Lens's `nemo.lens.handle`: setup_telemetry and the TelemetryHandle it returns (lens.telemetry has them)."""

from lens.telemetry import TelemetryHandle, setup_telemetry

__all__ = ["TelemetryHandle", "setup_telemetry"]
