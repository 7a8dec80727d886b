"""The form of the upload page (sign-up is django-allauth's)."""

from __future__ import annotations

from django import forms

from leaderboard.models import MODALITY_CHOICES, TARGET_CHOICES, Dataset

from .services import MethodCard


class UploadForm(forms.Form):
    """A predictions file, or a method container archive, for one dataset split and target."""

    kind = forms.ChoiceField(
        choices=[("file", "predictions file"), ("container", "method container (image archive)")], initial="file",
        required=False,  # forms posted before containers existed send no kind: a file
        help_text="A method container is a `docker save`/`podman save` archive (tar or tar.gz) that reads /input "
        "and writes /output/predictions.jsonl; a GPU worker runs it in a sandbox.",
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
    file = forms.FileField(allow_empty_file=True, help_text="CSV, JSONL or Parquet with id,score columns, or the QVal reference JSON; or the image archive.")

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.fields["dataset"].choices = [(d.key, f"{d.name} ({d.key})") for d in Dataset.objects.all()]

    def card(self) -> MethodCard:
        """The method card of the valid form."""
        data = self.cleaned_data
        return MethodCard(public=data.get("visibility") != "private", description=data.get("description", ""),
                          paper_url=data.get("paper_url", ""), code_url=data.get("code_url", ""),
                          open_weights=data.get("open_weights"))
