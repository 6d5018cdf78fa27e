"""Settings of the OPC UA driver (`driver: opcua`): endpoint, security, node ids, timing.

Node ids are written the way OPC UA tools print them: `ns=2;s=Robot.State`, `i=2258`,
`ns=3;i=1001`, or with the namespace URI instead of its index (`nsu=urn:acme:robot;s=State`),
which the driver resolves against the server's namespace array at every connect, so a server
that renumbers its namespaces after a restart still works.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from drivers.base import ControllerMode
from drivers.machine import canonical_endpoint

# What a cycle trigger can pass to the controller, as method arguments or parameter variables.
CycleParameter = Literal[
    "joint_index",  # the axis number of the joint (config `index`)
    "joint_name",
    "motor_speed_rad_s",
    "motor_speed_rps",
    "settle_s",
    "duration_s",
    "sample_rate_hz",
    "test_pose_rad",
    "encoder_bits",
]


class CycleStatus(enum.StrEnum):
    """The states of a test cycle as the controller reports them (mapped by `status_values`)."""

    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    ABORTED = "aborted"
    FAULT = "fault"


SecurityPolicy = Literal["None", "Basic256Sha256"]
SecurityMode = Literal["None", "Sign", "SignAndEncrypt"]

_NODE_PREFIXES = ("ns=", "nsu=", "i=", "s=", "g=", "b=")


def node_id_problem(text: str) -> str | None:
    """Why `text` is not a node id in the usual string form, or None when it looks like one."""
    first = text.split(";", 1)[0]
    if not text or not first.startswith(_NODE_PREFIXES):
        return f"expected a node id such as 'ns=2;s=Robot.State' or 'i=2258', found {text!r}"
    if first.startswith(("ns=", "nsu=")) and ";" not in text:
        return f"expected a node id with an identifier after {first!r} (e.g. '{first};s=Name')"
    return None


def _node_checks(**nodes: str | None) -> list[tuple[str, str]]:
    return [
        (name, problem)
        for name, text in nodes.items()
        if text is not None and (problem := node_id_problem(text)) is not None
    ]


def _default_state_values() -> dict[str | int, ControllerMode]:
    return {m.value: m for m in ControllerMode if m is not ControllerMode.DISCONNECTED}


def _default_status_values() -> dict[str | int, CycleStatus]:
    return {s.value: s for s in CycleStatus}


@dataclass(frozen=True)
class OpcUaSecurity:
    """Secure channel, secure by default: Basic256Sha256 with SignAndEncrypt, the agent's own
    certificate and key, and the server's certificate checked against a pinned certificate or a
    trust list before anything is sent. An untrusted server certificate is always refused.
    Talking without security takes `policy: None` and `allow_none_security: true`, both."""

    policy: SecurityPolicy = "Basic256Sha256"
    # None means SignAndEncrypt with a security policy (and None without one).
    mode: SecurityMode | None = None
    certificate: str | None = field(default=None, metadata={"doc": "client cert, DER or PEM"})
    private_key: str | None = field(default=None, metadata={"doc": "client key, PEM or DER"})
    private_key_password_file: str | None = None
    server_certificate: str | None = field(default=None, metadata={"doc": "pinned, DER or PEM"})
    trusted_certificates: str | None = field(
        default=None,
        metadata={"doc": "directory of trusted server and CA certificates (DER or PEM)"},
    )
    revocation_lists: str | None = field(
        default=None, metadata={"doc": "directory of CRLs of the CAs in trusted_certificates"}
    )
    allow_none_security: bool = field(
        default=False, metadata={"doc": "accept policy None: no signature, no encryption"}
    )
    # Must match the URI in the client certificate's subjectAltName; servers check it.
    application_uri: str = field(default="urn:joint-health-agent:client", metadata={"min_len": 1})

    def __post_init__(self) -> None:
        if self.mode is None:  # the default follows the policy; logs then show what is used
            object.__setattr__(self, "mode", "None" if self.policy == "None" else "SignAndEncrypt")

    @property
    def effective_mode(self) -> SecurityMode:
        return self.mode or "SignAndEncrypt"

    def check(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.policy == "None":
            if not self.allow_none_security:
                out.append(
                    (
                        "policy",
                        "policy None sends the interlock signals and the cycle trigger unsigned "
                        "and in clear text; expected Basic256Sha256, or allow_none_security: true "
                        "to accept that explicitly",
                    )
                )
            if self.mode != "None":
                out.append(("mode", f"expected None with policy None, found {self.mode!r}"))
            return out
        if self.mode == "None":
            out.append(
                ("mode", f"expected Sign or SignAndEncrypt with policy {self.policy}, found 'None'")
            )
        for name in ("certificate", "private_key"):
            if getattr(self, name) is None:
                out.append((name, f"required with policy {self.policy}: expected a file path"))
        if self.server_certificate is None and self.trusted_certificates is None:
            out.append(
                (
                    "trusted_certificates",
                    f"required with policy {self.policy} (or server_certificate): the directory of "
                    "server certificates the agent trusts",
                )
            )
        if self.revocation_lists is not None and self.trusted_certificates is None:
            out.append(("revocation_lists", "only used with trusted_certificates"))
        return out


@dataclass(frozen=True)
class OpcUaUser:
    """User/password identity. The password is read at connect from a file or the environment,
    never written in the config."""

    username: str = field(metadata={"min_len": 1})
    password_file: str | None = None
    password_env: str | None = field(default=None, metadata={"min_len": 1})

    def check(self) -> list[tuple[str, str]]:
        given = [n for n in ("password_file", "password_env") if getattr(self, n) is not None]
        if len(given) != 1:
            return [
                (
                    "password_file",
                    f"expected exactly one of password_file, password_env, found {len(given)}",
                )
            ]
        return []


@dataclass(frozen=True)
class OpcUaStatusNodes:
    """What the interlocks read, in one Read request per status poll."""

    state: str = field(metadata={"doc": "node id of the controller state"})
    permission: str = field(metadata={"doc": "node id of the agent-may-move signal (Boolean)"})
    # Raw state value (as the server sends it: a string or an enumeration integer) -> mode.
    state_values: dict[str | int, ControllerMode] = field(default_factory=_default_state_values)
    joint_positions: str | None = field(
        default=None, metadata={"doc": "array indexed by joint index - 1"}
    )
    joint_position_scale: float = field(default=1.0, metadata={"gt": 0.0, "doc": "value -> rad"})
    alarms: str | None = field(default=None, metadata={"doc": "String[], String, Boolean or Int"})
    speed_override: str | None = None
    speed_override_scale: float = field(
        default=1.0, metadata={"gt": 0.0, "doc": "value -> fraction (0.01 for percent)"}
    )
    operator_present: str | None = None

    def check(self) -> list[tuple[str, str]]:
        out = _node_checks(
            state=self.state,
            permission=self.permission,
            joint_positions=self.joint_positions,
            alarms=self.alarms,
            speed_override=self.speed_override,
            operator_present=self.operator_present,
        )
        if ControllerMode.STOPPED not in self.state_values.values():
            out.append(("state_values", "expected at least one value mapped to 'stopped'"))
        return out


@dataclass(frozen=True)
class OpcUaAction:
    """How to make the controller act: call a method, or write parameter variables then a
    trigger variable. Argument and variable types are read from the server at connect."""

    method: str | None = None
    object: str | None = field(default=None, metadata={"doc": "node id the method belongs to"})
    arguments: tuple[CycleParameter, ...] = ()
    variable: str | None = None
    value: Any = True
    parameters: dict[CycleParameter, str] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        out = _node_checks(method=self.method, object=self.object, variable=self.variable)
        out += _node_checks(**{f"parameters.{k}": v for k, v in self.parameters.items()})
        if (self.method is None) == (self.variable is None):
            out.append(("method", "expected exactly one of method (a call) or variable (a write)"))
        if self.method is not None:
            if self.object is None:
                out.append(("object", "required with method: the node id of its object"))
            if self.parameters:
                out.append(("parameters", "only used with variable; a method takes arguments"))
        if self.variable is not None:
            if self.arguments:
                out.append(("arguments", "only used with method; a write takes parameters"))
            if self.value is None or isinstance(self.value, list | dict):
                out.append(("value", f"expected a scalar to write, found {self.value!r}"))
        return out


@dataclass(frozen=True)
class OpcUaCycleNodes:
    trigger: OpcUaAction
    stop: OpcUaAction = field(metadata={"doc": "must stop test-cycle motion only"})
    status: str = field(metadata={"doc": "node id of the cycle status"})
    status_values: dict[str | int, CycleStatus] = field(default_factory=_default_status_values)

    def check(self) -> list[tuple[str, str]]:
        out = _node_checks(status=self.status)
        if self.stop.arguments or self.stop.parameters:
            out.append(("stop", "expected a stop without cycle arguments or parameters"))
        missing = {CycleStatus.RUNNING, CycleStatus.DONE} - set(self.status_values.values())
        if missing:
            out.append(("status_values", f"expected values mapped to {', '.join(sorted(missing))}"))
        return out


@dataclass(frozen=True)
class OpcUaBuffers:
    """Sample buffers the controller rewrites once per chunk, then bumps `sequence`."""

    sequence: str = field(metadata={"doc": "node id of the chunk sequence number (UInt32)"})
    time: str = field(metadata={"doc": "node id of the chunk's sample times"})
    motor_counts: str = field(metadata={"doc": "node id of the motor encoder counts"})
    link_counts: str | None = None
    current: str | None = None
    time_unit_s: float = field(default=1.0, metadata={"gt": 0.0})
    current_unit_a: float = field(default=1.0, metadata={"gt": 0.0})
    sequence_modulus: int = field(default=2**32, metadata={"ge": 2, "doc": "sequence wraps here"})

    def check(self) -> list[tuple[str, str]]:
        return _node_checks(
            sequence=self.sequence,
            time=self.time,
            motor_counts=self.motor_counts,
            link_counts=self.link_counts,
            current=self.current,
        )


@dataclass(frozen=True)
class OpcUaWatchdog:
    """Liveness watchdog: while a cycle runs the agent increments an integer variable every
    `interval_s`; the controller's program stops the motion when it has not changed for its
    watchdog timeout, so an agent that dies or hangs mid-cycle cannot leave the joint running.
    The timeout lives in the controller; with `timeout_node` the agent writes `timeout_s` there
    before every trigger, otherwise `timeout_s` must match what the controller was set to."""

    node: str = field(metadata={"doc": "node id of the counter the agent increments (integer)"})
    interval_s: float = field(default=0.1, metadata={"gt": 0.0, "le": 5.0})
    timeout_s: float = field(
        default=0.5,
        metadata={"ge": 0.05, "le": 60.0, "doc": "no change this long: the controller stops"},
    )
    timeout_node: str | None = field(
        default=None, metadata={"doc": "node id (Double, seconds) the agent writes timeout_s to"}
    )

    def check(self) -> list[tuple[str, str]]:
        out = _node_checks(node=self.node, timeout_node=self.timeout_node)
        # Three beats per timeout: one late write must not stop a healthy cycle.
        if self.timeout_s < 3.0 * self.interval_s:
            out.append(
                (
                    "timeout_s",
                    f"expected at least 3 x interval_s ({3.0 * self.interval_s:g} s), "
                    f"found {self.timeout_s:g}",
                )
            )
        return out


@dataclass(frozen=True)
class OpcUaSettings:
    endpoint: str = field(metadata={"doc": "opc.tcp://host:port/path"})
    status: OpcUaStatusNodes
    cycle: OpcUaCycleNodes
    buffers: OpcUaBuffers
    # Required: a channel without security is a choice the config must state (policy None and
    # allow_none_security), never what an omitted section falls back to.
    security: OpcUaSecurity = field(
        metadata={"doc": "Basic256Sha256 certificate, key and trust list; or policy None"}
    )
    user: OpcUaUser | None = None
    request_timeout_s: float = field(default=2.0, metadata={"gt": 0.0, "le": 60.0})
    connect_timeout_s: float = field(
        default=10.0, metadata={"gt": 0.0, "doc": "connect() retries with backoff this long"}
    )
    reconnect_initial_s: float = field(default=0.5, metadata={"gt": 0.0})
    reconnect_max_s: float = field(default=30.0, metadata={"gt": 0.0})
    publishing_interval_ms: float = field(default=20.0, metadata={"gt": 0.0, "le": 1000.0})
    queue_size: int = field(
        default=1000, metadata={"ge": 2, "doc": "chunks the server may hold between publishes"}
    )
    stall_timeout_s: float = field(
        default=2.0, metadata={"gt": 0.0, "doc": "no chunk for this long aborts a capture"}
    )
    sample_count_tolerance: int = field(
        default=0, metadata={"ge": 0, "doc": "samples the capture may differ from the cycle's"}
    )
    control_period_s: float = field(default=0.05, metadata={"gt": 0.0, "le": 1.0})
    # Strongly advised (safety G6): without it a controller runs a cycle to its end after the
    # agent dies; the driver logs a warning at every connect.
    watchdog: OpcUaWatchdog | None = None
    # A chunk published twice with the same sequence number and the same samples carries no
    # new information: drop_identical keeps one copy. Any other repeat is refused.
    duplicate_chunks: Literal["refuse", "drop_identical"] = "refuse"

    def machine_address(self) -> str:
        """The server and the machine's cycle on it: a gateway may serve several machines,
        each with its own cycle nodes."""
        return f"OPC UA {canonical_endpoint(self.endpoint, 4840)} cycle {self.cycle.status}"

    def check(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not self.endpoint.startswith("opc.tcp://") or len(self.endpoint) <= len("opc.tcp://"):
            found = f"found {self.endpoint!r}"
            out.append(("endpoint", f"expected opc.tcp://host:port[/path], {found}"))
        if self.reconnect_max_s < self.reconnect_initial_s:
            out.append(
                (
                    "reconnect_max_s",
                    f"expected a number >= reconnect_initial_s ({self.reconnect_initial_s:g})",
                )
            )
        return out
