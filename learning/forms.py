"""The staff form of the Learned page: train a learned method on a dataset."""

from __future__ import annotations

from typing import Any

from django import forms

from leaderboard.models import Dataset
from qval.learned import methods as lm
from qval.learned.defaults import DEFAULT_FEATURISER

from . import selectors


def _param_field(default: Any) -> forms.Field:
    """A blank-allowed number field of the default's type (blank: the default), a checkbox for a switch."""
    if isinstance(default, bool):
        return forms.BooleanField(initial=default, required=False, help_text=f"default {'on' if default else 'off'}")
    if isinstance(default, int):
        return forms.IntegerField(initial=default, required=False, help_text=f"default {default}")
    return forms.FloatField(initial=default, required=False, help_text=f"default {default}")


class TrainForm(forms.Form):
    """Method, dataset, seed and the method's main hyperparameters (fields ``METHOD-NAME``, initially
    the defaults the trainer uses; only the chosen method's are read)."""

    method = forms.ChoiceField(choices=[(m, m) for m in lm.METHODS])
    dataset = forms.ChoiceField(help_text="Datasets hosted here with a loaded train split.")
    seed = forms.IntegerField(initial=0)
    featuriser = forms.CharField(initial=DEFAULT_FEATURISER, max_length=300, required=False, help_text=(
        "hashed, hashed:DIM, crossed, crossed:DIM (state × action n-grams), tabular (exact one-hot grid states: "
        "FrozenLake), smollm2 (SmolLM2-135M-Instruct's hidden states), http://HOST:PORT#MODEL (an /v1/embeddings server) or local:PATH (a transformers "
        "checkpoint on the gpu worker; amc-value's lora fine-tunes it)"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset"].choices = [(d.key, d.key) for d in selectors.trainable_datasets()]
        self.param_methods: dict[str, str] = {}
        """Hyperparameter field → its method."""
        for method, info in lm.METHODS.items():
            for name in info["main"]:
                self.fields[f"{method}-{name}"] = _param_field(info["defaults"][name])
                self.fields[f"{method}-{name}"].label = name
                self.param_methods[f"{method}-{name}"] = method

    def clean(self) -> dict[str, Any]:
        """Drop the errors of the other methods' hyperparameters: only the chosen method's are read."""
        chosen = self.cleaned_data.get("method")
        for field, method in self.param_methods.items():
            if method != chosen:
                self.errors.pop(field, None)
        return self.cleaned_data

    def clean_featuriser(self) -> str:
        """Blank: :data:`~qval.learned.defaults.DEFAULT_FEATURISER`."""
        return self.cleaned_data.get("featuriser") or DEFAULT_FEATURISER

    def clean_dataset(self) -> Dataset:
        dataset = Dataset.lookup(self.cleaned_data["dataset"])
        if dataset is None:
            raise forms.ValidationError("no such dataset")
        return dataset

    def common_fields(self) -> list[forms.BoundField]:
        """The fields every method has."""
        return [self["method"], self["dataset"], self["seed"], self["featuriser"]]

    def param_groups(self) -> list[tuple[str, list[forms.BoundField]]]:
        """Per method, its hyperparameter fields."""
        return [(m, [self[f"{m}-{name}"] for name in info["main"]]) for m, info in lm.METHODS.items()]

    def params(self) -> dict[str, Any]:
        """The chosen method's hyperparameters that were filled in (blank ones keep their default; a switch
        counts when it differs from its default, an unticked box being the same as a blank)."""
        method = self.cleaned_data["method"]
        defaults = lm.METHODS[method]["defaults"]
        values = {name: self.cleaned_data.get(f"{method}-{name}") for name in lm.METHODS[method]["main"]}
        return {name: value for name, value in values.items()
                if value is not None and not (isinstance(defaults[name], bool) and value == defaults[name])}

    def field_of(self, field: str) -> str | None:
        """The form field of a :class:`~learning.services.InvalidRun` field (``None``: the whole form)."""
        if field.startswith("params."):
            field = f"{self.cleaned_data['method']}-{field.removeprefix('params.')}"
        return field if field in self.fields else None
