"""``{{ sub|row_label }}``: how a list of rows to compare names a submission (:func:`submissions.comparison.row_label`)."""

from __future__ import annotations

from django import template

from submissions.comparison import row_label as _row_label
from submissions.models import Submission

register = template.Library()


@register.filter
def row_label(sub: Submission) -> str:
    """Method, backbone, modality, submitter, date and id of ``sub``."""
    return _row_label(sub)
