"""One account per mailbox: the rule that maps an email address to the mailbox it delivers to.

A researcher who gets more accounts gets more test submissions a day, and a plus-address
(``ada+2@example.org``) or, at Gmail, a dotted variant (``a.da@gmail.com``) of one's own address is
free to make. So an account is keyed on its *mailbox*, :func:`mailbox`, not on the literal address:
sign-up and adding an email address refuse a mailbox another account holds (:func:`check_free`),
and the unique :class:`accounts.models.Mailbox` row each address claims when it is saved
(:func:`claim_on_save`) refuses it at the database, whatever path the address is stored by.

Other spellings of one mailbox are what mail software folds on the way: compatibility characters
(``r3w@ｅxample.org``, full-width ``ｅ``, is delivered to ``r3w@example.org``: the IDNA step of sending
folds it), internationalised domains, quoted local parts (``"r3w"@example.org`` *is*
``r3w@example.org``). :func:`normalise` is the one address an account stores (NFKC, its domain in
IDNA's ASCII form, so what is stored, keyed and delivered to are one string) and refuses the forms no
real sign-up needs -- quoted or escaped local parts, comments, domain literals, a local part outside
ASCII, a domain label mixing scripts (``еxample.org`` with a Cyrillic ``е``) -- each with its reason.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, NoReturn

import idna
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from accounts.models import Mailbox

MAILBOX_TAKEN = ("An account already exists for this mailbox (addresses that differ only in case, in a +tag, in "
                 "full-width or other compatibility characters, in how the domain is written, or at Gmail in dots, "
                 "reach one mailbox).")
GMAIL_DOMAINS = frozenset({"gmail.com", "googlemail.com"})
LOCAL_SPECIALS = "!#$%&'*+-/=?^_`{|}~."
"""The characters besides ASCII letters and digits a local part may hold (RFC 5322's ``atext`` and the dot)."""
EAST_ASIAN = frozenset({"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA", "IDEOGRAPHIC", "HANGUL", "BOPOMOFO"})
"""Scripts a Chinese, Japanese or Korean domain label mixes (and may mix with Latin), after UTS 39's
*highly restrictive* profile; any other mixture of scripts in one label is refused."""


class MailboxTaken(IntegrityError):
    """An email address was stored for an account while another account holds its mailbox."""


def fold(email: str) -> str:
    """``email`` as mail software reads it before anything else: stripped and in Unicode NFKC, so that
    compatibility forms (full-width ``ｅ``, ``ℯ``, mathematical letters, ligatures) are their plain letters."""
    return unicodedata.normalize("NFKC", email.strip())


def normalise(email: str) -> str:
    """The address an account stores for ``email``: :func:`fold`-ed, its domain in IDNA's ASCII form
    (UTS 46 mapping: ``Ｅxample.ORG`` and ``münchen.de`` read as ``example.org`` and
    ``xn--mnchen-3ya.de``, the host mail is sent to). Raise a ``ValidationError`` naming what is
    wrong for a form no real sign-up needs: a quoted or escaped local part, a comment, an IP-literal
    domain, a character outside ASCII (or outside RFC 5322's ``atext``) before the ``@``, dots that
    start, end or double in the local part, a domain that is not a valid IDNA name or whose label
    mixes scripts (a Cyrillic ``е`` among Latin letters: a look-alike of another domain)."""
    text = fold(email)
    for position, char in enumerate(text, 1):
        if unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"}:
            _refuse(f"the address holds {_named(char)} at character {position}; remove it", "address_character")
    if text.startswith('"') or '"' in text.rpartition("@")[0]:
        _refuse("quoted local parts (\"name\"@example.org) are not accepted: write the address without quotes "
                "(name@example.org is the same mailbox)", "address_quoted")
    if text.count("@") != 1:
        _refuse(f"an address has exactly one @; this one has {text.count('@')}", "address_at")
    local, domain = text.split("@")
    return f"{_checked_local(local)}@{_checked_domain(domain)}"


def mailbox(email: str) -> str:
    """The mailbox ``email`` delivers to: the address in NFKC (:func:`fold`), lower-cased, a quoted
    local part read unquoted (``"r3w"`` is ``r3w``), the ``+tag`` of its local part dropped
    (plus-addressing: every major provider delivers ``name+tag@`` to ``name@``, and the few that do
    not lose nothing but an alias), the domain in IDNA's ASCII form (as :func:`normalise` stores it)
    and at Gmail (``gmail.com``, ``googlemail.com``) the dots of the local part dropped and the domain
    read as ``gmail.com``, as Gmail ignores both. Total: an address :func:`normalise` refuses (one
    stored before the rule) still has its mailbox, its domain read as Django's mail sending reads it."""
    local, _, domain = fold(email).rpartition("@")
    if len(local) >= 2 and local.startswith('"') and local.endswith('"'):
        local = re.sub(r"\\(.)", r"\1", local[1:-1])
    local = local.lower()
    local = local.split("+", 1)[0] or local
    domain = domain.rstrip(".")
    try:
        domain = idna.encode(domain, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        try:  # what Django's mail sending does with a stored name UTS 46 refuses (IDNA 2003: drops a ZWJ)
            domain = domain.encode("idna").decode("ascii").lower()
        except UnicodeError:
            domain = domain.lower()
    if domain in GMAIL_DOMAINS:
        local, domain = local.replace(".", "") or local, "gmail.com"
    return f"{local}@{domain}"


def _refuse(message: str, code: str) -> NoReturn:
    raise ValidationError(message, code=code)


def _named(char: str) -> str:
    return f"U+{ord(char):04X} ({unicodedata.name(char, 'an unnamed character')})"


def _checked_local(local: str) -> str:
    """``local`` if it is a plain dot-atom of ASCII (:data:`LOCAL_SPECIALS`), else refused."""
    if not local:
        _refuse("the address has nothing before the @", "address_local")
    if "(" in local or ")" in local:
        _refuse("comments in an address (the part in parentheses) are not accepted; leave them out",
                "address_comment")
    for position, char in enumerate(local, 1):
        if not (char.isascii() and (char.isalnum() or char in LOCAL_SPECIALS)):
            _refuse(f"the name before the @ holds {_named(char)} at character {position}; only ASCII letters, "
                    f"digits and {' '.join(LOCAL_SPECIALS[:-1])} (and single dots between them) are accepted there",
                    "address_local")
    if local.startswith(".") or local.endswith(".") or ".." in local:
        _refuse("a dot may not start or end the name before the @, nor follow another dot", "address_local")
    if len(local) > 64:
        _refuse(f"the name before the @ has {len(local)} characters; at most 64 are delivered", "address_local")
    return local


def _checked_domain(domain: str) -> str:
    """``domain`` in IDNA's ASCII form, refused when it is a literal, not a valid IDNA name, or mixes scripts."""
    if domain.startswith("["):
        _refuse("IP-address domains (name@[192.0.2.1]) are not accepted; give the mail domain's name", "address_domain")
    domain = domain[:-1] if domain.endswith(".") else domain
    try:
        ascii_domain = idna.encode(domain, uts46=True).decode("ascii")
        mapped = idna.uts46_remap(domain)
    except (idna.IDNAError, UnicodeError) as exc:
        _refuse(f"the domain {domain!r} is not a valid domain name: {exc}", "address_domain")
    if "." not in ascii_domain:
        _refuse(f"the domain {domain!r} has no dot; give the full mail domain (example.org)", "address_domain")
    for label in mapped.split("."):
        if len(scripts := _scripts(label)) > 1:
            _refuse(f"the domain label {label!r} mixes {' and '.join(sorted(s.title() for s in scripts))} letters, "
                    "as a look-alike of another domain would (IDN registration rules refuse such labels)", "address_domain")
    return ascii_domain


def _scripts(label: str) -> set[str]:
    """The scripts of ``label``'s letters (the first word of each letter's Unicode name: LATIN, CYRILLIC,
    GREEK, CJK, ...), with the East Asian ones (:data:`EAST_ASIAN`, and Latin beside them) counted as one."""
    scripts = {unicodedata.name(c, "UNKNOWN").split()[0] for c in label if unicodedata.category(c).startswith("L")}
    if scripts & EAST_ASIAN:
        scripts = (scripts - EAST_ASIAN - {"LATIN"}) | {"CJK"}
    return scripts


def check_free(email: str, user: AbstractBaseUser | None = None) -> None:
    """Raise a ``ValidationError`` when an account other than ``user`` holds the mailbox of ``email``."""
    taken = Mailbox.objects.filter(address=mailbox(email))
    if user is not None and user.pk is not None:
        taken = taken.exclude(user_id=user.pk)
    if taken.exists():
        raise ValidationError(MAILBOX_TAKEN, code="mailbox_taken")


def claim_on_save(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Before an email address is stored, claim its mailbox for the address's account; raise
    :class:`MailboxTaken` (the address is not stored) when another account holds it."""
    address = mailbox(instance.email)
    owner, _ = Mailbox.objects.get_or_create(address=address, defaults={"user_id": instance.user_id})
    if owner.user_id != instance.user_id:
        raise MailboxTaken(f"{MAILBOX_TAKEN} ({address!r} belongs to account {owner.user_id})")


def release_on_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    """After an email address is changed or deleted, free the account's mailboxes none of its addresses reach."""
    from allauth.account.models import EmailAddress

    kept = {mailbox(e) for e in EmailAddress.objects.filter(user_id=instance.user_id).values_list("email", flat=True)}
    Mailbox.objects.filter(user_id=instance.user_id).exclude(address__in=kept).delete()
