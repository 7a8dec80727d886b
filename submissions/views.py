"""Pages for uploading predictions and following their submissions."""

from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from .forms import SignUpForm, UploadForm
from .models import Submission
from .serializers import submission_payload
from .services import SubmissionRejected, SubmissionRequest, create_submission


def signup(request: HttpRequest) -> HttpResponse:
    """Create an account and log in."""
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user)
        return redirect("upload")
    return render(request, "registration/signup.html", {"form": form})


@login_required
def upload(request: HttpRequest) -> HttpResponse:
    """Upload a predictions file; on success go to the submission's page."""
    form = UploadForm(request.POST or None, request.FILES or None, initial=request.GET.dict())
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        req = SubmissionRequest(
            dataset=data["dataset"],
            split=data["split"],
            target=data["target"],
            method_name=data["method_name"],
            backbone=data["backbone"],
            modality=data["modality"],
        )
        try:
            sub = create_submission(request.user, req, data["file"])
        except SubmissionRejected as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            return redirect("submission", pk=sub.pk)
    return render(request, "submissions/upload.html", {"form": form})


@login_required
def mine(request: HttpRequest) -> HttpResponse:
    """The user's submissions with live state."""
    subs = Submission.objects.filter(user=request.user).select_related("dataset")
    return render(request, "submissions/mine.html", {"submissions": subs})


@login_required
def detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One submission: timeline, results or the exact validation problems."""
    sub = get_object_or_404(Submission.objects.select_related("dataset"), pk=pk, user=request.user)
    return render(request, "submissions/detail.html", {"sub": sub, "data": submission_payload(sub)})


@login_required
def status(request: HttpRequest, pk: int) -> JsonResponse:
    """The submission as JSON, polled by the detail and list pages."""
    sub = get_object_or_404(Submission, pk=pk, user=request.user)
    return JsonResponse(submission_payload(sub))
