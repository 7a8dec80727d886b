"""The forms of the upload page and of a submission's method card (sign-up is django-allauth's)."""

from __future__ import annotations

from django import forms
from django.utils.safestring import mark_safe

from leaderboard.models import MODALITY_CHOICES, TARGET_CHOICES, Dataset
from qval.schema import PUBLIC_SPLITS

from .models import Submission
from .services import MethodCard


class CardFields(forms.Form):
    """The method card's fields and who sees the result, as the upload form and the card form of a submission's
    page both ask them."""

    visibility = forms.ChoiceField(
        choices=[("public", "public: a test result on its board, with a permalink anyone can read"),
                 ("private", "private: only you see it")],
        required=False, widget=forms.RadioSelect,
        help_text="By default a test result is public and a dev result private (a dev result is a self-check, on "
                  "no board: made public, it is listed on the full table). You can change it later on the "
                  "submission's page.")
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=5000,
        help_text="Method card: what the method is and how it scores, shown on the boards and the result's public "
                  "page; required for a public test-split result.")
    paper_url = forms.URLField(max_length=300, required=False, assume_scheme="https", label="Paper URL")
    code_url = forms.URLField(max_length=300, required=False, assume_scheme="https", label="Code URL")
    open_weights = forms.NullBooleanField(
        required=False, label="Open weights",
        widget=forms.Select(choices=[("unknown", "not said"), ("true", "yes"), ("false", "no")]))

    def card(self) -> MethodCard:
        """The method card of the valid form."""
        data = self.cleaned_data
        public = {"public": True, "private": False}.get(data.get("visibility") or "")  # None: the split's default
        return MethodCard(public=public, description=data.get("description", ""),
                          paper_url=data.get("paper_url", ""), code_url=data.get("code_url", ""),
                          open_weights=data.get("open_weights"))


class UploadForm(CardFields):
    """A predictions file, or a method container archive, for one dataset split and target."""

    field_order = ["kind", "dataset", "split", "target", "method_name", "backbone", "modality", "visibility",
                   "description", "paper_url", "code_url", "open_weights", "file"]
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
    backbone = forms.CharField(max_length=100, required=False,
                               help_text="The model your method uses; leave it empty (or write none) when it uses none.")
    modality = forms.ChoiceField(choices=MODALITY_CHOICES, initial="text")
    file = forms.FileField(allow_empty_file=True, help_text=mark_safe(
        "CSV, JSONL or Parquet with <code>id,score</code> columns, or the QVal reference JSON; or the image archive."))

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        # Only what takes submissions: the newest version of each hosted dataset.
        datasets = list(Dataset.newest_hosted())
        self.fields["dataset"].choices = [(d.key, f"{d.name} ({d.key})") for d in datasets]
        # Datasets whose test split ranks no uploaded file (open book): the page says so before an upload.
        self.open_book = {d.key: d.environment.name for d in datasets if d.environment.open_book}
        split = self.initial.get("split") or self.fields["split"].choices[0][0]
        self.fields["visibility"].initial = "private" if split in PUBLIC_SPLITS else "public"


class CardForm(CardFields):
    """A submission's method card and visibility, changed by its owner on the submission's page."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.fields["visibility"].help_text = "Dev results are never on a public board, whichever you choose."

    @classmethod
    def of(cls, sub: Submission) -> CardForm:
        """The unbound form holding ``sub``'s card."""
        return cls(initial={"visibility": "public" if sub.public else "private", "description": sub.description,
                            "paper_url": sub.paper_url, "code_url": sub.code_url,
                            "open_weights": {True: "true", False: "false"}.get(sub.open_weights, "unknown")})
