"""The maintainer's test-split secret: what keeps a hidden split from being rebuilt.

A dataset spec with ``secret_test=True`` draws its test split from a secret string that is
never in the repository (``QVAL_TEST_SPLIT_SECRET``): the tasks at the test positions of the
split cycle are replaced by instances drawn from secret-derived seeds
(:meth:`~qval.envs.base.Environment.hide_tasks`), the test trajectories' actor, sample and
candidate RNGs are seeded from it, and the test split's published fingerprint is an HMAC keyed
by it (:func:`fingerprint_key`), so a guessed test split cannot be confirmed.  Train and dev
never depend on it, so anyone rebuilds them exactly; without the secret the pipeline builds
only them.

Every value is ``HMAC-SHA256(secret, "<slug>@<version>/<purpose>/...")`` (:func:`derive`), so
datasets and purposes never share a seed.  For development and tests a random secret is
written once to ``$QVAL_DATA_DIR/test_split_secret`` (:func:`local_secret`).

Django-free.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

ENV_VAR = "QVAL_TEST_SPLIT_SECRET"
"""The environment variable holding the maintainer's secret."""

SECRET_FILE = "test_split_secret"
"""The file under ``QVAL_DATA_DIR`` holding a generated local secret (development and tests)."""


def derive(secret: str, key: str, *parts: object) -> bytes:
    """``HMAC-SHA256(secret, key + "/" + "/".join(parts))`` — 32 bytes; ``key`` is ``slug@version``."""
    if not secret:
        raise ValueError("the test-split secret is empty")
    message = "/".join([key, *(str(p) for p in parts)]).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).digest()


def derive_seed(secret: str, key: str, *parts: object) -> int:
    """A 63-bit integer seed derived from the secret (far too many to search)."""
    return int.from_bytes(derive(secret, key, *parts)[:8], "big") >> 1


def rng_seed(secret: str, key: str) -> str:
    """The seed string of the test trajectories' RNGs (``random.Random(f"{seed}/actor/{i}")`` etc.)."""
    return "hidden-" + derive(secret, key, "rng").hex()


def fingerprint_key(secret: str, key: str) -> bytes:
    """The HMAC key of the test split's published fingerprint."""
    return derive(secret, key, "fingerprint")


def local_secret(data_dir: str | Path) -> str:
    """The secret in ``data_dir/test_split_secret``, generated (256 random bits, mode 0600) when missing."""
    path = Path(data_dir) / SECRET_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)  # never replaces a secret another process wrote first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


def configured_secret(data_dir: str | Path | None = None) -> str | None:
    """``$QVAL_TEST_SPLIT_SECRET``, else the local secret file under ``data_dir`` (or
    ``$QVAL_DATA_DIR``) when one exists; ``None`` when neither (never generates one)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        return value
    folder = data_dir if data_dir is not None else os.environ.get("QVAL_DATA_DIR")
    if folder is not None and (Path(folder) / SECRET_FILE).is_file():
        return (Path(folder) / SECRET_FILE).read_text().strip() or None
    return None
