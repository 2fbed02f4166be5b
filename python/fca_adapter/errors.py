"""The error an adapter reports to fca as a message (without a traceback: the message says it all)."""


class AdapterError(Exception):
    """Raised by an adapter for a problem to report to fca as an error message."""
