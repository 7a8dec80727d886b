from django.apps import AppConfig


class LearningConfig(AppConfig):
    """Training runs of the Learned family (qval.learned) and their leaderboard entries."""

    name = "learning"
    default_auto_field = "django.db.models.BigAutoField"
