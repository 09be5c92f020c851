"""Python `logging` into the logs signal (CONTRACT §8, §11).

    from lens.logging_bridge import setup_logging_bridge
    setup_logging_bridge()            # the root logger, records at INFO and above

Every record becomes an OpenTelemetry log record as OpenTelemetry Python's LoggingHandler (NeMo Lens's bridge)
makes it: the current span's trace and span ids, its severity (the number, and the log data model's name: WARN for
WARNING, FATAL for CRITICAL), the formatted message, the record's `extra` fields as attributes, where it was logged
(`code.file.path`, `code.function.name`, `code.line.number`) and its exception (`exception.type`,
`exception.message`, `exception.stacktrace`); and the logger's name as `logger.name` (OpenTelemetry Python makes it
the record's instrumentation scope; lens has one scope). Where logs are off (LOGS_ENABLED unset) or the rank does not
export, setup_logging_bridge does nothing and returns None. The logger's own level is left as it is: a record the
logger filters out never reaches the bridge.
"""

import logging
import traceback

from lens import _native

__all__ = ["LensLoggingHandler", "setup_logging_bridge", "severity_number"]

_FATAL = 21
# The log data model's short names where Python's level names differ.
_SEVERITY_TEXT = {"WARNING": "WARN", "CRITICAL": "FATAL"}
# What every LogRecord has (and a Formatter adds): anything else on a record came from `extra`.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_ATTRIBUTE_TYPES = (bool, int, float, str)


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
            _native.emit_log(severity, _SEVERITY_TEXT.get(record.levelname, record.levelname), record.getMessage(),
                             _attributes(record), int(record.created * 1_000_000_000))
        except Exception:  # noqa: BLE001: logging's own rule: a handler reports its failure, never raises
            self.handleError(record)


def _attributes(record):
    attributes = {key: value for key, value in vars(record).items()
                  if key not in _RECORD_FIELDS and _is_attribute_value(value)}
    attributes.update({"logger.name": record.name, "code.file.path": record.pathname,
                       "code.function.name": record.funcName, "code.line.number": record.lineno})
    if record.exc_info and record.exc_info[0] is not None:
        kind, exception, trace = record.exc_info
        attributes["exception.type"] = kind.__name__
        if exception is not None and exception.args:
            attributes["exception.message"] = str(exception.args[0])
        attributes["exception.stacktrace"] = "".join(traceback.format_exception(kind, exception, trace))
    return attributes


def _is_attribute_value(value):
    """What an attribute can hold: a bool, int, float or str, or a list or tuple of them."""
    if isinstance(value, _ATTRIBUTE_TYPES):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, _ATTRIBUTE_TYPES) for v in value)


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
