"""`jha fleet`: the service's start, run and stop. It starts in this order, each part refusing
with a clear error before the next: settings and secret files, the database (migrated to this
version's schema), the HTTP listener, then the MQTT session. The web side reads on a connection
of its own, to database.read_conninfo (a streaming replica) when set, made at its first request:
a database the web side cannot reach answers 503 and does not stop the ingest. SIGTERM or SIGINT
stops it: the ingest disconnects (what it did not acknowledge stays queued at the broker for the
next start), then the listener closes.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from agent.config.secret_file import read_secret_file
from agent.errors import EX_UNAVAILABLE, AgentError
from agent.fleet.ingest import Ingest
from agent.fleet.migrate import migrations
from agent.fleet.plan import PlanReader
from agent.fleet.settings import FleetSettings
from agent.fleet.store import Placement, Store, connect
from agent.fleet.tls import server_context
from agent.fleet.web import HttpLimits, PlanServer
from agent.fleet.web_app import PlanApp
from agent.logfmt import kv, register_secret
from agent.sd_notify import Notifier

log = logging.getLogger(__name__)


class Unavailable(AgentError):
    """The database or the listen address cannot be reached (exit 69)."""

    exit_code = EX_UNAVAILABLE


@dataclass(frozen=True)
class Secrets:
    token: str
    broker_password: str | None
    database_password: str | None
    replica_password: str | None = None  # read_password_file's; None: database_password


def read_secrets(s: FleetSettings) -> Secrets:
    found = Secrets(
        read_secret_file(s.http.token_file, "token file"),
        _optional_secret(s.broker.password_file, "broker password file"),
        _optional_secret(s.database.password_file, "database password file"),
        _optional_secret(s.database.read_password_file, "replica password file"),
    )
    for value in (
        found.token,
        found.broker_password,
        found.database_password,
        found.replica_password,
    ):
        if value is not None:
            register_secret(value)  # the log filter redacts it wherever it would appear
    return found


def _optional_secret(path: str | None, what: str) -> str | None:
    return None if path is None else read_secret_file(path, what)


class FleetService:
    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.secrets = read_secrets(settings)
        placements = {s.topic_prefix: Placement(s.site, s.line) for s in settings.sources}
        self._placements = placements
        db = settings.database
        self.store = Store(connect(db.conninfo, self.secrets.database_password), placements)
        applied = self.store.migrate()
        log.info(kv("fleet_database_ready", migrations_applied=",".join(applied) or "none"))
        self._plan_database = "primary" if settings.database.read_conninfo is None else "replica"
        self._plan_database_down = False  # logged once when it goes, once when it is back
        self.reader = PlanReader(self._reader_connection, settings.stale_after_s)
        self.ingest = Ingest(
            settings, self.store, self.secrets.broker_password, reconnect_store=self._new_store
        )
        http = settings.http
        tls = None
        if http.cert_file is not None and http.key_file is not None:
            tls = server_context(http.cert_file, http.key_file)
        app = PlanApp(self.secrets.token, self.reader, self._stats)
        limits = HttpLimits(
            max_connections=http.max_connections, request_timeout_s=http.request_timeout_s
        )
        self.web = PlanServer(http.host, http.port, app, tls, limits)

    def _stats(self) -> dict[str, Any]:
        """/api/stats: the ingest's counters and the web side's."""
        return {**self.ingest.stats().to_dict(), "http": self.web.stats()}

    def _reader_connection(self) -> psycopg.Connection[Any]:
        """The plan's connection; an OperationalError (the web side's 503) when its database
        cannot be reached or, for a replica, has not replayed this version's schema yet."""
        try:
            conn = self._open_reader()
        except psycopg.OperationalError as exc:
            if not self._plan_database_down:
                error = " ".join(str(exc).split())[:300]
                log.warning(
                    kv("fleet_plan_database_unavailable", database=self._plan_database, error=error)
                )
            self._plan_database_down = True
            raise
        if self._plan_database_down:
            log.info(kv("fleet_plan_database_back", database=self._plan_database))
        self._plan_database_down = False
        return conn

    def _open_reader(self) -> psycopg.Connection[Any]:
        db = self.settings.database
        if db.read_conninfo is None:
            conn = connect(db.conninfo, self.secrets.database_password)
        else:
            password = self.secrets.replica_password or self.secrets.database_password
            conn = connect(db.read_conninfo, password)
        try:
            conn.autocommit = True  # reads only: no transaction left open between requests
            conn.execute("SET TIME ZONE 'UTC'")  # the JSON the database writes gives UTC times
            if db.read_conninfo is not None:
                _require_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _new_store(self) -> Store:
        db = self.settings.database
        return Store(connect(db.conninfo, self.secrets.database_password), self._placements)

    def start(self) -> None:
        self.web.start()
        self.ingest.start()
        host, port = self.web.address
        log.info(
            kv(
                "fleet_started",
                http=f"{'https' if self.settings.http.cert_file else 'http'}://{host}:{port}/",
                broker=self.settings.broker.host,
                plan_database=self._plan_database,
            )
        )

    def alive(self) -> bool:
        return self.ingest.alive() and self.web.alive()

    def stop(self) -> None:
        self.ingest.stop()
        self.web.stop()
        stats = self.ingest.stats()
        log.info(
            kv(
                "fleet_stopped",
                received=stats.received,
                stored=stats.stored,
                duplicates=stats.duplicates,
                rejected=stats.rejected,
            )
        )


def _require_schema(conn: psycopg.Connection[Any]) -> None:
    """A replica replays the primary's migrations some time after the service applied them:
    until then its tables are missing or old, which is the replica not being ready yet."""
    newest = len(migrations())
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    replayed = 0
    if row is not None and row[0]:
        found = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
        replayed = 0 if found is None else int(found[0])
    if replayed < newest:
        raise psycopg.OperationalError(
            f"the replica has replayed schema version {replayed} of {newest}: "
            "it lags the primary or is not a replica of database.conninfo"
        )


def run(settings: FleetSettings) -> int:
    """Run until SIGTERM or SIGINT; 0 after a clean stop."""
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        service = FleetService(settings)
        service.start()
    except (psycopg.OperationalError, OSError) as exc:
        # The database or the listen address is not there (yet): exit 69, systemd retries.
        raise Unavailable(f"jha fleet cannot start: {' '.join(str(exc).split())}") from None
    notify = Notifier()  # one sd_notify implementation for both services (agent.sd_notify)
    notify.send("READY=1")
    last = service.ingest.stats()
    while not done.wait(timeout=15.0):
        s = service.ingest.stats()
        notify.send(f"STATUS=stored {s.stored}, duplicates {s.duplicates}, rejected {s.rejected}")
        if s != last:  # one line per 15 s of activity, none while idle
            log.info(
                kv(
                    "fleet_ingest",
                    connected=str(s.connected).lower(),
                    received=s.received,
                    stored=s.stored,
                    duplicates=s.duplicates,
                    rejected=s.rejected,
                    db_errors=s.db_errors,
                )
            )
            last = s
        # The watchdog is fed only while both halves live: a dead writer thread would leave
        # messages unacknowledged forever behind a listener that still answers.
        if service.alive():
            notify.send("WATCHDOG=1")
        else:
            log.error(kv("fleet_part_died", ingest=service.ingest.alive(), web=service.web.alive()))
    notify.send("STOPPING=1")
    service.stop()
    return 0
