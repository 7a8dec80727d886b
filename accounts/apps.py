from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Accounts on top of django-allauth: one account per mailbox, the client address of sign-up limits."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from allauth.account.models import EmailAddress
        from django.db.models.signals import post_delete, post_save, pre_save

        from accounts import mailboxes

        pre_save.connect(mailboxes.claim_on_save, sender=EmailAddress, dispatch_uid="accounts.claim")
        post_save.connect(mailboxes.release_on_change, sender=EmailAddress, dispatch_uid="accounts.release_save")
        post_delete.connect(mailboxes.release_on_change, sender=EmailAddress, dispatch_uid="accounts.release_delete")
