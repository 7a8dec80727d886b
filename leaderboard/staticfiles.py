"""A static-files finder for the plotly.js bundled with the installed ``plotly`` package.

The charts (aggregates, critical-difference diagram) are rendered by Plotly in the
browser.  The site must work offline, so instead of a CDN it serves
``static/vendor/plotly.min.js``, the exact file of the installed plotly version (the one
``plotly.io.to_html`` writes figures for); ``collectstatic`` collects it like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS = "vendor/plotly.min.js"
"""The static path of plotly.js (``{% static 'vendor/plotly.min.js' %}``)."""

_PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    """Finds :data:`PLOTLY_JS` and nothing else."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=_PACKAGE_DATA)
        self.storage.prefix = "vendor"  # type: ignore[attr-defined]  # read by collectstatic

    def check(self, **kwargs: Any) -> list[Any]:
        """No configuration to check."""
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        """The absolute path of ``plotly.min.js`` when ``path`` is :data:`PLOTLY_JS`."""
        if path != PLOTLY_JS:
            return [] if find_all else ""
        found = str(_PACKAGE_DATA / "plotly.min.js")
        return [found] if find_all else found

    def list(self, ignore_patterns: list[str] | None) -> Iterator[tuple[str, FileSystemStorage]]:
        """``plotly.min.js`` in its storage (collected as :data:`PLOTLY_JS`)."""
        yield "plotly.min.js", self.storage
