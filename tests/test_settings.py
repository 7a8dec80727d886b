"""The settings resolve to what ``tests/data/settings_resolved.json`` holds: every variable, every default. It was
dumped from the single ``qval_site/settings.py`` before it was split by concern into ``qval_site/settings/`` (read
with django-environ), so the split changed nothing; a deliberate change of a setting regenerates it
(``python tests/test_settings.py > tests/data/settings_resolved.json``) and shows in the diff.

The dump holds the settings (by :data:`DUMP`, in a process of their own) under three environments:
:data:`DEFAULTS` (nothing set), :data:`EVERYTHING_SET` (every documented variable set to a value other than its
default) and :data:`ODD_VALUES`. Paths under the repository, the data folder and the
interpreter's prefix are written as ``<repo>``, ``<data>`` and ``<prefix>`` (the prefix first), so the dump holds on any machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESOLVED = REPO / "tests" / "data" / "settings_resolved.json"

DUMP = r"""
import json, os, sys
from pathlib import Path
import django.conf
s = django.conf.settings
names = sorted(n for n in dir(s._wrapped if s.configured else (s._setup() or s._wrapped)) if n.isupper())
replace = [(sys.prefix, "<prefix>"), (str(Path(sys.argv[1]).resolve()), "<repo>"), (os.environ["QVAL_DATA_DIR"], "<data>")]
def norm(value):
    text = repr(value)
    for old, new in replace:
        text = text.replace(old, new)
    return text
out = {n: norm(getattr(s, n)) for n in names}
if "SECRET_KEY" not in os.environ:
    out["SECRET_KEY"] = "<generated>"
if "QVAL_TEST_SPLIT_SECRET" not in os.environ:
    out["QVAL_TEST_SPLIT_SECRET"] = "<generated>"
print(json.dumps(out, indent=1, sort_keys=True))
"""

DEFAULTS: dict[str, str] = {}
EVERYTHING_SET: dict[str, str] = {
    "SECRET_KEY": "s3cret-key", "DEBUG": "yes", "ALLOWED_HOSTS": " a.example , b.example,,", "CSRF_TRUSTED_ORIGINS":
    "https://a.example, https://b.example", "DATABASE_URL": "postgres://u:p@db.example:5433/q",
    "CELERY_BROKER_URL": "redis://broker.example:6380/2", "QVAL_INPROCESS_WORKER": "on",
    "QVAL_TEST_SPLIT_SECRET": "split-secret", "QVAL_MAX_UPLOAD_MB": "12.5", "QVAL_TEST_QUOTA_PER_DAY": "7",
    "QVAL_BOOTSTRAP_RESAMPLES": "200", "QVAL_BUDGET_SCALE": "0.5", "QVAL_REFRESH_MIN_INTERVAL_S": "60",
    "QVAL_SPLIT_REFRESH_DAYS": "30", "QVAL_CACHE_URL": "redis://cache.example:6381/3",
    "QVAL_TRUSTED_PROXIES": "10.0.0.1, 192.168.0.0/16", "QVAL_USER_STORAGE_MB": "20",
    "QVAL_COMPARE_CONCURRENCY": "3", "QVAL_SCORING_WORK_PER_HOUR": "5000",
    "QVAL_THROTTLE_RATES": '{"compare_anon": "1/min", "new_scope_user": "2/h"}', "QVAL_SIGNUP_RATE": "2/h/ip",
    "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend", "DEFAULT_FROM_EMAIL": "q@example.org",
    "QVAL_RECEIVED_S": "100", "QVAL_SCORING_S": "200", "QVAL_LOG_FORMAT": "plain", "LOG_LEVEL": "DEBUG",
    "QVAL_MAX_CONTAINER_MB": "10", "QVAL_MAX_IMAGE_MB": "20", "QVAL_CONTAINER_ENGINE": "docker",
    "QVAL_CONTAINERS_CONF": "/etc/q/containers.conf", "QVAL_CONTAINER_WORK_ROOT": "/tmp/q-jobs",
    "QVAL_CONTAINER_IMAGE_CACHE": "/tmp/q-images", "QVAL_CONTAINER_IMAGE_CACHE_DAYS": "2",
    "QVAL_CONTAINER_TIMEOUT_S": "60", "QVAL_CONTAINER_MEMORY_MB": "512", "QVAL_CONTAINER_CPUS": "2.5",
    "QVAL_CONTAINER_GPU": "TRUE", "QVAL_CONTAINER_QUEUE_S": "300", "QVAL_CONTAINER_GRACE_S": "30",
    "QVAL_BACKBONES": '{"tiny": {"kind": "transformers", "path": "/models/tiny"}}',
    "QVAL_BACKBONE_TOKEN_BUDGET": "1000", "QVAL_VLLM_EXECUTABLE": "python standin", "QVAL_VLLM_STARTUP_S": "5",
    "QVAL_BASELINE_S": "50", "QVAL_BROKER_VISIBILITY_S": "7200", "QVAL_GPU_WORKERS": "remote",
    "QVAL_JOB_TOKEN_TTL_S": "99", "QVAL_HEARTBEAT_S": "3", "QVAL_HEARTBEAT_STALE_S": "9", "QVAL_WORKER_KEY": "wk",
    "QVAL_REAP_EVERY_S": "4", "QVAL_RESEND_AFTER_S": "5", "QVAL_RUN_QUEUE_S": "6", "QVAL_BUILD_STALL_S": "7",
    "QVAL_BUILD_QUEUE_S": "8",
}
ODD_VALUES: dict[str, str] = {
    "SECRET_KEY": "$not-a-variable-name", "DEBUG": "2", "QVAL_CONTAINER_GPU": "y", "QVAL_INPROCESS_WORKER": " On ",
    "QVAL_MAX_UPLOAD_MB": "1e1", "QVAL_HEARTBEAT_S": "2.5e0", "QVAL_BROKER_VISIBILITY_S": "0", "QVAL_CACHE_URL": "",
}
"""Values django-environ reads otherwise unless told (``$`` names another variable, ``2`` and ``y`` are flags that
are on, ``1e1`` is 11): read as they were before it."""
ENVIRONMENTS = {"defaults": DEFAULTS, "everything-set": EVERYTHING_SET, "odd-values": ODD_VALUES}


def resolved(variables: dict[str, str], data_dir: Path) -> dict[str, str]:
    """The settings ``qval_site.settings`` resolves to in a fresh process whose environment is ``variables`` (and
    only the interpreter's own: ``PATH``, ``HOME``), its data folder ``data_dir``."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""), "QVAL_DATA_DIR": str(data_dir),
           "DJANGO_SETTINGS_MODULE": "qval_site.settings", "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0",
           **variables}  # a fixed hash seed: a set prints in one order
    done = subprocess.run([sys.executable, "-c", DUMP, str(REPO)], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", sorted(ENVIRONMENTS))
def test_the_settings_resolve_as_dumped(name: str, tmp_path: Path) -> None:
    before = json.loads(RESOLVED.read_text())[name]
    now = resolved(ENVIRONMENTS[name], tmp_path)
    changed = {k: (before.get(k), now.get(k)) for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)}
    assert not changed, f"(dumped, now) of each setting that differs; if meant, regenerate the dump: {changed}"


def test_a_bad_value_is_refused_naming_its_variable(tmp_path: Path) -> None:
    """A value that cannot be read stops the start with the variable's name, as before the split."""
    env = {"PATH": os.environ.get("PATH", ""), "QVAL_DATA_DIR": str(tmp_path), "PYTHONPATH": str(REPO),
           "DJANGO_SETTINGS_MODULE": "qval_site.settings", "QVAL_GPU_WORKERS": "elsewhere"}
    done = subprocess.run([sys.executable, "-c", "import django.conf; django.conf.settings.DEBUG"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "QVAL_GPU_WORKERS must be 'local' or 'remote'" in done.stderr


if __name__ == "__main__":  # python tests/test_settings.py > tests/data/settings_resolved.json
    import tempfile

    with tempfile.TemporaryDirectory() as data:
        print(json.dumps({name: resolved(env, Path(data)) for name, env in ENVIRONMENTS.items()}, indent=1,
                         sort_keys=True))
