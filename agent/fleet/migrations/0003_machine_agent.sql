-- Which agent speaks for a machine: its MQTT client id, from the newest message that names it
-- (agents since this version send agent_client_id). The plan joins it to agent_status, so a
-- machine whose agent went offline says so before it goes stale.
ALTER TABLE machines ADD COLUMN client_id text;
