# Fresh hidden splits (issue 32): a dataset build's refresh number; a dataset version's retirement.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0002_datasetbuild_stage_started'),
    ]

    operations = [
        migrations.AddField(
            model_name='datasetbuild',
            name='refresh',
            field=models.PositiveIntegerField(default=0, help_text="Fresh hidden split number (qval.build.refreshed): 0 builds the builder's version, n its version '-rn', a new test split drawn from the secret."),
        ),
            migrations.AddField(
            model_name='dataset',
            name='replaced_by',
            field=models.ForeignKey(blank=True, help_text="The version whose fresh hidden split replaced this one's (budgets): its boards are frozen.", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='leaderboard.dataset'),
        ),
        migrations.AddField(
            model_name='dataset',
            name='retired_at',
            field=models.DateTimeField(blank=True, help_text='When its hidden split was replaced.', null=True),
        ),
        migrations.AddField(
            model_name='dataset',
            name='retired_reason',
            field=models.CharField(blank=True, help_text='Why its hidden split was replaced.', max_length=100),
        ),
    ]
