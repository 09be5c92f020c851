"""The logging bridge on an exporting rank: records below and above its level, outside and inside a span, with
`extra` fields, %-formatting, an exception, and each level's severity."""
import logging
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="default", NEMO_LENS_LOGS_ENABLED="1",
                  NEMO_LENS_METRICS_ENABLED="0")

from nemo.lens import NemoLensConfig, setup_telemetry  # noqa: E402
from nemo.lens.helpers import span_cm  # noqa: E402
from nemo.lens.logging_bridge import setup_logging_bridge  # noqa: E402

handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1)
setup_logging_bridge("parity", logging.INFO)
log = logging.getLogger("parity")
log.setLevel(logging.DEBUG)
log.info("outside any span")
with span_cm("with.logs"):
    log.warning("inside %s", "a span", extra={"parity.step": 7, "parity.phase": "train"})
    log.debug("below the bridge's level")
    log.error("an error")
    log.critical("critical")
    try:
        raise ValueError("bad shape")
    except ValueError:
        log.exception("failed")
logging.getLogger("parity.child").info("from a child logger")
handle.shutdown()
