"""Creating submissions: argument checks, quota, storage, validation, queueing.

The web form and the API both call :func:`create_submission` (a predictions file) or
:func:`create_container_submissions` (a method container), so both give the same errors.
Problems with the request itself (unknown dataset, split, target; quota exceeded; storage
cap) raise :class:`SubmissionRejected` and create nothing. The request only stores the file
and answers ``received``; a worker checks it (:func:`validate_submission`,
:func:`inspect_archive`). Problems with the file make a submission that ends ``failed`` with
every problem listed, and touch nothing else.

A container upload may name several datasets and splits: it becomes one submission per
(dataset, split), all sharing the one stored archive, each queued on its own and ending on
its own. Each is sent and run through :mod:`submissions.lifecycle`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from accounts.access import has_verified_email
from budgets import services as budgets
from leaderboard.loading import split_index
from leaderboard.models import MODALITY_CHOICES, Dataset
from qval import containers as qc
from qval import predictions as qpred
from qval.schema import PUBLIC_SPLITS, TARGETS

from . import lifecycle, scoring
from .models import Submission

log = logging.getLogger(__name__)


class SubmissionRejected(ValueError):
    """The request cannot become a submission; ``field`` names the offending input."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.status = status


@dataclass(frozen=True)
class MethodCard:
    """What a row tells about its method (its name is the request's ``method_name``) and who sees it:
    ``public`` rows are on the boards and figures and have an anonymous permalink; private ones are
    their owner's only.  ``public=None`` leaves it to the split (:meth:`on`)."""

    public: bool | None = None
    description: str = ""
    paper_url: str = ""
    code_url: str = ""
    open_weights: bool | None = None

    def on(self, split: str) -> MethodCard:
        """The card of a result on ``split``: where it says nothing of ``public``, public on a hidden split and
        private on a public one (a dev result is its submitter's self-check, shown to others only once they
        publish it)."""
        return self if self.public is not None else dataclasses.replace(self, public=split not in PUBLIC_SPLITS)

    def fields(self) -> dict[str, object]:
        """The :class:`~submissions.models.Submission` fields it fills (of a card :meth:`on` a split)."""
        assert self.public is not None, "a card's visibility is decided on its split first (MethodCard.on)"
        return {"public": self.public, "description": self.description.strip(), "paper_url": self.paper_url.strip(),
                "code_url": self.code_url.strip(), "open_weights": self.open_weights}


CARD_DESCRIPTION_MAX = 5000
"""The longest method-card description, in characters."""


def check_card(card: MethodCard, split: str) -> None:
    """Refuse (:class:`SubmissionRejected`, naming the field) a method card that a result on ``split`` cannot have.

    Any card: a description over :data:`CARD_DESCRIPTION_MAX` characters, or a paper/code URL that is not an
    ``http(s)`` address of at most 300 characters.  A *public* result on a hidden split (the test split, the one the
    boards rank and the permalinks show) must also describe its method: its card is what a reader of the board
    gets.  Its display name is the request's method name (:func:`check_method_name`) and its backbone the request's
    backbone, where empty (or ``none``) says the method uses no model.  A dev result, or a private one, needs no
    description: nobody else sees it.
    """
    card = card.on(split)
    if len(card.description) > CARD_DESCRIPTION_MAX:
        raise SubmissionRejected(
            "description", f"description is {len(card.description)} characters; the limit is {CARD_DESCRIPTION_MAX}")
    if card.public and split not in PUBLIC_SPLITS and not card.description.strip():
        raise SubmissionRejected(
            "description", f"description is required for a public {split}-split result: its method card is shown on "
            "the boards and its public page, so say in a sentence or two what the method is and how it scores "
            "(paper and code URLs are optional); or make the result private")
    for name in ("paper_url", "code_url"):
        url = getattr(card, name).strip()
        if not url:
            continue
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise SubmissionRejected(name, f"{name} {url[:80]!r} is not an http(s) address") from None
        if len(url) > 300:
            raise SubmissionRejected(name, f"{name} is {len(url)} characters long; the limit is 300")


def card_of(sub: Submission) -> MethodCard:
    """The method card ``sub`` holds now."""
    return MethodCard(public=sub.public, description=sub.description, paper_url=sub.paper_url,
                      code_url=sub.code_url, open_weights=sub.open_weights)


def change_card(user, pk: int, **changes: object) -> Submission:  # type: ignore[no-untyped-def]
    """Set the fields ``changes`` names of the method card of ``user``'s submission ``pk`` (``public``,
    ``description``, ``paper_url``, ``code_url``, ``open_weights``; the others stay) and return it.

    Only the submission's owner may (another account's, a baseline run or an imported row answers as unknown:
    :class:`SubmissionRejected` on ``id`` with 404), and only once it has ended, so that no worker writes it
    meanwhile.  The whole new card is checked as an upload's is (:func:`check_card`): making a test result public
    needs its description.  Saving a finished row bumps the results version, so the boards, figures, aggregates
    and their caches read the change at once (:mod:`board.evaluations`).
    """
    with transaction.atomic():
        sub = (Submission.objects.select_for_update()
               .filter(pk=pk, user_id=getattr(user, "pk", None), source=Submission.SOURCE_USER).first())
        if sub is None:
            raise SubmissionRejected("id", f"no submission {pk} of yours", status=404)
        if not sub.is_final:
            raise SubmissionRejected(
                "id", f"submission {pk} is {sub.state}: its card can be changed once it has finished or failed",
                status=409)
        card = dataclasses.replace(card_of(sub), **changes)  # type: ignore[arg-type]
        card = card if card.public is not None else dataclasses.replace(card, public=sub.public)  # unchanged
        check_card(card, sub.split)
        fields = card.fields()
        for name, value in fields.items():
            setattr(sub, name, value)
        sub.save(update_fields=list(fields))
    log.info("submission %s: card changed (%s); public=%s", pk, ", ".join(sorted(changes)), sub.public)
    return sub


@dataclass(frozen=True)
class SubmissionRequest:
    """What a user asks to have scored, with its method card."""

    dataset: str
    split: str
    target: str
    method_name: str
    backbone: str = ""
    modality: str = "text"
    card: MethodCard = field(default_factory=MethodCard)


def resolve_dataset(key: str) -> Dataset:
    """A dataset by ``slug@version`` or by ``slug`` (its newest version)."""
    ds = Dataset.lookup(key)
    if ds is None:
        known = ", ".join(sorted({d.key for d in Dataset.objects.all()})) or "none loaded"
        raise SubmissionRejected("dataset", f"unknown dataset {key!r}; available: {known}", status=404)
    return ds


def quota_used(user, now=None) -> int:  # type: ignore[no-untyped-def]
    """Test-split submissions of ``user`` in the last 24 hours that count towards the quota.

    Submissions that failed through the platform's fault, and re-runs of a container on a fresh hidden split,
    do not count.
    """
    now = now or timezone.now()
    return (
        Submission.objects.filter(user=user, split="test", received_at__gte=now - timedelta(days=1))
        .exclude(Q(state=Submission.FAILED) & Q(fault=Submission.FAULT_SYSTEM))
        .exclude(provenance__has_key="rerun_of")  # the platform's re-run on a fresh split (submissions.reruns)
        .count()
    )


SCORING_WORK_WINDOW = timedelta(hours=1)
"""The window ``QVAL_SCORING_WORK_PER_HOUR`` counts scoring work over."""


def scoring_work(user, now=None) -> list[tuple[datetime, int]]:  # type: ignore[no-untyped-def]
    """``(when it was read, prediction rows)`` of each predictions file of ``user`` read in the
    last hour, oldest first.

    A file counts its rows (ids x samples) from the moment its check has read it -- queued
    for scoring, refused for the work limit, or refused as invalid (the rows its reading cost:
    :attr:`qval.predictions.ValidationFailed.rows`; a 77 KB Parquet file of 10^7 dictionary rows
    costs seconds to fail) -- unless it then failed through the platform's fault.
    """
    now = now or timezone.now()
    read = (
        Submission.objects.filter(user=user, kind=Submission.KIND_FILE, validating_at__gte=now - SCORING_WORK_WINDOW,
                                  coverage__has_key="rows")
        .exclude(Q(state=Submission.FAILED) & Q(fault=Submission.FAULT_SYSTEM))
        .order_by("validating_at")
        .values_list("validating_at", "coverage")
    )
    return [(when, int(coverage["rows"])) for when, coverage in read]


def scoring_work_refusal(user, rows: int = 0) -> str | None:  # type: ignore[no-untyped-def]
    """Why ``user`` may not have a file of ``rows`` prediction rows scored now (``None``: they may).

    With ``rows`` 0 (an upload not read yet) only a window already at the limit refuses.
    The message names the limit and when enough of the window frees up.
    """
    limit = settings.QVAL_SCORING_WORK_PER_HOUR
    counted = scoring_work(user)
    used = sum(n for _, n in counted)
    if used < limit and used + rows <= limit:
        return None
    left, frees = used, None
    for when, n in counted:  # the oldest files leave the window first
        left -= n
        frees = when + SCORING_WORK_WINDOW
        if left < limit and left + rows <= limit:
            break
    asking = f" and this file has {rows:,}" if rows else ""
    when = (f"; enough of it frees up at {frees:%Y-%m-%d %H:%M:%S} UTC" if frees and left + rows <= limit
            else "; this file alone is over the limit")
    return (f"scoring work limit reached: your files read in the last hour have {used:,} prediction rows "
            f"(ids x samples){asking}; the limit is {limit:,} rows per account per hour "
            f"(QVAL_SCORING_WORK_PER_HOUR){when}")


def storage_used(user) -> int:  # type: ignore[no-untyped-def]
    """Bytes of the files ``user``'s submissions keep stored (an archive shared by several counts once)."""
    sizes = (Submission.objects.filter(user=user).exclude(file="")
             .values("file").annotate(size=Max("size_bytes")).values_list("size", flat=True))
    return int(sum(sizes))


def check_storage(user, size: int) -> None:  # type: ignore[no-untyped-def]
    """Refuse an upload of ``size`` bytes that would take ``user`` past ``QVAL_USER_STORAGE_BYTES``."""
    limit, used = settings.QVAL_USER_STORAGE_BYTES, storage_used(user)
    if used + size > limit:
        raise SubmissionRejected(
            "file", f"storage limit reached: your stored uploads take {used / 2**20:.1f} MiB and this one "
            f"{size / 2**20:.1f} MiB; the limit is {limit / 2**20:.0f} MiB per account", status=413)


UNPRINTED_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
"""Unicode categories a method name may not hold: controls (newline, tab, NUL), format characters
(zero-width and bidirectional overrides, which make one name look like another) and line separators."""


def check_method_name(name: str) -> None:
    """Refuse (:class:`SubmissionRejected`) a method name that is blank, longer than 100 characters or
    holds a character that is not printed (:data:`UNPRINTED_CATEGORIES`). Anything printed is allowed --
    ``/``, quotes, ``<``, any script: every page, URL and export handles it."""
    if not name.strip():
        raise SubmissionRejected("method_name", "method_name is required")
    if len(name) > 100:
        raise SubmissionRejected("method_name", "method_name is longer than 100 characters")
    for position, char in enumerate(name, 1):
        if unicodedata.category(char) in UNPRINTED_CATEGORIES:
            what = unicodedata.name(char, "a control character")
            raise SubmissionRejected(
                "method_name", f"method_name holds U+{ord(char):04X} ({what}) at character {position}, which is "
                "not printed; use letters, digits, spaces and punctuation")


def check_request(user, req: SubmissionRequest, quota_needed: int = 1) -> Dataset:  # type: ignore[no-untyped-def]
    """Validate the request's fields and the quota; return the dataset.

    Call it inside a transaction after :func:`~submissions.lifecycle.lock_account`, and create the submissions in
    that same transaction.

    ``quota_needed``: how many test-split submissions the whole request creates (a container
    upload naming several test datasets needs one each).
    """
    dataset = resolve_dataset(req.dataset)
    splits = set(dataset.states.values_list("split", flat=True).distinct())
    if req.split not in splits:
        raise SubmissionRejected("split", f"dataset {dataset.key} has no split {req.split!r}; choose one of {sorted(splits)}")
    if req.target not in TARGETS:
        raise SubmissionRejected("target", f"unknown target {req.target!r}; choose one of {list(TARGETS)}")
    if req.modality not in {m for m, _ in MODALITY_CHOICES}:
        raise SubmissionRejected("modality", f"unknown modality {req.modality!r}; choose text or image")
    if req.split not in PUBLIC_SPLITS and not has_verified_email(user):
        raise SubmissionRejected(
            "split", f"verify your email address before submitting to the hidden {req.split} split: follow the "
            "link we emailed you at sign-up (or add an address under /accounts/email/); the dev split needs no "
            "verification", status=403)
    check_method_name(req.method_name)
    if req.split == "test" and (newer := dataset.superseded_test_split()) is not None:
        raise SubmissionRejected(
            "split",
            f"the test split of {dataset.key} is superseded: it can be rebuilt from public information; "
            f"submit to {newer.key}, whose test split is secret (the dev split of {dataset.key} stays open)",
        )
    if (spent := budgets.refusal(dataset, req.split, req.target)) is not None:
        raise SubmissionRejected("split", spent, status=409)
    if req.split == "test":
        limit = settings.QVAL_TEST_QUOTA_PER_DAY
        used = quota_used(user)
        if used + quota_needed > limit:
            asking = f"; this request needs {quota_needed}" if quota_needed > 1 else ""
            raise SubmissionRejected(
                "split",
                f"daily test-split quota reached: {used} of {limit} submissions in the last 24 hours{asking}; "
                "use the dev split (unlimited) or try again later",
                status=429,
            )
    check_card(req.card, req.split)  # last: a request refused for its split or quota asks for no description
    return dataset


def _sha256(upload: UploadedFile) -> str:
    """The hex SHA-256 of an uploaded file, read in chunks and rewound."""
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    return digest.hexdigest()


def _received_submission(user, req: SubmissionRequest, dataset: Dataset, upload: UploadedFile,  # type: ignore[no-untyped-def]
                         **fields: str) -> Submission:
    """A new ``received`` submission of ``req`` on ``dataset`` for ``upload`` (with ``fields``),
    with a deadline ``QVAL_RECEIVED_S`` away for its check."""
    return Submission.objects.create(
        user=user,
        dataset=dataset,
        split=req.split,
        target=req.target,
        method_name=req.method_name.strip(),
        backbone_name=req.backbone.strip(),
        modality=req.modality,
        **req.card.on(req.split).fields(),
        filename=(upload.name or "upload")[:255],
        size_bytes=upload.size or 0,
        deadline=timezone.now() + timedelta(seconds=settings.QVAL_RECEIVED_S),
        **fields,
    )


def create_submission(user, req: SubmissionRequest, upload: UploadedFile) -> Submission:  # type: ignore[no-untyped-def]
    """Store an uploaded predictions file and send it to be checked; return its ``received`` submission.

    The request does no parsing: :func:`validate_submission` runs on the ``scoring`` worker.
    Raises :class:`SubmissionRejected` for a bad request (quota and storage counted under
    :func:`~submissions.lifecycle.lock_account`). A file over ``QVAL_MAX_UPLOAD_BYTES`` fails at once, unstored.
    """
    limit = settings.QVAL_MAX_UPLOAD_BYTES
    with transaction.atomic():
        lifecycle.lock_account(user)
        dataset = check_request(user, req)
        if (refusal := scoring_work_refusal(user)) is not None:
            raise SubmissionRejected("file", refusal, status=429)
        if (upload.size or 0) <= limit:
            check_storage(user, upload.size or 0)
        sub = _received_submission(user, req, dataset, upload)
    if (upload.size or 0) > limit:
        sub.transition(Submission.VALIDATING, save=False)
        _fail_validation(
            sub,
            [qpred.Problem("too_large", f"the file is {upload.size / 2**20:.1f} MiB; the limit is {limit / 2**20:.0f} MiB")],
        )
        return sub
    sub.sha256 = _sha256(upload)
    sub.file.save(f"{sub.pk}-{sub.sha256[:12]}.upload", upload, save=False)
    sub.save()
    lifecycle.send_on_commit([sub.pk])
    return sub


def _start_check(pk: int) -> Submission | None:
    """Move a ``received`` submission to ``validating`` under its row lock; ``None`` if it is not
    ``received`` (a repeated task, or the reaper failed it)."""
    with transaction.atomic():
        sub = Submission.objects.select_for_update().select_related("dataset").get(pk=pk)
        if sub.state != Submission.RECEIVED:
            log.info("submission %s is %s; nothing to check", pk, sub.state)
            return None
        sub.transition(Submission.VALIDATING)
    return sub


def validate_submission(pk: int) -> str:
    """Parse and validate a received predictions file and queue it for scoring (with its queue deadline,
    ``QVAL_SCORING_S``), keeping what the parse gave for it; return its state.

    A bad file fails with every problem listed (the user's fault); an error of ours fails it
    without counting towards the quota.
    """
    sub = _start_check(pk)
    if sub is None:
        return Submission.objects.get(pk=pk).state
    try:
        index = split_index(sub.dataset, sub.split, sub.target)
        preds, coverage = qpred.parse_and_validate(sub.file.path, sub.filename, index,
                                                   max_bytes=settings.QVAL_MAX_UPLOAD_BYTES)
    except qpred.ValidationFailed as exc:
        sub.coverage = {"rows": exc.rows}  # what its reading cost counts against the work bound too
        _fail_validation(sub, exc.problems)
        return sub.state
    except Exception:  # noqa: BLE001 - the parser failed otherwise: ours; the submission still ends
        log.exception("validating submission %s failed", sub.pk)
        sub.transition(Submission.FAILED, error=VALIDATION_ERROR_REASON, fault=Submission.FAULT_SYSTEM)
        return sub.state
    sub.file_format = preds.format
    sub.coverage = {
        "expected": coverage.expected,
        "provided": coverage.provided,
        "missing": coverage.missing,
        "missing_examples": list(coverage.missing_examples),
        "rows": preds.num_rows,
    }
    with transaction.atomic():  # the work is counted and the file queued under the account's lock
        lifecycle.lock_account(sub.user)
        if (refusal := scoring_work_refusal(sub.user, preds.num_rows)) is not None:
            sub.problems = [{"code": "work_limit", "message": refusal, "rows": []}]
            sub.transition(Submission.FAILED, error=refusal, fault=Submission.FAULT_USER)  # its rows were read: they count
            return sub.state
        scoring.keep_parse(sub, preds)  # its scoring reads this, not the file again
        lifecycle.dispatch(sub)
    return sub.state


def _fail_validation(sub: Submission, problems: list[qpred.Problem]) -> None:
    sub.problems = [{"code": p.code, "message": p.message, "rows": list(p.rows)} for p in problems]
    summary = "; ".join(p.message for p in problems[:3])
    if len(problems) > 3:
        summary += f"; and {len(problems) - 3} more problem(s)"
    sub.transition(Submission.FAILED, error=f"invalid predictions file: {summary}", fault=Submission.FAULT_USER)


# -- method containers -------------------------------------------------------------------
CONTAINER_FORMAT = "image-archive"
VALIDATION_ERROR_REASON = (
    "internal error while validating; the maintainers have been notified and this submission does not "
    "count towards your quota")


def container_engine() -> qc.Engine:
    """The container engine and job directory root from the settings."""
    return qc.Engine(
        kind=settings.QVAL_CONTAINER_ENGINE,
        conf=Path(settings.QVAL_CONTAINERS_CONF),
        work_root=Path(settings.QVAL_CONTAINER_WORK_ROOT),
        image_cache=settings.QVAL_CONTAINER_IMAGE_CACHE,
        image_cache_days=settings.QVAL_CONTAINER_IMAGE_CACHE_DAYS,
    )


def container_limits(dataset: Dataset) -> qc.Limits:
    """``QVAL_CONTAINER_LIMITS`` with the dataset's ``QVAL_CONTAINER_LIMITS_BY_DATASET`` overrides."""
    overrides = settings.QVAL_CONTAINER_LIMITS_BY_DATASET.get(dataset.slug, {})
    return qc.Limits(**{**settings.QVAL_CONTAINER_LIMITS, **overrides})


def container_requests(datasets: Sequence[str], splits: Sequence[str], **fields: str) -> list[SubmissionRequest]:
    """One request per (dataset, split), in the order given; each of ``datasets``/``splits`` may
    also be a comma-separated list. Repeated names count once."""

    def names(values: Sequence[str]) -> list[str]:
        out: list[str] = []
        for value in values:
            out += [n.strip() for n in value.split(",") if n.strip() and n.strip() not in out]
        return out

    ds_names, split_names = names(datasets), names(splits)
    if not ds_names:
        raise SubmissionRejected("dataset", "name at least one dataset")
    if not split_names:
        raise SubmissionRejected("split", "name at least one split")
    return [SubmissionRequest(dataset=d, split=sp, **fields) for d in ds_names for sp in split_names]


NO_BACKBONE = frozenset({"", "none"})
"""Backbone names that mean "no model" (a container gets no socket)."""


def container_backbone(name: str) -> str | None:
    """The served backbone a container submission asked for (None: none); raises for one not served."""
    name = name.strip()
    if name.lower() in NO_BACKBONE:
        return None
    served = sorted(settings.QVAL_BACKBONES)
    if name not in served:
        choices = f"choose one of {served} or 'none'" if served else "this site serves no backbone; use 'none'"
        raise SubmissionRejected("backbone", f"backbone {name!r} is not served to containers here; {choices}")
    return name


def create_container_submissions(user, reqs: Sequence[SubmissionRequest], upload: UploadedFile) -> list[Submission]:  # type: ignore[no-untyped-def]
    """Store an uploaded image archive once and send it to be inspected; return one ``received``
    submission per request.

    Every request is checked first (the test-split quota against all of them together, under
    :func:`~submissions.lifecycle.lock_account`), so a bad request creates nothing. An archive over
    ``QVAL_MAX_CONTAINER_BYTES`` fails every submission at once, unstored; otherwise
    :func:`inspect_archive` runs on a ``gpu`` worker, never in the request.
    """
    unique, seen = [], set()
    for req in reqs:  # "frozenlake-8x8" and "frozenlake-8x8@1.0" may name the same dataset
        pair = (resolve_dataset(req.dataset).pk, req.split)
        if pair not in seen:
            seen.add(pair)
            unique.append(req)
    reqs = unique
    test_count = sum(1 for r in reqs if r.split == "test")
    limit = settings.QVAL_MAX_CONTAINER_BYTES
    with transaction.atomic():
        lifecycle.lock_account(user)
        datasets = [check_request(user, r, quota_needed=max(test_count, 1)) for r in reqs]
        for req in reqs:
            container_backbone(req.backbone)
        if (upload.size or 0) <= limit:
            check_storage(user, upload.size or 0)
        subs = [_received_submission(user, req, dataset, upload, kind=Submission.KIND_CONTAINER,
                                     file_format=CONTAINER_FORMAT)
                for req, dataset in zip(reqs, datasets)]
    if (upload.size or 0) > limit:
        problem = qpred.Problem(
            "too_large", f"the archive is {upload.size / 2**20:.1f} MiB; the limit is {limit / 2**20:.0f} MiB")
        for sub in subs:
            sub.transition(Submission.VALIDATING, save=False)
            _fail_archive(sub, problem)
        return subs
    sha256 = _sha256(upload)
    first = subs[0]
    first.file.save(f"{first.pk}-{sha256[:12]}.image", upload, save=False)
    for sub in subs:
        sub.file.name = first.file.name
        sub.sha256 = sha256
        sub.save()
    lifecycle.send_on_commit([sub.pk for sub in subs])
    return subs


def inspect_archive(pks: Sequence[int]) -> list[str]:
    """Check the image archive the container submissions ``pks`` share
    (:func:`qval.containers.sanitize_archive`) and queue each on ``gpu`` with a deadline
    ``QVAL_CONTAINER_QUEUE_S`` away; return their states.

    A rejected archive fails them all (the user's fault) and is deleted.
    """
    subs = [sub for sub in (_start_check(pk) for pk in pks) if sub is not None]
    if not subs:
        return [Submission.objects.get(pk=pk).state for pk in pks]
    path = Path(subs[0].file.path)
    try:
        # Reading the whole archive is the check; the tag-free copy is only wanted by a job.
        image_id = qc.sanitize_archive(path, Path(os.devnull), max_archive_bytes=settings.QVAL_MAX_CONTAINER_BYTES,
                                       max_image_bytes=settings.QVAL_MAX_IMAGE_BYTES)
    except qc.ArchiveRejected as exc:
        problem = qpred.Problem("archive_rejected", str(exc))
        path.unlink(missing_ok=True)  # a rejected archive is not kept
        for sub in subs:
            sub.file.name = ""
            _fail_archive(sub, problem)
        return [sub.state for sub in subs]
    except Exception:  # noqa: BLE001 - the archive could not be read for a reason of ours
        log.exception("inspecting the archive of submissions %s failed", pks)
        for sub in subs:
            sub.transition(Submission.FAILED, error=VALIDATION_ERROR_REASON, fault=Submission.FAULT_SYSTEM)
        return [sub.state for sub in subs]
    for sub in subs:
        sub.image_id = image_id
        lifecycle.dispatch(sub)
    return [sub.state for sub in subs]


def _fail_archive(sub: Submission, problem: qpred.Problem) -> None:
    sub.problems = [{"code": problem.code, "message": problem.message, "rows": []}]
    sub.transition(Submission.FAILED, error=f"invalid container archive: {problem.message}", fault=Submission.FAULT_USER)
