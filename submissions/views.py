"""Pages for uploading predictions and following their submissions."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts import throttling
from accounts.access import has_verified_email
from qval import metric_registry
from qval.schema import PUBLIC_SPLITS
from qval.scoring import printed_digits

from . import comparison
from .forms import CardForm, UploadForm
from .models import Result, Submission
from .selectors import visible_to, why_unranked
from .serializers import submission_payload
from .uploads import too_large
from .services import (
    SubmissionRejected,
    SubmissionRequest,
    change_card,
    create_container_submissions,
    create_submission,
    quota_used,
)


@login_required
def upload(request: HttpRequest) -> HttpResponse:
    """Upload a predictions file or a method container; on success go to the submission's page.

    The API's limits hold here too, with its status: the ``upload`` throttle (``QVAL_THROTTLE_RATES``) answers 429
    before the form is read, and so does a request refused for the quota or the scoring work bound."""
    status = 200
    if request.method == "POST":
        allowed, wait = throttling.allow(request, "upload")
        if not allowed:
            messages.error(request, f"Too many uploads: an account may send {settings.QVAL_THROTTLE_RATES['upload_user']}"
                                    f" (the API's rate too); try again in {wait or 1:.0f} s.")
            form = UploadForm(initial={k: v for k, v in request.POST.items() if k != "file"})
            response = _upload_page(request, form, 429)
            response["Retry-After"] = str(int(wait or 1) + 1)
            return response
    form = UploadForm(request.POST or None, request.FILES or None, initial=request.GET.dict())
    if request.method == "POST" and not form.is_valid() and too_large(request):
        form.errors["file"] = form.error_class([too_large(request)])  # instead of "this field is required"
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        req = SubmissionRequest(
            dataset=data["dataset"],
            split=data["split"],
            target=data["target"],
            method_name=data["method_name"],
            backbone=data["backbone"],
            modality=data["modality"],
            card=form.card(),
        )
        try:
            if data["kind"] == Submission.KIND_CONTAINER:
                sub = create_container_submissions(request.user, [req], data["file"])[0]
            else:
                sub = create_submission(request.user, req, data["file"])
        except SubmissionRejected as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            status = 429 if exc.status == 429 else status
        else:
            return redirect("submission", pk=sub.pk)
    return _upload_page(request, form, status)


def _upload_page(request: HttpRequest, form: UploadForm, status: int) -> HttpResponse:
    """The upload form (``form``, maybe with its errors) and the account's test quota, with ``status``."""
    limit = settings.QVAL_TEST_QUOTA_PER_DAY
    quota = {"limit": limit, "left": max(limit - quota_used(request.user), 0),
             "verified": has_verified_email(request.user)}
    return render(request, "submissions/upload.html", {"form": form, "quota": quota}, status=status)


@login_required
def mine(request: HttpRequest) -> HttpResponse:
    """The user's submissions with live state, each finished one's ρ with its interval (as its page discloses it)
    and its rank where it stands on a board (the template asks board's ``standing_of`` tag)."""
    subs = list(Submission.objects.filter(user=request.user).select_related("dataset").prefetch_related(
        Prefetch("results", Result.objects.filter(metric=metric_registry.HEADLINE), to_attr="headline")))
    rows = [{"sub": s, "headline": None if s.score_withheld or not s.headline else s.headline[0],
             "digits": printed_digits(s.split not in PUBLIC_SPLITS)} for s in subs]
    return render(request, "submissions/mine.html", {"rows": rows, "metric": metric_registry.get(metric_registry.HEADLINE)})


@login_required
def detail(request: HttpRequest, pk: int, card_form: CardForm | None = None, status: int = 200) -> HttpResponse:
    """One submission: timeline, results or the exact validation problems; to its owner, once it has ended, the
    form that changes its method card and visibility (``card_form``: a refused one, shown with its errors)."""
    sub = get_object_or_404(Submission.objects.select_related("dataset__environment").filter(visible_to(request.user)), pk=pk)
    data = submission_payload(sub)
    both_signs = sub.dataset.labels_have_both_signs(sub.target)
    results = [r for r in data["results"] if metric_registry.shown(r["metric"], both_signs)]  # sign agreement
    sampled = [
        {**r, "sample_values": list(zip(r["details"]["samples"]["sample_numbers"], r["details"]["samples"]["values"]))}
        for r in results
        if "values" in r["details"].get("samples", {})  # per-sample values exist on public splits only
    ]
    others = comparison.candidates(sub, request.user) if sub.state == Submission.FINISHED else Submission.objects.none()
    hidden = sub.split not in PUBLIC_SPLITS  # its rows were disclosed (submissions.lifecycle.finish)
    finished = sub.state == Submission.FINISHED
    context = {"sub": sub, "data": data, "results": results, "sampled": sampled, "others": others,
               "one_sign_note": metric_registry.ONE_SIGN_NOTE if len(results) < len(data["results"]) else "",
               "why_unranked": why_unranked(sub) if finished else "",  # shown only when no standing
               "result_url": request.build_absolute_uri(reverse("result", args=[sub.pk])),  # the permalink, if ranked
               "references": comparison.reference_rows(sub) if finished and not sub.score_withheld else [],
               "hidden": hidden, "digits": printed_digits(hidden),
               "card_form": (card_form or CardForm.of(sub)) if sub.user_id == request.user.pk and sub.is_final
               and sub.source == Submission.SOURCE_USER else None}
    return render(request, "submissions/detail.html", context, status=status)


@login_required
@require_POST
def card(request: HttpRequest, pk: int) -> HttpResponse:
    """Its owner changes a submission's method card and visibility (:func:`submissions.services.change_card`);
    anyone else gets 404, as for the page."""
    form = CardForm(request.POST)
    if form.is_valid():
        try:
            sub = change_card(request.user, pk, **vars(form.card()))
        except SubmissionRejected as exc:
            if exc.status == 404:
                raise Http404(exc.message) from None
            if exc.status == 409:  # not ended yet: its page shows no card form to show the error in
                messages.error(request, exc.message)
                return redirect("submission", pk=pk)
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Method card saved; the result is {'public' if sub.public else 'private'}.")
            return redirect("submission", pk=sub.pk)
    if not Submission.objects.filter(pk=pk, user_id=request.user.pk).exists():
        raise Http404(f"no submission {pk} of yours")
    return detail(request, pk, card_form=form, status=400)


def compare(request: HttpRequest) -> HttpResponse:
    """A vs B: paired bootstrap of two finished submissions (``?a=<id>&b=<id>``).

    Public rows (published, baselines) for anyone, and a signed-in user's own submissions
    (:func:`submissions.comparison.resolve_pair`).  Without parameters the page offers the rows to start from
    (:func:`submissions.comparison.starting_points`, by method, backbone, submitter and date); otherwise it shows the comparison or why there is none (and, when A is valid,
    the submissions it can be compared with).
    """
    context: dict[str, object] = {"a": request.GET.get("a", ""), "b": request.GET.get("b", "")}
    sub_a: Submission | None = None
    status = 200
    if "a" in request.GET or "b" in request.GET:
        allowed, wait = throttling.allow(request, "compare")
        if not allowed:
            return _too_many(request, wait)
        try:
            sub_a, sub_b = comparison.resolve_pair(request.GET, request.user)
            context["result"] = comparison.comparison_for(sub_a, sub_b, throttling.client_address(request))
            context["digits"] = printed_digits(comparison.on_hidden_labels(sub_a))
        except comparison.ComparisonError as exc:
            sub_a = exc.a
            context["errors"] = exc.errors
            status = exc.status
        except comparison.ComparisonBusy as exc:
            return _too_many(request, exc.retry_after, exc.message)
    if sub_a is not None:
        context.update(sub_a=sub_a, others=comparison.candidates(sub_a, request.user))
    else:
        context["starts"] = comparison.starting_points(request.user)
    return render(request, "submissions/compare.html", context, status=status)


def _too_many(request: HttpRequest, wait: float | None, why: str = "too many requests") -> HttpResponse:
    """429 with why and how long to wait."""
    after = f"; try again in {wait:.0f} s" if wait and "try again" not in why else ""
    response = HttpResponse(f"{why}{after}", status=429, content_type="text/plain; charset=utf-8")
    if wait:
        response["Retry-After"] = str(int(wait) + 1)
    return response


@login_required
def status(request: HttpRequest, pk: int) -> JsonResponse:
    """The submission as JSON, polled by the detail and list pages."""
    sub = get_object_or_404(Submission.objects.filter(visible_to(request.user)), pk=pk)
    return JsonResponse(submission_payload(sub))
