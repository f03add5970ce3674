"""ServerError: an HTTP status with GCS's JSON error reason and XML error code (replies.py renders it)."""
from __future__ import annotations


class ServerError(Exception):
    """An error with an HTTP status and a GCS error reason; rendered as JSON or XML by the API it came from."""

    def __init__(self, code: int, message: str, reason: str = "", xml_code: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "error")
        self.xml_code = xml_code or _XML_CODES.get(code, "Error")


_REASONS = {400: "invalid", 401: "required", 403: "forbidden", 404: "notFound", 409: "conflict",
            412: "conditionNotMet", 416: "requestedRangeNotSatisfiable", 429: "rateLimitExceeded",
            503: "backendError", 304: "notModified"}
_XML_CODES = {400: "InvalidArgument", 401: "AuthenticationRequired", 403: "AccessDenied",
              404: "NoSuchKey", 409: "BucketNotEmpty", 412: "PreconditionFailed",
              416: "InvalidRange", 429: "SlowDown", 503: "ServiceUnavailable"}
