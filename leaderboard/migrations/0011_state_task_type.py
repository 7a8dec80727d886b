from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0010_environment_open_book'),
    ]

    operations = [
        migrations.AddField(
            model_name='state',
            name='task_type',
            field=models.CharField(blank=True, help_text="The kind of task (ALFWorld's task type), where the environment has several kinds.", max_length=100, null=True),
        ),
    ]
