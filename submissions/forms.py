"""The form of the upload page (sign-up is django-allauth's)."""

from __future__ import annotations

from django import forms
from django.utils.safestring import mark_safe

from leaderboard.models import MODALITY_CHOICES, TARGET_CHOICES, Dataset

from .services import MethodCard


class UploadForm(forms.Form):
    """A predictions file, or a method container archive, for one dataset split and target."""

    kind = forms.ChoiceField(
        choices=[("file", "predictions file"), ("container", "method container (image archive)")], initial="file",
        required=False,  # forms posted before containers existed send no kind: a file
        help_text=mark_safe(  # our own markup, no user input
            "A method container is a <code>docker save</code> or <code>podman save</code> archive (tar or tar.gz) "
            "that reads <code>/input</code> and writes <code>/output/predictions.jsonl</code>; a GPU worker runs it "
            "in a sandbox."),
    )
    dataset = forms.ChoiceField()
    split = forms.ChoiceField(choices=[("dev", "dev (labels public, unlimited)"), ("test", "test (hidden labels, daily quota)")])
    target = forms.ChoiceField(choices=TARGET_CHOICES)
    method_name = forms.CharField(max_length=100)
    backbone = forms.CharField(max_length=100, required=False)
    modality = forms.ChoiceField(choices=MODALITY_CHOICES, initial="text")
    visibility = forms.ChoiceField(
        choices=[("public", "public: on the boards, with a permalink anyone can read"),
                 ("private", "private: only you see it")],
        initial="public", required=False, widget=forms.RadioSelect,
        help_text="Dev results are never on a public board, whichever you choose.")
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=5000,
        help_text="Method card: what the method is and how it scores (shown on the result's public page).")
    paper_url = forms.URLField(max_length=300, required=False, assume_scheme="https", label="Paper URL")
    code_url = forms.URLField(max_length=300, required=False, assume_scheme="https", label="Code URL")
    open_weights = forms.NullBooleanField(
        required=False, label="Open weights",
        widget=forms.Select(choices=[("unknown", "not said"), ("true", "yes"), ("false", "no")]))
    file = forms.FileField(allow_empty_file=True, help_text=mark_safe(
        "CSV, JSONL or Parquet with <code>id,score</code> columns, or the QVal reference JSON; or the image archive."))

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        # Only what takes submissions: the newest version of each hosted dataset.
        self.fields["dataset"].choices = [(d.key, f"{d.name} ({d.key})") for d in Dataset.newest_hosted()]

    def card(self) -> MethodCard:
        """The method card of the valid form."""
        data = self.cleaned_data
        return MethodCard(public=data.get("visibility") != "private", description=data.get("description", ""),
                          paper_url=data.get("paper_url", ""), code_url=data.get("code_url", ""),
                          open_weights=data.get("open_weights"))
