"""Path converters: user-chosen names as one URL path segment, whatever their characters."""

from __future__ import annotations

import re

_ESCAPED = re.compile(r"%(25|2[Ff]|2[Ee])")


class NameConverter:
    """Any non-empty name (a method's, chosen by the user who uploaded it) as one path segment.

    ``reverse`` percent-encodes what is unsafe in a URL but keeps ``/``, and a browser resolves
    ``.`` and ``..`` segments before sending a request; so this converter escapes ``%`` and ``/``
    (and the dots of a name made only of dots) itself, and ``reverse`` then encodes those escapes
    once more. The server decodes a path once, leaving exactly these escapes for :meth:`to_python`
    to undo: ``a/b`` is ``/methods/a%252Fb/``, ``..`` is ``/methods/%252E%252E/``, and a name
    without them (``gvl``, ``my method``, ``é``) keeps its plain URL.
    """

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), value)

    def to_url(self, value: str) -> str:
        escaped = value.replace("%", "%25").replace("/", "%2F")
        return escaped.replace(".", "%2E") if set(escaped) == {"."} else escaped
