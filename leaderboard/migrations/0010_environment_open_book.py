from django.db import migrations, models


def frozenlake_is_open_book(apps, schema_editor):
    """FrozenLake, loaded before the flag existed, is open book (``leaderboard.loading.ENVIRONMENTS``)."""
    apps.get_model("leaderboard", "Environment").objects.filter(slug="frozenlake").update(open_book=True)


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0009_run_sent_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='environment',
            name='open_book',
            field=models.BooleanField(default=False, help_text='Its labels follow from its observations (a FrozenLake observation is the whole map), so no split of it is hidden: an open-book sanity check whose test board ranks only platform-run rows.'),
        ),
        migrations.RunPython(frozenlake_is_open_book, migrations.RunPython.noop),
    ]
