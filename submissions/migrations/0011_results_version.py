"""The results version row and the PostgreSQL triggers that keep it current.

Each trigger bumps the row (creating it with a fresh ``epoch`` when it is missing) inside the writing
transaction, so a reader never sees a version newer than the data it reads after it; at worst it reloads
once more than needed.  The triggers are per statement, so a bulk write bumps the row once; on
submissions only a statement that writes a finished row bumps it (heartbeats of running jobs do not)."""

from django.db import migrations, models

FORWARD = """
CREATE FUNCTION qval_results_version_bump() RETURNS void LANGUAGE sql AS $$
    INSERT INTO submissions_resultsversion (id, epoch, counter)
    VALUES (1, md5(random()::text || clock_timestamp()::text), 1)
    ON CONFLICT (id) DO UPDATE SET counter = submissions_resultsversion.counter + 1;
$$;

CREATE FUNCTION qval_results_version_on_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qval_results_version_bump();
    RETURN NULL;
END $$;

CREATE FUNCTION qval_results_version_on_submissions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- each transition table is named only in the branches of the events that have it
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF EXISTS (SELECT 1 FROM new_rows WHERE state = 'finished') THEN
            PERFORM qval_results_version_bump();
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF EXISTS (SELECT 1 FROM old_rows WHERE state = 'finished') THEN
            PERFORM qval_results_version_bump();
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER qval_results_version_results AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON submissions_result
    FOR EACH STATEMENT EXECUTE FUNCTION qval_results_version_on_write();
CREATE TRIGGER qval_results_version_methods AFTER INSERT OR UPDATE OR DELETE ON leaderboard_method
    FOR EACH STATEMENT EXECUTE FUNCTION qval_results_version_on_write();
CREATE TRIGGER qval_results_version_submissions_insert AFTER INSERT ON submissions_submission
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qval_results_version_on_submissions();
CREATE TRIGGER qval_results_version_submissions_update AFTER UPDATE ON submissions_submission
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qval_results_version_on_submissions();
CREATE TRIGGER qval_results_version_submissions_delete AFTER DELETE ON submissions_submission
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qval_results_version_on_submissions();
"""

BACKWARD = """
DROP TRIGGER qval_results_version_submissions_delete ON submissions_submission;
DROP TRIGGER qval_results_version_submissions_update ON submissions_submission;
DROP TRIGGER qval_results_version_submissions_insert ON submissions_submission;
DROP TRIGGER qval_results_version_methods ON leaderboard_method;
DROP TRIGGER qval_results_version_results ON submissions_result;
DROP FUNCTION qval_results_version_on_submissions();
DROP FUNCTION qval_results_version_on_write();
DROP FUNCTION qval_results_version_bump();
"""


class Migration(migrations.Migration):

    dependencies = [
        ("submissions", "0010_submission_sent_at"),
        ("leaderboard", "0001_initial"),  # the trigger on leaderboard_method
    ]

    operations = [
        migrations.CreateModel(
            name="ResultsVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("epoch", models.CharField(max_length=32)),
                ("counter", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
