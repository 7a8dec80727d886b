"""The first upload handler: it stops keeping an uploaded file once it passes the largest size
the site accepts (``QVAL_MAX_UPLOAD_BYTES`` or ``QVAL_MAX_CONTAINER_BYTES``), so an oversized body is
never written to disk in full; the views then answer 413 with :func:`too_large`'s reason."""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.http import HttpRequest

_KEY = "qval.upload_too_large"


class CappedUploadHandler(FileUploadHandler):
    """Skip (drop) an uploaded file whose bytes pass the cap; the other handlers store the rest as usual."""

    def __init__(self, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self.cap = max(settings.QVAL_MAX_UPLOAD_BYTES, settings.QVAL_MAX_CONTAINER_BYTES)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > self.cap:
            if self.request is not None:
                self.request.META[_KEY] = (f"the file {self.file_name!r} is larger than {self.cap / 2**20:.0f} MiB, "
                                           "the most this site accepts; it was not stored")
            raise SkipFile
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler builds the file


def too_large(request: HttpRequest) -> str | None:
    """Why an upload of ``request`` was dropped by :class:`CappedUploadHandler`, if it was."""
    return request.META.get(_KEY)
