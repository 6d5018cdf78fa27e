-- The fleet's first schema: reports, joint health and agent status as the agents sent them.
-- Every table is keyed by the agents' own message ids, so a QoS 1 duplicate or a replay of
-- the same message inserts nothing (INSERT ... ON CONFLICT DO NOTHING).
-- No index beyond the keys: each one costs every insert, and the plan reads joint_latest by
-- its key; an index comes with the query that needs it.

-- A machine is a controller under one agents' topic prefix: controller names repeat between
-- edge PCs, the (prefix, controller) pair does not (the agents' retained topics rely on it).
CREATE TABLE machines (
    prefix      text NOT NULL,
    machine     text NOT NULL,
    site        text NOT NULL,
    line        text NOT NULL,
    -- The newest report time seen (created_at of a report or of a health message's report).
    last_report_at timestamptz NOT NULL,
    PRIMARY KEY (prefix, machine)
);

CREATE TABLE reports (
    report_id   uuid PRIMARY KEY,
    prefix      text NOT NULL,
    machine     text NOT NULL,
    host        text,
    created_at  timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    document    jsonb NOT NULL
);

CREATE TABLE joint_health (
    message_id        uuid PRIMARY KEY,
    report_id         uuid NOT NULL,  -- the report may be missing: agents drop full reports first
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
    -- What the plan shows, kept out of the document so a plan of thousands of joints does
    -- not read (and decompress) every joint's whole message.
    reason            text,
    recommendation    jsonb,
    spark             text,  -- the history as SVG polyline coordinates (agent.fleet.spark)
    received_at       timestamptz NOT NULL DEFAULT now(),
    document          jsonb NOT NULL
);

-- The newest health message of each joint: the plan reads this, not the whole history.
CREATE TABLE joint_latest (
    prefix            text NOT NULL,
    machine           text NOT NULL,
    joint             text NOT NULL,
    message_id        uuid NOT NULL REFERENCES joint_health,
    report_created_at timestamptz NOT NULL,
    estimated_at      timestamptz NOT NULL,
    PRIMARY KEY (prefix, machine, joint)
);

CREATE TABLE agent_status (
    prefix      text NOT NULL,
    client_id   text NOT NULL,
    state       text NOT NULL,
    at          timestamptz,
    received_at timestamptz NOT NULL DEFAULT now(),
    document    jsonb NOT NULL,
    PRIMARY KEY (prefix, client_id)
);
