"""The account's own pages beside django-allauth's: the self-serve API token."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from .access import api_token, has_verified_email, new_api_token


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def token(request: HttpRequest) -> HttpResponse:
    """The signed-in account's API token and how to use it; a POST (with the form's CSRF token) creates
    one, or replaces the one there is. An account without a verified email address is told why it has
    none (403)."""
    if not has_verified_email(request.user):
        return render(request, "accounts/token.html", {"verified": False}, status=403)
    if request.method == "POST":
        had = api_token(request.user) is not None
        new_api_token(request.user)
        messages.success(request, "A new API token was made; the old one no longer works." if had
                         else "Your API token was made.")
        return redirect("api-token")
    return render(request, "accounts/token.html", {
        "verified": True, "token": api_token(request.user), "api_root": request.build_absolute_uri("/api/v1/"),
    })
