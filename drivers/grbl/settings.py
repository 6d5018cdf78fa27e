"""Settings of the G-code streaming driver (`driver: grbl`), validated by agent.schema.validate.

A CNC the agent streams to is a controller entry in the agent's config:

    controllers:
      - name: mill1
        driver: grbl
        settings:
          port: /dev/ttyUSB0
          protocol: grbl            # or dnc (XON/XOFF drip feed; needs xon_xoff: true)
          machine: machines/farouki2022.yaml   # relative to this config file, or inline
        joints: []

`machine` is the machine description of agent.feedrate.machine, given as a path (absolute, or
relative to the directory of the config file that names it) or inline as a mapping. An inline
machine is checked with the config, every mistake at its own line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.errors import ConfigError
from agent.feedrate.machine import MachineSettings, load_machine
from agent.schema.yaml_lines import issues_of
from drivers.machine import canonical_device

Protocol = Literal["grbl", "dnc"]

# Whether a controller paces a drip feed is a property of the controller, not of the G-code
# dialect its machine file names: GRBL 1.1 (serial.c) has no XON/XOFF, drops what overflows its
# 128-byte buffer and runs the corrupted lines (issue 28: X = 134 mm on a 0-16 mm program).
DNC_NEEDS_XON_XOFF = (
    "expected xon_xoff: true for protocol dnc (a drip feed is paced only by the controller's "
    "XON/XOFF; without it the controller's receive buffer overruns and the lines it runs are "
    "corrupted). GRBL 1.1 has no XON/XOFF: use protocol grbl (character counting)"
)
Handshake = Literal["reset", "banner", "none"]


@dataclass(frozen=True)
class StreamFilterSettings:
    """The feedrate filter between the program and the controller (Farouki & Swett 2022)."""

    enabled: bool = field(
        default=True, metadata={"doc": "false: stream the program unchanged (the baseline)"}
    )
    lookahead_lines: int | None = field(
        default=None,
        metadata={"ge": 2, "le": 1_000_000, "doc": "override the machine file's lookahead.lines"},
    )
    lookahead_s: float | None = field(
        default=None, metadata={"gt": 0.0, "doc": "override the machine file's lookahead.seconds"}
    )


@dataclass(frozen=True)
class GrblSettings:
    port: str = field(metadata={"min_len": 1, "doc": "serial device of the CNC, /dev/ttyUSB0"})
    machine: str | dict[str, Any] = field(
        metadata={
            "doc": "machine file (config/machines/*.yaml, relative to the config file) or inline"
        }
    )
    baudrate: int = field(default=115_200, metadata={"gt": 0})
    exclusive: bool = field(default=True, metadata={"doc": "lock the port against other users"})
    protocol: Protocol = field(
        default="grbl",
        metadata={"doc": "grbl: character counting with ok/error:N; dnc: drip feed with XON/XOFF"},
    )
    xon_xoff: bool = field(
        default=False,
        metadata={
            "doc": "the controller paces the line with XON/XOFF (GRBL 1.1: no; a DNC control: "
            "yes); protocol dnc needs it"
        },
    )
    rx_buffer_bytes: int = field(
        default=128,
        metadata={"ge": 16, "le": 65_536, "doc": "the controller's receive buffer (GRBL 1.1: 128)"},
    )
    max_line_chars: int | None = field(
        default=None,
        metadata={
            "ge": 8,
            "doc": "longest line the controller takes (null: the machine's dialect's)",
        },
    )
    handshake: Handshake = field(
        default="reset",
        metadata={"doc": "reset: send Ctrl-X and await the banner before streaming"},
    )
    filter: StreamFilterSettings = field(default_factory=StreamFilterSettings)
    startup_timeout_s: float = field(default=5.0, metadata={"gt": 0.0, "le": 600.0})
    reply_timeout_s: float = field(
        default=1.0,
        metadata={
            "gt": 0.0,
            "le": 60.0,
            "doc": "status report after '?' (also the one before streaming)",
        },
    )
    stall_timeout_s: float = field(
        default=10.0,
        metadata={"gt": 0.0, "le": 3600.0, "doc": "silence while the controller owes an answer"},
    )
    write_timeout_s: float = field(default=5.0, metadata={"gt": 0.0, "le": 600.0})
    hold_timeout_s: float = field(
        default=5.0,
        metadata={
            "gt": 0.0,
            "le": 600.0,
            "doc": "stop_motion: feed hold to standstill before reset",
        },
    )
    status_interval_s: float | None = field(
        default=0.2, metadata={"gt": 0.0, "doc": "'?' polls while streaming (null: none)"}
    )
    wait_idle: bool = field(
        default=False,
        metadata={"doc": "after the last line, wait until the machine has run the program out"},
    )
    dnc_feed_hold: str | None = field(
        default=None,
        metadata={
            "min_len": 1,
            "doc": "DNC: the controller's real-time feed-hold code, sent on an error, "
            'a stall or `jha feedrate hold` (GRBL with XON/XOFF: "!"); null: it takes none',
        },
    )
    dnc_resume: str | None = field(
        default=None,
        metadata={"min_len": 1, "doc": 'DNC: its cycle-start code after such a hold (GRBL: "~")'},
    )
    dnc_reset: str | None = field(
        default=None,
        metadata={
            "min_len": 1,
            "doc": "DNC: its reset code, sent after the hold when a stream ends early so that "
            'nothing queued is left for a cycle start (GRBL: "\\x18"); null: it takes none',
        },
    )

    def machine_address(self) -> str:
        return f"serial port {canonical_device(self.port)}"

    def check(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        if self.max_line_chars is not None and self.max_line_chars + 1 > self.rx_buffer_bytes:
            found.append(
                (
                    "max_line_chars",
                    f"expected a line (with its newline) to fit the "
                    f"{self.rx_buffer_bytes}-byte receive buffer, found "
                    f"{self.max_line_chars} characters",
                )
            )
        if self.protocol == "dnc" and not self.xon_xoff:
            found.append(("protocol", DNC_NEEDS_XON_XOFF))
        for name in ("dnc_feed_hold", "dnc_resume", "dnc_reset"):
            code = getattr(self, name)
            if code is None:
                continue
            if self.protocol != "dnc":
                found.append(
                    (
                        name,
                        "expected only with protocol: dnc (GRBL's feed hold, cycle "
                        f"start and reset are '!', '~' and 0x18), found {code!r}",
                    )
                )
            elif problem := realtime_code_problem(code):
                found.append((name, f"expected {problem}, found {code!r}"))
        if isinstance(self.machine, dict):
            # A key that is no identifier comes as "['key']": no dot before it (atheris).
            inline = [
                ("machine" + ("." if path[:1] not in ("", "[") else "") + path, message)
                for path, message in inline_machine_issues(self.machine)
            ]
            found += inline
        return found

    def check_files(self, base_dir: str | Path) -> list[tuple[str, str]]:
        """(field, message) for what only the files this setting names can tell: a machine
        file that cannot be read or has mistakes. `jha config check` calls it, so the mistake
        shows before any stream."""
        if not isinstance(self.machine, str):
            return []
        try:
            self.machine_settings(base_dir)
        except ConfigError as exc:
            listed = issues_of(exc)
            details = "; ".join(str(i) for i in listed[:5]) if listed else str(exc)
            more = f" (and {len(listed) - 5} more)" if len(listed) > 5 else ""
            return [("machine", f"expected a valid machine file, found: {details}{more}")]
        return []

    def machine_settings(self, base_dir: str | Path = ".") -> MachineSettings:
        """The machine description: its file (relative paths from `base_dir`, the directory
        of the config file) or the inline mapping. ConfigError names file, line and key."""
        if isinstance(self.machine, str):
            path = Path(self.machine)
            return load_machine(path if path.is_absolute() else Path(base_dir) / path)
        return _inline_machine(self.machine, "<inline machine>")


def realtime_code_problem(code: str) -> str | None:
    """What a DNC hold/resume code must be and `code` is not (None: it is fine). It is written
    into the byte stream at any moment, so it must be a few ASCII bytes that are neither a line
    end nor the flow-control bytes XON/XOFF."""
    if not code.isascii() or not 1 <= len(code) <= 8:
        return "1 to 8 ASCII characters"
    if any(c in code for c in "\r\n\x11\x13"):
        return "no line end (CR, LF) and no XON/XOFF (0x11, 0x13) byte"
    return None


def inline_machine_issues(machine: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted path inside the machine, message) for every mistake in an inline machine."""
    from agent.errors import ConfigError
    from agent.schema.yaml_lines import issues_of

    try:
        _inline_machine(machine, "<inline machine>")
    except ConfigError as exc:
        return [(i.path, i.message) for i in issues_of(exc)]
    return []


def _inline_machine(machine: dict[str, Any], source: str) -> MachineSettings:
    # The plain mapping lost its lines; re-reading it as YAML gives the schema a tree to walk.
    # Paths stay exact, and the config's own check maps them back to the config file's lines.
    from dataclasses import replace

    import yaml

    from agent.schema import validate as schema
    from agent.schema.yaml_lines import parse_yaml

    tree = parse_yaml(yaml.safe_dump(machine, sort_keys=False), source)
    return replace(schema.build(MachineSettings, tree, source), source=source)
