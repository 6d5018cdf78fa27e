-- One row per report id and per health message id, whatever time the message carries.
-- Since 0004 the keys of the partitioned tables hold the partition's time column (PostgreSQL
-- asks it of a partitioned key), so a replay of an id with another created_at added a second
-- row and /api/reports/<id> returned either. Each id is now claimed once, with its time, in an
-- unpartitioned table; a message whose id is claimed is stored only when its time is the
-- claimed one (a redelivery: nothing new), and refused (counted) when it is not.

CREATE TABLE report_ids (
    report_id  uuid PRIMARY KEY,
    created_at timestamptz NOT NULL
);
CREATE TABLE message_ids (
    message_id        uuid PRIMARY KEY,
    report_created_at timestamptz NOT NULL
);

-- The ids already stored: the first row received keeps its id (a replay already stored keeps
-- its row; from now on none is added).
INSERT INTO report_ids (report_id, created_at)
SELECT DISTINCT ON (report_id) report_id, created_at FROM reports
ORDER BY report_id, received_at, created_at;
INSERT INTO message_ids (message_id, report_created_at)
SELECT DISTINCT ON (message_id) message_id, report_created_at FROM joint_health
ORDER BY message_id, received_at, report_created_at;

-- Retention forgets the claims with the rows (0004's function, and the claims older than the
-- cutoff).
CREATE OR REPLACE FUNCTION fleet_drop_before(cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('jha fleet partitions'));
    FOR part IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relname IN ('reports', 'joint_health')
          AND c.relname ~ '_y[0-9]{4}m[0-9]{2}$'
          AND make_timestamp(substr(right(c.relname, 7), 1, 4)::int, right(c.relname, 2)::int,
                             1, 0, 0, 0) + interval '1 month' <= cutoff AT TIME ZONE 'UTC'
    LOOP
        EXECUTE format('DROP TABLE %I', part.relname);
        dropped := dropped + 1;
    END LOOP;
    DELETE FROM reports_other WHERE created_at < cutoff;
    DELETE FROM joint_health_other WHERE report_created_at < cutoff;
    DELETE FROM report_ids WHERE created_at < cutoff;
    DELETE FROM message_ids WHERE report_created_at < cutoff;
    DELETE FROM joint_latest l WHERE NOT EXISTS (
        SELECT 1 FROM joint_health h
        WHERE h.message_id = l.message_id AND h.report_created_at = l.report_created_at);
    RETURN dropped;
END
$$;
