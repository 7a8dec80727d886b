"""Every bump of the results version draws a new epoch, not only the one that creates the row.

A bump rolled back (a test's transaction, or any aborted write) left the counter where it was, so the
next bump produced the same ``(epoch, counter)`` again for other data: a page memo kept for the rolled-back
version was served as current.  With a fresh epoch per bump, two versions are equal only when they are
the same write.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION qval_results_version_bump() RETURNS void LANGUAGE sql AS $$
    INSERT INTO submissions_resultsversion (id, epoch, counter)
    VALUES (1, md5(random()::text || clock_timestamp()::text), 1)
    ON CONFLICT (id) DO UPDATE SET counter = submissions_resultsversion.counter + 1,
                                   epoch = md5(random()::text || clock_timestamp()::text);
$$;
"""

BACKWARD = """
CREATE OR REPLACE FUNCTION qval_results_version_bump() RETURNS void LANGUAGE sql AS $$
    INSERT INTO submissions_resultsversion (id, epoch, counter)
    VALUES (1, md5(random()::text || clock_timestamp()::text), 1)
    ON CONFLICT (id) DO UPDATE SET counter = submissions_resultsversion.counter + 1;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("submissions", "0013_disclose_hidden_counts")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
