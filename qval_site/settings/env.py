"""The one reader of the environment the settings use: django-environ's ``Env``, less two of its habits, so that a
variable means what it meant when the settings read ``os.environ`` (``tests/test_settings.py``): a value that begins
with ``$`` is that value (not the name of another variable to read), and a number or a flag is read by Python's
``float`` and by the words ``1``/``true``/``yes``/``on`` alone (any case), not by django-environ's looser rules
(``1e3`` is a thousand, not 13; ``2`` is no flag)."""

from __future__ import annotations

from typing import Any

import environ


class Env(environ.Env):
    """django-environ's reader with this project's readings of a float, a flag and a value beginning with ``$``."""

    TRUE_WORDS: tuple[str, ...] = ("1", "true", "yes", "on")
    """What a flag holds to be on (``DEBUG``, ``QVAL_INPROCESS_WORKER``, ``QVAL_CONTAINER_GPU``)."""

    def get_value(self, var: str, cast: Any = None, default: Any = environ.Env.NOTSET,
                  parse_default: bool = False) -> Any:
        """The value of ``var`` cast by ``cast`` (see ``environ.Env``), a value beginning with ``$`` included."""
        raw = self.ENVIRON.get(f"{self.prefix}{var}")
        if isinstance(raw, str) and raw.startswith("$"):
            return self.parse_value(raw, cast or (type(default) if default not in (None, self.NOTSET) else None))
        return super().get_value(var, cast=cast, default=default, parse_default=parse_default)

    @classmethod
    def parse_value(cls, value: str, cast: Any) -> Any:
        """``value`` as ``cast``: a float by ``float``, a flag by :data:`TRUE_WORDS`, the rest as django-environ."""
        if cast is float:
            return float(value)
        if cast is bool:
            return value.strip().lower() in cls.TRUE_WORDS
        return super().parse_value(value, cast)


env = Env()


def names(var: str, default: str = "") -> list[str]:
    """The comma-separated variable ``var`` (else ``default``) as its items, each stripped, empty ones left out."""
    return [item.strip() for item in env.str(var, default=default).split(",") if item.strip()]
