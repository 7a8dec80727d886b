from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    """One information budget per hidden split, shared by every account, and the fresh splits that replace a
    spent one (:mod:`qval.budget` holds the arithmetic; this app stores it and spends it under a row lock)."""

    name = "budgets"
    default_auto_field = "django.db.models.BigAutoField"
