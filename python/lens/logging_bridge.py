"""Python `logging` into the logs signal (CONTRACT §8, §11).

    from lens.logging_bridge import setup_logging_bridge
    setup_logging_bridge()            # the root logger, records at INFO and above

Every record becomes an OpenTelemetry log record carrying the current span's trace and span ids, its severity
(number and level name), the logger's name (`logger.name`), where it was logged (`code.filepath`, `code.lineno`,
`code.function`) and its exception (`exception.type`, `exception.message`, `exception.stacktrace`). Where logs are
off (LOGS_ENABLED unset) or the rank does not export, setup_logging_bridge does nothing and returns None. The
logger's own level is left as it is: a record the logger filters out never reaches the bridge.
"""

import logging
import traceback

from lens import _native

__all__ = ["LensLoggingHandler", "setup_logging_bridge", "severity_number"]

_FATAL = 21


def severity_number(levelno):
    """OpenTelemetry's SeverityNumber of a logging level: the first of its range of four (DEBUG 5, INFO 9, WARNING
    13, ERROR 17, CRITICAL 21; below DEBUG, TRACE 1)."""
    if levelno >= logging.CRITICAL:
        return 21
    if levelno >= logging.ERROR:
        return 17
    if levelno >= logging.WARNING:
        return 13
    if levelno >= logging.INFO:
        return 9
    if levelno >= logging.DEBUG:
        return 5
    return 1


class LensLoggingHandler(logging.Handler):
    """A logging.Handler that sends each record to lens's logs signal."""

    def emit(self, record):
        severity = severity_number(record.levelno)
        if not _native.should_log(severity):
            return
        try:
            attributes = {
                "logger.name": record.name,
                "code.filepath": record.pathname,
                "code.lineno": record.lineno,
                "code.function": record.funcName,
            }
            if record.exc_info and record.exc_info[0] is not None:
                kind, exception, trace = record.exc_info
                attributes["exception.type"] = kind.__qualname__
                attributes["exception.message"] = str(exception)
                attributes["exception.stacktrace"] = "".join(traceback.format_exception(kind, exception, trace))
            _native.emit_log(severity, record.levelname, record.getMessage(), attributes,
                             int(record.created * 1_000_000_000))
        except Exception:  # noqa: BLE001: logging's own rule: a handler reports its failure, never raises
            self.handleError(record)


def setup_logging_bridge(logger_name="", level=logging.INFO):
    """Adds the bridge to `logger_name`'s logger (the root by default) for records at `level` and above, once.
    Returns the handler, or None where logs are not exported."""
    if not _native.should_log(_FATAL):
        return None
    logger = logging.getLogger(logger_name)
    for handler in logger.handlers:
        if isinstance(handler, LensLoggingHandler):
            handler.setLevel(level)
            return handler
    handler = LensLoggingHandler(level)
    logger.addHandler(handler)
    return handler
