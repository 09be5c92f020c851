"""Where the process runs, as resource attributes (NeMo Lens's `nemo.lens.resources`).

    from lens.resources import detect_resource
    attributes = detect_resource()   # {'host.name': ..., 'process.pid': ..., 'slurm.job.id': ..., ...}

These are what lens's setup itself puts on every resource, detected by lens's C++ library (one detection for both
languages): host.name, process.pid and host.gpu.count (CUDA_VISIBLE_DEVICES, else NVML: lens does not run
nvidia-smi); slurm.* under SLURM (SLURM_JOB_ID set); k8s.* under Kubernetes (KUBERNETES_SERVICE_HOST set; lens does
not look at /var/run/secrets). A setup needs none of these calls: they are for a consumer's own use.
"""

import logging
import os
import urllib.parse

from lens import _native

__all__ = ["detect_resource", "detect_slurm", "detect_kubernetes", "detect_local", "encode_resource_attributes"]


def detect_resource():
    """Every detected attribute, as a dict."""
    return _native.detect_resource()


def _with_prefixes(*prefixes):
    return {key: value for key, value in detect_resource().items() if key.startswith(prefixes)}


def detect_local():
    """host.name, process.pid and host.gpu.count (when known)."""
    return _with_prefixes("host.", "process.")


def detect_slurm():
    """slurm.* from SLURM's variables; {} outside SLURM."""
    return _with_prefixes("slurm.")


def detect_kubernetes():
    """k8s.* from the downward API's variables; {} outside Kubernetes."""
    return _with_prefixes("k8s.")


OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
# The variable as this process inherited it, before it added anything: encoding against the live value would make
# keys pile up in a launcher that re-execs or spawns in a loop.
_INHERITED = os.environ.get(OTEL_RESOURCE_ATTRIBUTES, "")


def encode_resource_attributes(attributes, inherited=None):
    """A value of OTEL_RESOURCE_ATTRIBUTES that carries `attributes` to a child process (a checkpoint worker, a
    relaunch) after `inherited` (default: this process's inherited value; "" starts clean). Values are
    percent-encoded (lens and the OpenTelemetry SDKs decode them), None values left out; a key holding ',' or '='
    cannot be carried and is left out with a warning. A later key wins over an inherited one of the same name.
    The environment is not changed: the caller puts the value where the child will read it."""
    if not hasattr(attributes, "items"):
        raise TypeError(f"encode_resource_attributes: a mapping of attribute names to values, not "
                        f"{type(attributes).__name__}")
    if inherited is not None and not isinstance(inherited, str):
        raise TypeError(f"encode_resource_attributes: inherited is a str, not {type(inherited).__name__}")
    base = (_INHERITED if inherited is None else inherited).strip().strip(",")
    parts = [base] if base else []
    for key, value in attributes.items():
        if value is None:
            continue
        name = str(key).strip()
        if not name or "," in name or "=" in name:
            logging.getLogger("lens").warning("lens: the resource attribute key %r cannot be carried in %s (',' and "
                                              "'=' have no encoding there): left out", key, OTEL_RESOURCE_ATTRIBUTES)
            continue
        parts.append(f"{name}={urllib.parse.quote(str(value), safe='')}")
    return ",".join(parts)
