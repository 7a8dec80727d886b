"""Django admin: submissions (read-only) and launching baseline runs of the built-in methods."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from leaderboard.models import Dataset

from .baselines import BaselineRequest, launch_baseline
from .models import Submission
from .services import SubmissionRejected


def _method_choices() -> list[tuple[str, str]]:
    from qval.methods.registry import all_methods

    return [(m.name, f"{m.name} ({m.family}, {m.modality}, needs {m.needs})") for m in all_methods()]


class BaselineForm(forms.Form):
    """Method × backbone × dataset × split (× target, seed, options) of a baseline run."""

    method = forms.ChoiceField(choices=_method_choices)
    backbone = forms.CharField(max_length=100, help_text="A QVAL_BACKBONES name for LLM methods; an encoder spec "
                                                         "(clip, siglip, liv, vip, ARCH:PATH, ARCH:random) for image methods.")
    dataset = forms.ChoiceField(choices=())
    split = forms.ChoiceField(choices=[("dev", "dev"), ("test", "test")])
    target = forms.ChoiceField(choices=[("", "default (q when scored)"), ("q", "Q"), ("v", "V")], required=False)
    seed = forms.IntegerField(initial=0)
    options = forms.CharField(required=False, initial="{}", widget=forms.Textarea(attrs={"rows": 2}),
                              help_text='Method options as a JSON object, e.g. {"concurrency": 16}.')

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["dataset"].choices = [(d.key, d.key) for d in Dataset.objects.order_by("slug", "version")]

    def clean_options(self) -> dict[str, object]:
        try:
            value = json.loads(self.cleaned_data.get("options") or "{}")
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("expected a JSON object")
        return value


@admin.register(Submission)
class SubmissionAdmin(admin.ModelAdmin):
    """Every submission, read-only; baseline runs show their progress and are launched from here."""

    list_display = ("id", "method_name", "backbone_name", "dataset", "split", "target", "source", "kind", "state",
                    "progress_bar", "num_nan", "received_at")
    list_filter = ("source", "kind", "state", "split")
    search_fields = ("method_name", "backbone_name", "error")
    readonly_fields = [f.name for f in Submission._meta.fields]
    change_list_template = "admin/submissions/submission/change_list.html"

    @admin.display(description="progress")
    def progress_bar(self, obj: Submission) -> str:
        p = obj.progress or {}
        if obj.kind != Submission.KIND_BASELINE or "total" not in p:
            return "—"
        return format_html('<progress max="{}" value="{}"></progress> {}/{}', p["total"], p.get("done", 0),
                           p.get("done", 0), p["total"])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # uploads come through the site; baselines through "Launch a baseline run"

    def get_urls(self):  # type: ignore[no-untyped-def]
        return [path("launch-baseline/", self.admin_site.admin_view(self.launch_view), name="launch-baseline"),
                *super().get_urls()]

    def launch_view(self, request: HttpRequest) -> HttpResponse:
        """The form of a baseline run; a valid one is queued and the staff member sent to its page."""
        if not request.user.is_staff:
            return HttpResponse("staff only", status=403)
        form = BaselineForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            d = form.cleaned_data
            try:
                sub = launch_baseline(BaselineRequest(method=d["method"], backbone=d["backbone"].strip(),
                                                      dataset=d["dataset"], split=d["split"], target=d["target"] or "",
                                                      seed=d["seed"], options=d["options"]), user=request.user)
            except SubmissionRejected as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"baseline run #{sub.pk} queued on gpu")
                return HttpResponseRedirect(reverse("submission", args=[sub.pk]))
        context = {**self.admin_site.each_context(request), "form": form, "title": "Launch a baseline run",
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/submissions/launch_baseline.html", context,
                                status=400 if request.method == "POST" else 200)

