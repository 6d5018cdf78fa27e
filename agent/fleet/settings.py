"""Settings of `jha fleet`: one YAML file of its own, validated like the agent's config (every
mistake at file:line, agent.schema.validate), plus the secret files it names, checked at their
line by `jha fleet check` and again when the service starts.

    broker:   the plant broker (TLS verified by default, like the agent's publisher)
    sources:  which agents' topic prefixes to subscribe to, with the site and line they are on
    database: a libpq connection string without the password (password_file holds that), and
              optionally a streaming replica's (read_conninfo) the plan is read from
    http:     where the plan is served, and the token file its clients must present
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.config.mqtt import client_tls_problems, credential_warning, topic_prefix_problems
from agent.config.secret_file import SecretFileError, read_secret_file
from agent.errors import ConfigError
from agent.fleet.tls import key_file_problem, server_context
from agent.schema.validate import validate
from agent.schema.yaml_lines import ConfigIssue, Node, config_error, issues_of, load_yaml

DEFAULT_FLEET_CONFIG = Path("/etc/jha-fleet/fleet.yaml")  # systemd/jha-fleet.service
# systemd's LoadCredential= puts the service's copies here only while the service runs.
CREDENTIALS_DIR = "/run/credentials/"


@dataclass(frozen=True)
class BrokerSettings:
    host: str = field(metadata={"min_len": 1, "doc": "the plant broker"})
    # Fixed, because the broker keeps the persistent session (and what it queued while the
    # service was away) under this id.
    client_id: str = field(metadata={"min_len": 1, "doc": "fixed: the persistent session's id"})
    port: int = field(default=8883, metadata={"ge": 1, "le": 65535})
    tls: bool = field(default=True, metadata={"doc": "false only for a broker on this host"})
    ca_file: str | None = field(default=None, metadata={"min_len": 1})
    cert_file: str | None = field(default=None, metadata={"min_len": 1})
    key_file: str | None = field(default=None, metadata={"min_len": 1})
    tls_insecure: bool = False
    username: str | None = field(default=None, metadata={"min_len": 1})
    password_file: str | None = field(default=None, metadata={"min_len": 1})
    keepalive_s: int = field(default=60, metadata={"ge": 5, "le": 65535})
    reconnect_min_s: float = field(default=1.0, metadata={"gt": 0.0, "le": 60.0})
    reconnect_max_s: float = field(default=60.0, metadata={"gt": 0.0, "le": 3600.0})
    # Several `jha fleet` processes (each its own client_id) sharing the ingest: MQTT 5 shared
    # subscriptions, each message to one of them. The store's idempotency makes any split safe.
    # Retained health is not sent to shared subscriptions: reports and new health still are.
    shared_group: str | None = field(default=None, metadata={"min_len": 1})
    # Messages the broker may send before their acknowledgement (each waits for its commit);
    # also the most this service reads and holds unacknowledged (agent.fleet.mqtt_session).
    max_inflight: int = field(default=1000, metadata={"ge": 1, "le": 65535})

    def check(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        out += client_tls_problems(self)
        if self.shared_group is not None and any(c in self.shared_group for c in "/+#\x00"):
            out.append(("shared_group", "expected no / + # or NUL"))
        if self.reconnect_max_s < self.reconnect_min_s:
            out.append(("reconnect_max_s", "expected a number >= reconnect_min_s"))
        return out


@dataclass(frozen=True)
class AgentBinding:
    """One agent (its publish.mqtt.client_id) and the machines (its controllers' names) it
    alone speaks for: the broker's ACL entry for it says the same."""

    client_id: str = field(metadata={"min_len": 1})
    machines: tuple[str, ...] = field(metadata={"min_len": 1})


@dataclass(frozen=True)
class SourceSettings:
    """Agents publishing under `topic_prefix` (their publish.mqtt.topic_prefix)."""

    topic_prefix: str = field(metadata={"min_len": 1})
    site: str = field(metadata={"min_len": 1})
    line: str = field(metadata={"min_len": 1})
    # Which agent speaks for which machines under this prefix (agent.fleet.binding): any other
    # agent's report, health or status is refused and counted. Empty: any agent, any machine.
    agents: tuple[AgentBinding, ...] = ()

    def check(self) -> list[tuple[str, str]]:
        out = [("topic_prefix", m) for m in topic_prefix_problems(self.topic_prefix)]
        owner: dict[str, int] = {}
        for i, a in enumerate(self.agents):
            for j, machine in enumerate(a.machines):
                if machine in owner and owner[machine] != i:
                    msg = f"expected each machine bound to one agent, found {machine!r} again "
                    out.append((f"agents[{i}].machines[{j}]", msg + f"(agents[{owner[machine]}])"))
                owner.setdefault(machine, i)
        seen = [a.client_id for a in self.agents]
        for i, client in enumerate(seen):
            if client in seen[:i]:
                out.append((f"agents[{i}].client_id", "expected each agent once, found it again"))
        return out


@dataclass(frozen=True)
class DatabaseSettings:
    conninfo: str = field(
        metadata={"min_len": 1, "doc": "libpq string, e.g. 'host=/run/postgresql dbname=jha'"}
    )
    password_file: str | None = field(default=None, metadata={"min_len": 1})
    # A streaming replica the plan is read from (page, JSON, stored reports), so that readers
    # take no work from the primary, where ingest and migrations stay. It lags the primary.
    read_conninfo: str | None = field(default=None, metadata={"min_len": 1})
    # Only for another role or password on the replica: a physical replica has the primary's
    # roles, so without it the replica is given password_file's password.
    read_password_file: str | None = field(default=None, metadata={"min_len": 1})
    # History older than this many whole months (by the report's time) is dropped, a monthly
    # partition at a time; None keeps everything (13 GB a year for 2,000 machines).
    retention_months: int | None = field(default=None, metadata={"ge": 1, "le": 1200})

    def check(self) -> list[tuple[str, str]]:
        out = _conninfo_problems("conninfo", self.conninfo, "password_file")
        if self.read_conninfo is not None:
            out += _conninfo_problems("read_conninfo", self.read_conninfo, "read_password_file")
        elif self.read_password_file is not None:
            out.append(("read_password_file", "expected read_conninfo with it, found none"))
        return out


def _conninfo_problems(name: str, conninfo: str, password_key: str) -> list[tuple[str, str]]:
    if "password" in conninfo.lower():
        return [(name, f"expected no password in {name}: put it in {password_key}")]
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # jha fleet check on a host without the fleet extra
        return []
    try:
        conninfo_to_dict(conninfo)
    except Exception as exc:  # psycopg.ProgrammingError: libpq's own words
        return [(name, f"expected a libpq connection string, found: {exc}")]
    return []


@dataclass(frozen=True)
class HttpSettings:
    token_file: str = field(metadata={"min_len": 1, "doc": "bearer token, mode 0600 or 0400"})
    host: str = field(default="127.0.0.1", metadata={"min_len": 1})
    port: int = field(default=8470, metadata={"ge": 0, "le": 65535})
    # HTTPS: the token crosses the plant network only encrypted. PEM chain, and its key (only
    # its owner may read it; systemd's LoadCredential= can hand the service a copy).
    cert_file: str | None = field(default=None, metadata={"min_len": 1})
    key_file: str | None = field(default=None, metadata={"min_len": 1})
    # Open connections at most: beyond it a new one closes the oldest that is waiting for its
    # request (agent.fleet.web). Below the unit's LimitNOFILE (4096), with room for the rest.
    max_connections: int = field(default=256, metadata={"ge": 8, "le": 3072})
    # A request's head (line and headers, and the TLS handshake) must be complete within this
    # of the connection's start or the previous answer: a slow sender is not a connection kept.
    request_timeout_s: float = field(default=10.0, metadata={"gt": 0.0, "le": 300.0})

    def check(self) -> list[tuple[str, str]]:
        if (self.cert_file is None) != (self.key_file is None):
            missing = "key_file" if self.key_file is None else "cert_file"
            return [(missing, "cert_file and key_file go together: expected both or neither")]
        return []


@dataclass(frozen=True)
class FleetSettings:
    broker: BrokerSettings
    sources: tuple[SourceSettings, ...] = field(metadata={"min_len": 1})
    database: DatabaseSettings
    http: HttpSettings
    # A machine with no report for this long is shown as stale.
    stale_after_s: float = field(default=36 * 3600.0, metadata={"gt": 0.0, "le": 3.2e7})
    # Bigger messages are refused unparsed (logged, counted): the agents' own cap is 1 MiB.
    max_payload_bytes: int = field(default=1024 * 1024, metadata={"ge": 1024, "le": 268_435_455})
    # A message stamped further ahead of the fleet's clock is refused (logged, counted): the
    # newest-health pointer and a machine's last report time only move forward, so one stamp
    # from the future would hide every genuine report after it. Agents keep NTP time.
    max_clock_skew_s: float = field(default=300.0, metadata={"gt": 0.0, "le": 86400.0})

    def check(self) -> list[tuple[str, str]]:
        out = []
        seen: dict[str, int] = {}
        for i, s in enumerate(self.sources):
            if s.topic_prefix in seen:
                first = seen[s.topic_prefix]
                msg = f"expected a unique topic_prefix, found it again (first in sources[{first}])"
                out.append((f"sources[{i}].topic_prefix", msg))
            seen.setdefault(s.topic_prefix, i)
        return out


# (dotted path, what it is) of every secret file the settings may name.
_SECRET_FILES = (
    (("broker", "password_file"), "broker password file"),
    (("database", "password_file"), "database password file"),
    (("database", "read_password_file"), "replica password file"),
    (("http", "token_file"), "token file"),
)


def fleet_issues(path: str | Path) -> tuple[FleetSettings | None, list[ConfigIssue]]:
    """(settings, []) or (None, every mistake sorted by line), secret files included."""
    file = str(path)
    try:
        root = load_yaml(path)
    except ConfigError as exc:
        return None, issues_of(exc)
    settings, issues = validate(FleetSettings, root, file)
    found = list(issues)
    # Every mistake in one pass (a planner found 14 in 4 runs of `jha fleet check`): the
    # secret files and the cross-field rules are read from the file itself when the schema
    # already failed, so they do not wait for the next run.
    for parts, what in _SECRET_FILES:
        node = root.find(parts)
        name = node.value if node is not None and isinstance(node.value, str) else None
        if name is None:
            continue
        if name.startswith(CREDENTIALS_DIR) and not Path(name).exists():
            continue  # systemd's LoadCredential= makes it when the service starts: see notes
        try:
            read_secret_file(name, what)
        except SecretFileError as exc:
            found.append(ConfigIssue(file, root.line_of(parts), ".".join(parts), _expected(exc)))
    if settings is not None:
        found += _https_issues(file, root, settings.http)
    else:
        found += _cross_field_issues(file, root, {(i.line, i.path) for i in issues})
    found.sort(key=lambda i: i.line)
    return (None, found) if found else (settings, [])


def _cross_field_issues(file: str, root: Node, known: set[tuple[int, str]]) -> list[ConfigIssue]:
    """The cross-field rules of FleetSettings and HttpSettings from the raw file, for a file
    the schema refused (validate runs them only on sections that are whole)."""
    out = []
    sources = root.get("sources")
    seen: dict[str, int] = {}
    for i, item in enumerate(sources.items if sources is not None else ()):
        prefix = item.get("topic_prefix") if item.kind == "mapping" else None
        if prefix is None or not isinstance(prefix.value, str):
            continue
        name = prefix.value
        if name in seen:
            msg = f"expected a unique topic_prefix, found it again (first in sources[{seen[name]}])"
            out.append(ConfigIssue(file, prefix.line, f"sources[{i}].topic_prefix", msg))
        seen.setdefault(name, i)
    http = root.get("http")
    if http is not None and http.kind == "mapping":
        cert, key = http.get("cert_file"), http.get("key_file")
        if (cert is None) != (key is None):
            missing = "key_file" if key is None else "cert_file"
            line = root.line_of(("http", "cert_file" if key is None else "key_file"))
            msg = "cert_file and key_file go together: expected both or neither"
            out.append(ConfigIssue(file, line, f"http.{missing}", msg))
    return [i for i in out if (i.line, i.path) not in known]


def _https_issues(file: str, root: Node, http: HttpSettings) -> list[ConfigIssue]:
    """The HTTPS key's mode and whether the pair loads (skipped for systemd credentials that
    only the running service sees)."""
    if http.cert_file is None or http.key_file is None:
        return []
    if any(
        f.startswith(CREDENTIALS_DIR) and not Path(f).exists()
        for f in (http.cert_file, http.key_file)
    ):
        return []
    problem = key_file_problem(http.key_file)
    if problem is not None:
        return [ConfigIssue(file, root.line_of(("http", "key_file")), "http.key_file", problem)]
    try:
        server_context(http.cert_file, http.key_file)
    except ConfigError as exc:
        where = root.line_of(("http", "cert_file"))
        return [ConfigIssue(file, where, "http.cert_file", f"expected a loadable pair: {exc}")]
    return []


def fleet_notes(path: str | Path, settings: FleetSettings) -> list[ConfigIssue]:
    """Warnings of a valid file: a plan served over plain HTTP beyond this host (its token
    crosses the network in clear), a fleet without a broker credential of its own, sources
    binding no agent to its machines, secret files only the running service will see."""
    root = load_yaml(path)
    notes = []
    http = settings.http
    if http.cert_file is None and http.host not in ("127.0.0.1", "::1", "localhost"):
        note = (
            f"warning: the plan is served over plain HTTP on {http.host}: the token and the "
            "plant's health cross the network in clear; give cert_file and key_file (HTTPS), "
            "or bind to 127.0.0.1 behind a TLS proxy"
        )
        notes.append(ConfigIssue(str(path), root.line_of(("http", "host")), "http.host", note))
    login = credential_warning(settings.broker, "the fleet")
    if login is not None:
        notes.append(ConfigIssue(str(path), root.line_of(("broker",)), "broker", login))
    for i, source in enumerate(settings.sources):
        if not source.agents:
            note = (
                f"warning: no agents bound to {source.topic_prefix}: any client the broker "
                "lets publish there may report for any of its machines; list each agent's "
                "client_id and machines under agents (as the broker's ACL does)"
            )
            where = ("sources", i, "topic_prefix")
            notes.append(ConfigIssue(str(path), root.line_of(where), f"sources[{i}]", note))
    for parts, what in _SECRET_FILES:
        name = getattr(getattr(settings, parts[0]), parts[1])
        if name is not None and name.startswith(CREDENTIALS_DIR) and not Path(name).exists():
            note = (
                f"warning: the {what} {name} is not there to check: systemd's LoadCredential= "
                "creates it when the service starts; its source file is not checked here"
            )
            notes.append(ConfigIssue(str(path), root.line_of(parts), ".".join(parts), note))
    return sorted(notes, key=lambda n: n.line)


def load_fleet_settings(path: str | Path) -> FleetSettings:
    settings, issues = fleet_issues(path)
    if issues or settings is None:
        raise config_error(issues)
    return settings


def _expected(exc: SecretFileError) -> str:
    hint = " (run it as root or as the service user)" if exc.access_denied else ""
    return (
        "expected a file that only the service user may read or write (mode 0600 or 0400), "
        f"found {exc}{hint}"
    )
