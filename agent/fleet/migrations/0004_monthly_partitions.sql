-- The history by month: reports and joint_health become tables partitioned by the report's time
-- (created_at, report_created_at; a health message and its report share it), one partition a
-- month and a default one for what falls outside (a clock years off, a replay of old history).
-- Old history then leaves a partition at a time (database.retention_months; nothing is deleted
-- without it), instead of DELETEs over millions of rows.
-- The keys gain the partition's column (PostgreSQL asks it of a partitioned key): a message is
-- still stored once, since every copy of it carries the same report time.

ALTER TABLE reports RENAME TO reports_0003;
ALTER TABLE joint_health RENAME TO joint_health_0003;
DROP TRIGGER joint_health_moves_latest ON joint_health_0003;

CREATE TABLE reports (
    report_id   uuid NOT NULL,
    prefix      text NOT NULL,
    machine     text NOT NULL,
    host        text,
    created_at  timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    document    json NOT NULL,
    PRIMARY KEY (report_id, created_at)
) PARTITION BY RANGE (created_at);

CREATE TABLE joint_health (
    message_id        uuid NOT NULL,
    report_id         uuid NOT NULL,
    prefix            text NOT NULL,
    machine           text NOT NULL,
    joint             text NOT NULL,
    status            text NOT NULL,
    ne107             text NOT NULL,
    indicator         text NOT NULL,
    value             double precision,
    unit              text,
    estimated_at      timestamptz NOT NULL,
    report_created_at timestamptz NOT NULL,
    next_limit        text,
    forecast_at       timestamptz,
    forecast_low      timestamptz,
    forecast_high     timestamptz,
    reason            text,
    recommendation    jsonb,
    spark             text,
    received_at       timestamptz NOT NULL DEFAULT now(),
    document          json NOT NULL,
    indicators        text[] NOT NULL,
    PRIMARY KEY (message_id, report_created_at)
) PARTITION BY RANGE (report_created_at);

CREATE TABLE reports_other PARTITION OF reports DEFAULT;
CREATE TABLE joint_health_other PARTITION OF joint_health DEFAULT;

-- The partition of the month (UTC) holding `at`, made if missing; rows of that month waiting in
-- the default partition move into it. Called by the service at start and every hour for this
-- month and the next, so rows seldom wait there.
CREATE FUNCTION fleet_month_partition(at timestamptz) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    low timestamptz := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    high timestamptz := (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month')
        AT TIME ZONE 'UTC';
    suffix text := to_char(at AT TIME ZONE 'UTC', '"y"YYYY"m"MM');
    parent text;
    part text;
    col text;
BEGIN
    -- Two services of one shared subscription may both try: one at a time.
    PERFORM pg_advisory_xact_lock(hashtext('jha fleet partitions'));
    FOREACH parent IN ARRAY ARRAY['reports', 'joint_health'] LOOP
        part := parent || '_' || suffix;
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        col := CASE parent WHEN 'reports' THEN 'created_at' ELSE 'report_created_at' END;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, parent);
        EXECUTE format(
            'WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *)'
            ' INSERT INTO %I SELECT * FROM moved', parent || '_other', col, col, part)
            USING low, high;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
            parent, part, low, high);
        BEGIN
            EXECUTE format('ALTER TABLE %I ALTER COLUMN document SET COMPRESSION lz4', part);
        EXCEPTION WHEN feature_not_supported THEN
            NULL;  -- no lz4 in this server: pglz (0002)
        END;
    END LOOP;
END
$$;

-- Drop the history reported before `cutoff`: whole monthly partitions that end by then, and
-- the default partition's older rows. A joint whose newest health went with them leaves the
-- plan (its machine has not reported since before the cutoff). The number of partitions dropped.
CREATE FUNCTION fleet_drop_before(cutoff timestamptz) RETURNS integer LANGUAGE plpgsql AS $$
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
          -- The month in the name, as UTC wall time (whatever the session's time zone).
          AND make_timestamp(substr(right(c.relname, 7), 1, 4)::int, right(c.relname, 2)::int,
                             1, 0, 0, 0) + interval '1 month' <= cutoff AT TIME ZONE 'UTC'
    LOOP
        EXECUTE format('DROP TABLE %I', part.relname);
        dropped := dropped + 1;
    END LOOP;
    DELETE FROM reports_other WHERE created_at < cutoff;
    DELETE FROM joint_health_other WHERE report_created_at < cutoff;
    DELETE FROM joint_latest l WHERE NOT EXISTS (
        SELECT 1 FROM joint_health h
        WHERE h.message_id = l.message_id AND h.report_created_at = l.report_created_at);
    RETURN dropped;
END
$$;

-- A partition for every month the history holds, and for this month and the next.
SELECT fleet_month_partition(m) FROM (
    SELECT DISTINCT date_trunc('month', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS m FROM (
        SELECT created_at AS t FROM reports_0003
        UNION ALL SELECT report_created_at FROM joint_health_0003
        UNION ALL SELECT now() UNION ALL SELECT now() + interval '1 month') AS times) AS months;

INSERT INTO reports (report_id, prefix, machine, host, created_at, received_at, document)
SELECT report_id, prefix, machine, host, created_at, received_at, document FROM reports_0003;
INSERT INTO joint_health (message_id, report_id, prefix, machine, joint, status, ne107,
    indicator, value, unit, estimated_at, report_created_at, next_limit, forecast_at,
    forecast_low, forecast_high, reason, recommendation, spark, received_at, document, indicators)
SELECT message_id, report_id, prefix, machine, joint, status, ne107,
    indicator, value, unit, estimated_at, report_created_at, next_limit, forecast_at,
    forecast_low, forecast_high, reason, recommendation, spark, received_at, document, indicators
FROM joint_health_0003;
DROP TABLE reports_0003;
DROP TABLE joint_health_0003;

-- After the copy: the pointers already name each joint's newest health.
CREATE TRIGGER joint_health_moves_latest AFTER INSERT ON joint_health
    FOR EACH ROW EXECUTE FUNCTION joint_latest_follow();
