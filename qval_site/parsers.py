"""Request-body parsers of the REST API."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from qval import safejson


class SafeJSONParser(JSONParser):
    """DRF's JSON parser on :func:`qval.safejson.load_json`: a body nested too deeply, too
    large, with repeated keys or ``NaN`` is a 400 naming the problem, never a RecursionError."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        data = stream.read(limit + 1) if limit is not None else stream.read()
        try:
            return safejson.load_json(data, max_bytes=limit)
        except safejson.JSONError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
