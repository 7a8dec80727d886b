# leaderboard's migrations 0001–0011 collapsed (2026-11-27) into this one: the schema they built, less the
# Best-of-N models, which moved to best_of_n (whose 0001 adopts their tables). A database that applied the old
# 0001–0011 has this name recorded and the same schema, so nothing runs there; one stopped part-way is refused by
# best_of_n/0001 (migrate it with an earlier release first). The old data steps are gone: each updated rows of an older schema.
# The collapse removed the migration cycle leaderboard/0008 -> learning/0002 -> leaderboard/0002.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='Backbone',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('description', models.TextField(blank=True)),
            ],
        ),
        migrations.CreateModel(
            name='Environment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('slug', models.SlugField(unique=True)),
                ('name', models.CharField(max_length=100)),
                ('description', models.TextField(blank=True)),
                ('url', models.URLField(blank=True)),
                ('open_book', models.BooleanField(default=False, help_text='Its labels follow from its observations (a FrozenLake observation is the whole map), so no split of it is hidden: an open-book sanity check whose test board ranks only platform-run rows.')),
            ],
        ),
        migrations.CreateModel(
            name='Method',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('family', models.CharField(choices=[('direct', 'Direct'), ('code', 'Code'), ('self-distillation', 'Self-Distillation'), ('intrinsic', 'Intrinsic'), ('ranking', 'Ranking'), ('embedding', 'Embedding'), ('pre-trained', 'Pre-trained'), ('learned', 'Learned'), ('other', 'Other')], default='other', max_length=20)),
                ('description', models.TextField(blank=True)),
                ('paper_url', models.URLField(blank=True)),
                ('code_url', models.URLField(blank=True)),
            ],
        ),
        migrations.CreateModel(
            name='DatasetBuild',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text='Builder name, a key of qval.build.BUILDERS.', max_length=50)),
                ('status', models.CharField(choices=[('queued', 'queued'), ('running', 'running'), ('finished', 'finished'), ('failed', 'failed')], default='queued', max_length=10)),
                ('stage', models.CharField(blank=True, max_length=50)),
                ('done', models.PositiveIntegerField(default=0)),
                ('total', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField(blank=True, help_text='Last progress report.', null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('dataset_key', models.CharField(blank=True, max_length=120)),
                ('fingerprint', models.CharField(blank=True, max_length=64)),
                ('error', models.TextField(blank=True)),
                ('worker', models.CharField(blank=True, help_text="Celery worker, or 'inline' for the command.", max_length=200)),
            ],
            options={
                'ordering': ['-created_at', '-pk'],
                'indexes': [models.Index(fields=['name', 'status'], name='leaderboard_name_902e5c_idx')],
            },
        ),
        migrations.CreateModel(
            name='Dataset',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('slug', models.SlugField()),
                ('version', models.CharField(max_length=20)),
                ('name', models.CharField(max_length=200)),
                ('description', models.TextField(blank=True)),
                ('fingerprint', models.CharField(max_length=64)),
                ('modalities', models.JSONField(default=list)),
                ('manifest', models.JSONField(default=dict, help_text='Provenance and build configuration.')),
                ('hosted', models.BooleanField(default=True, help_text="False for the authors' datasets of imported results: no inputs or labels here.")),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('environment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='datasets', to='leaderboard.environment')),
            ],
            options={
                'ordering': ['slug', '-version'],
            },
        ),
        migrations.CreateModel(
            name='LabelSet',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reference_policy', models.CharField(max_length=200)),
                ('discount', models.FloatField()),
                ('num_rollouts', models.PositiveIntegerField()),
                ('aggregation', models.CharField(default='max', max_length=20)),
                ('horizon', models.PositiveIntegerField(null=True)),
                ('dataset', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='labelset', to='leaderboard.dataset')),
            ],
        ),
        migrations.CreateModel(
            name='Label',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('split', models.CharField(choices=[('train', 'train'), ('dev', 'dev'), ('test', 'test')], max_length=8)),
                ('target', models.CharField(choices=[('q', 'Q (state–action)'), ('v', 'V (state)')], max_length=1)),
                ('item_id', models.CharField(help_text='Candidate id (q) or state id (v).', max_length=100)),
                ('value', models.FloatField()),
                ('labelset', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='labels', to='leaderboard.labelset')),
            ],
        ),
        migrations.CreateModel(
            name='State',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('external_id', models.CharField(max_length=100)),
                ('position', models.PositiveIntegerField(help_text='Order of the state in the dataset.')),
                ('split', models.CharField(choices=[('train', 'train'), ('dev', 'dev'), ('test', 'test')], max_length=8)),
                ('trajectory', models.PositiveIntegerField()),
                ('step', models.PositiveIntegerField()),
                ('task', models.CharField(max_length=200)),
                ('observation', models.TextField()),
                ('history', models.JSONField(default=list)),
                ('image', models.CharField(blank=True, max_length=300, null=True)),
                ('end_image', models.CharField(blank=True, help_text='Goal image: the final state of the reference rollout from this state (withheld on hidden splits).', max_length=300, null=True)),
                ('task_type', models.CharField(blank=True, help_text="The kind of task (ALFWorld's task type), where the environment has several kinds.", max_length=100, null=True)),
                ('dataset', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='states', to='leaderboard.dataset')),
            ],
            options={
                'ordering': ['position'],
            },
        ),
        migrations.CreateModel(
            name='Candidate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('external_id', models.CharField(max_length=100)),
                ('index', models.PositiveSmallIntegerField()),
                ('action', models.TextField()),
                ('next_state', models.TextField()),
                ('is_actor', models.BooleanField()),
                ('next_image', models.CharField(blank=True, max_length=300, null=True)),
                ('end_image', models.CharField(blank=True, help_text='Goal image: the final state of the reference rollout after this action (withheld on hidden splits).', max_length=300, null=True)),
                ('state', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='candidates', to='leaderboard.state')),
            ],
            options={
                'ordering': ['state__position', 'index'],
            },
        ),
        migrations.AddConstraint(
            model_name='dataset',
            constraint=models.UniqueConstraint(fields=('slug', 'version'), name='dataset_slug_version'),
        ),
        migrations.AddIndex(
            model_name='label',
            index=models.Index(fields=['labelset', 'split', 'target'], name='leaderboard_labelse_018d6b_idx'),
        ),
        migrations.AddConstraint(
            model_name='label',
            constraint=models.UniqueConstraint(fields=('labelset', 'target', 'item_id'), name='label_unique'),
        ),
        migrations.AddIndex(
            model_name='state',
            index=models.Index(fields=['dataset', 'split', 'position'], name='leaderboard_dataset_052871_idx'),
        ),
        migrations.AddConstraint(
            model_name='state',
            constraint=models.UniqueConstraint(fields=('dataset', 'external_id'), name='state_unique_id'),
        ),
        migrations.AddIndex(
            model_name='candidate',
            index=models.Index(fields=['external_id'], name='leaderboard_externa_2171ea_idx'),
        ),
        migrations.AddConstraint(
            model_name='candidate',
            constraint=models.UniqueConstraint(fields=('state', 'index'), name='candidate_unique_index'),
        ),
    ]
