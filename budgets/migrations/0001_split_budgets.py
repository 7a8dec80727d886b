# One information budget per hidden split (issue 32): budgets, their releases, fresh splits.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('leaderboard', '0003_fresh_hidden_splits'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Refresh',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reason', models.CharField(choices=[('spent', 'its information budget was spent'), ('schedule', "the maintainers' refresh schedule"), ('maintainer', 'a maintainer asked for it')], max_length=10)),
                ('number', models.PositiveIntegerField(help_text="The fresh split's number (its version ends in -r<number>).")),
                ('state', models.CharField(choices=[('queued', 'queued'), ('done', 'done'), ('failed', 'failed')], default='queued', max_length=8)),
                ('reruns', models.JSONField(blank=True, default=dict, help_text='What was re-run on the new version, by kind.')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('done_at', models.DateTimeField(blank=True, null=True)),
                ('build', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='leaderboard.datasetbuild')),
                ('dataset', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='refreshes', to='leaderboard.dataset')),
                ('replacement', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='leaderboard.dataset')),
            ],
            options={
                'ordering': ['-created_at', '-pk'],
            },
        ),
        migrations.CreateModel(
            name='SplitBudget',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('split', models.CharField(choices=[('train', 'train'), ('dev', 'dev'), ('test', 'test')], max_length=8)),
                ('target', models.CharField(choices=[('q', 'Q (state–action)'), ('v', 'V (state)')], max_length=1)),
                ('num_points', models.PositiveIntegerField(help_text='Points of the split for the target (its size follows).')),
                ('size', models.PositiveIntegerField(help_text='Numbers the split may release in all (qval.budget.budget_size).')),
                ('spent', models.PositiveIntegerField(default=0)),
                ('state', models.CharField(choices=[('open', 'open'), ('spent', 'spent'), ('retired', 'retired')], default='open', max_length=8)),
                ('opened_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('spent_at', models.DateTimeField(blank=True, null=True)),
                ('retired_at', models.DateTimeField(blank=True, null=True)),
                ('dataset', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='budgets', to='leaderboard.dataset')),
                ('replaced_by', models.ForeignKey(blank=True, help_text='The dataset version whose fresh hidden split replaced this one.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='leaderboard.dataset')),
            ],
        ),
        migrations.CreateModel(
            name='Release',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('ladder', 'ladder climb'), ('compare', 'comparison'), ('held', 'held: budget spent')], max_length=8)),
                ('submission_id', models.BigIntegerField(db_index=True, help_text='The submission released (compare: A).')),
                ('other_id', models.BigIntegerField(blank=True, help_text='Compare: submission B.', null=True)),
                ('metrics', models.JSONField(default=list, help_text='The metrics whose numbers were released.')),
                ('cost', models.PositiveSmallIntegerField(default=0)),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('user', models.ForeignKey(blank=True, help_text='The account whose prediction or request it was.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('budget', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='releases', to='budgets.splitbudget')),
            ],
            options={
                'ordering': ['pk'],
            },
        ),
        migrations.AddConstraint(
            model_name='splitbudget',
            constraint=models.UniqueConstraint(fields=('dataset', 'split', 'target'), name='budget_unique_split'),
        ),
    ]
