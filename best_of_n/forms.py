"""The staff form of the Best-of-N page: play a Best-of-N run on the ``gpu`` queue."""

from __future__ import annotations

from typing import Any

from django import forms

from best_of_n.models import BestOfNRun
from learning import selectors as learning_selectors
from qval import best_of_n as bon

from . import services as best_of_n


class PlayForm(forms.Form):
    """Environment, picker, its backbone or training run, N, episodes and seed of a run (checked by
    :func:`best_of_n.services.create_run`)."""

    environment = forms.ChoiceField(choices=[(e, e) for e in bon.ENVIRONMENTS])
    picker = forms.ChoiceField(help_text="oracle, random, base, reference or a registered method.")
    backbone = forms.CharField(max_length=BestOfNRun._meta.get_field("backbone").max_length, required=False,
                               help_text="For a method that needs one: a URL, unix:PATH or checkpoint folder.")
    training_run = forms.TypedChoiceField(
        coerce=int, required=False, empty_value=None,
        help_text="For a learned method: the finished training run whose model picks (blank: the newest one of "
                  "the method on the environment's dataset).")
    n = forms.IntegerField(initial=best_of_n.DEFAULT_N, label="N (candidates per step)")
    episodes = forms.IntegerField(initial=best_of_n.DEFAULT_EPISODES)
    seed = forms.IntegerField(initial=0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["picker"].choices = best_of_n.picker_choices()
        self.fields["training_run"].choices = [("", "the newest finished one")] + [
            (str(r.pk), f"#{r.pk} {r.method} on {r.dataset.key}") for r in learning_selectors.finished_runs()]
