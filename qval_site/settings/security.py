"""Who may do what: the secret key and the test-split secret, hosts, accounts (django-allauth), the proxies the
client address is read behind, and mail.

``SECRET_KEY``              default: a random key generated once and kept in ``QVAL_DATA_DIR``.
``ALLOWED_HOSTS``           comma-separated (default ``127.0.0.1,localhost,testserver``).
``QVAL_TEST_SPLIT_SECRET``  the maintainer's secret the hidden test splits are drawn from (``qval.hidden``);
                            default: a random one generated once in ``QVAL_DATA_DIR/test_split_secret``.
``QVAL_TRUSTED_PROXIES``    comma-separated addresses or networks of the reverse proxies in front of the
                            site; ``X-Forwarded-For`` is read only from these (default none).
``QVAL_SIGNUP_RATE``        sign-ups per client address, allauth's syntax (default ``5/h/ip``).
``EMAIL_BACKEND``           default: the console (confirmation links are printed); SMTP settings as Django's.
``CSRF_TRUSTED_ORIGINS``    comma-separated origins trusted for unsafe requests (default none).
``DEFAULT_FROM_EMAIL``      the sender of the site's mail (default ``QVal Leaderboard <noreply@localhost>``).
"""

from __future__ import annotations

import ipaddress
import secrets

from django.core.exceptions import ImproperlyConfigured

from qval import hidden

from .base import QVAL_DATA_DIR
from .env import env, names


def _secret_key() -> str:
    """``SECRET_KEY`` from the environment, else a random key kept in ``QVAL_DATA_DIR``."""
    key = env.str("SECRET_KEY", default="")
    if key:
        return key
    path = QVAL_DATA_DIR / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50), encoding="ascii")
        path.chmod(0o600)
    return path.read_text(encoding="ascii").strip()


SECRET_KEY = _secret_key()

# The maintainer's test-split secret (qval.hidden): the test splits of datasets built with
# secret_test are drawn from it. Production sets it; development and tests get a random one
# generated once in QVAL_DATA_DIR/test_split_secret. Never in the repository.
QVAL_TEST_SPLIT_SECRET = env.str(hidden.ENV_VAR, default="").strip() or hidden.local_secret(QVAL_DATA_DIR)

ALLOWED_HOSTS = names("ALLOWED_HOSTS", default="127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = names("CSRF_TRUSTED_ORIGINS")


AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

# Accounts (django-allauth): sign-up asks for an email address and sends a confirmation link;
# an account submits to a hidden (test) split only once an address of it is verified
# (submissions.services.check_request). Sign-ups are rate-limited per client address
# (accounts.clients), and one mailbox holds one account (accounts.mailboxes).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_EMAIL_VERIFICATION = "optional"
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_CONFIRM_EMAIL_ON_GET = True
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_SIGNUP_REDIRECT_URL = "upload"
ACCOUNT_RATE_LIMITS = {"signup": env.str("QVAL_SIGNUP_RATE", default="5/h/ip")}
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
ACCOUNT_FORMS = {"signup": "accounts.forms.SignupForm", "add_email": "accounts.forms.AddEmailForm"}
# The reverse proxies whose X-Forwarded-For the client address is read from (accounts/clients.py).
QVAL_TRUSTED_PROXIES = names("QVAL_TRUSTED_PROXIES")
for _proxy in QVAL_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError as exc:
        raise ImproperlyConfigured(f"QVAL_TRUSTED_PROXIES: {_proxy!r} is not an address or network: {exc}") from exc
# Development and tests print mail to the console; set EMAIL_BACKEND (and EMAIL_HOST etc.) to send it.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="QVal Leaderboard <noreply@localhost>")
