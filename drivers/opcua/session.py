"""One OPC UA connection for the driver: security, identity, resolved nodes, typed requests.

Everything asyncua-specific the driver needs lives here. Every request runs under a timeout and
every failure becomes a DriverError naming what was asked; a failure that means the connection
is gone (timeout, closed socket, session or channel invalid) also sets `lost`, which the
driver's supervisor watches to reconnect with backoff. asyncua's own auto-reconnect is left
off: the driver owns the schedule, and a capture cut by a reconnect is aborted, never stitched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from asyncua import Client, ua
from asyncua.common.node import Node

from agent.errors import DriverError
from agent.opcua.trust import (
    TrustListError,
    certificate_facts,
    load_certificate_file,
    private_file_problem,
)
from drivers.base import within
from drivers.opcua.security import (
    RejectedError,
    describe_error,
    read_text,
    secure_channel,
)
from drivers.opcua.settings import CycleParameter, OpcUaAction, OpcUaSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

_INTEGER_TYPES = {
    ua.VariantType.SByte,
    ua.VariantType.Byte,
    ua.VariantType.Int16,
    ua.VariantType.UInt16,
    ua.VariantType.Int32,
    ua.VariantType.UInt32,
    ua.VariantType.Int64,
    ua.VariantType.UInt64,
}
_FLOAT_TYPES = {ua.VariantType.Float, ua.VariantType.Double}
# Status codes after which the session cannot be used again: reconnect.
_FATAL_STATUS = {
    ua.StatusCodes.BadConnectionClosed,
    ua.StatusCodes.BadSessionClosed,
    ua.StatusCodes.BadSessionIdInvalid,
    ua.StatusCodes.BadSecureChannelClosed,
    ua.StatusCodes.BadSecureChannelIdInvalid,
    ua.StatusCodes.BadServerNotConnected,
    ua.StatusCodes.BadShutdown,
    ua.StatusCodes.BadTimeout,
    ua.StatusCodes.BadNotConnected,
}


# The server refused who we are: retrying the same credentials will not help.
_REJECTED_STATUS = {
    ua.StatusCodes.BadUserAccessDenied,
    ua.StatusCodes.BadIdentityTokenInvalid,
    ua.StatusCodes.BadIdentityTokenRejected,
    ua.StatusCodes.BadCertificateInvalid,
    ua.StatusCodes.BadCertificateUntrusted,
    ua.StatusCodes.BadCertificateUriInvalid,
    ua.StatusCodes.BadCertificateTimeInvalid,
    ua.StatusCodes.BadCertificateRevoked,
    ua.StatusCodes.BadCertificateUseNotAllowed,
    ua.StatusCodes.BadSecurityChecksFailed,
    ua.StatusCodes.BadSecurityPolicyRejected,
    ua.StatusCodes.BadSecurityModeRejected,
}


def resolve_text(text: str, namespaces: list[str]) -> ua.NodeId:
    """Node id text -> NodeId; `nsu=<uri>;...` is looked up in the server's namespace array."""
    if text.startswith("nsu="):
        uri, _, rest = text[4:].partition(";")
        if uri not in namespaces:
            raise RejectedError(f"node {text}: the server has no namespace {uri!r}")
        text = f"ns={namespaces.index(uri)};{rest}"
    try:
        return ua.NodeId.from_string(text)
    except Exception as exc:  # asyncua raises several types for malformed ids
        raise RejectedError(f"node id {text!r} cannot be parsed: {exc}") from None


def convert(value: Any, vtype: ua.VariantType, what: str) -> ua.Variant:
    """A Python value as a Variant of exactly the type the server declared."""
    if vtype is ua.VariantType.Boolean:
        if not isinstance(value, bool):
            raise DriverError(f"{what} is a Boolean on the server; cannot send {value!r}")
    elif vtype in _INTEGER_TYPES:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise DriverError(f"{what} is an {vtype.name} on the server; cannot send {value!r}")
        value = int(value)
    elif vtype in _FLOAT_TYPES:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DriverError(f"{what} is a {vtype.name} on the server; cannot send {value!r}")
        value = float(value)
    elif vtype is ua.VariantType.String:
        value = str(value)
    else:
        raise DriverError(f"{what} has data type {vtype.name}, which the driver cannot send")
    return ua.Variant(value, vtype)


def _variant_type(datatype: ua.NodeId, what: str) -> ua.VariantType:
    if datatype.NamespaceIndex == 0 and isinstance(datatype.Identifier, int):
        try:
            return ua.VariantType(datatype.Identifier)
        except ValueError:
            pass
    raise RejectedError(f"{what} has data type {datatype.to_string()}, not a built-in type")


@dataclass(frozen=True)
class ResolvedAction:
    """An OpcUaAction with nodes resolved and the server's declared types attached."""

    method: Node | None
    object: Node | None
    argument_types: tuple[ua.VariantType, ...]
    arguments: tuple[CycleParameter, ...]
    variable: Node | None
    variable_type: ua.VariantType | None
    value: Any
    parameters: tuple[tuple[CycleParameter, Node, ua.VariantType], ...]


def password(settings: OpcUaSettings) -> str | None:
    user = settings.user
    if user is None:
        return None
    if user.password_file is not None:
        problem = private_file_problem(user.password_file)
        if problem is not None:
            raise RejectedError(f"user.password_file {problem}")
        return read_text(user.password_file, "password")
    if user.password_env is None:  # the settings check requires exactly one
        raise RejectedError("user: expected password_file or password_env")
    value = os.environ.get(user.password_env)
    if value is None:
        raise RejectedError(f"environment variable {user.password_env} (the password) is not set")
    return value


class OpcUaSession:
    """A connected asyncua Client plus what the driver resolved on it."""

    def __init__(self, client: Client, settings: OpcUaSettings, namespaces: list[str]) -> None:
        self.client = client
        self.settings = settings
        self.namespaces = namespaces
        self.lost = asyncio.Event()
        self.lost_reason = ""

    @classmethod
    async def open(cls, settings: OpcUaSettings) -> OpcUaSession:
        """Connect, authenticate, and check that every configured node can be used."""
        s = settings
        client = Client(
            s.endpoint,
            timeout=s.request_timeout_s,
            watchdog_intervall=max(s.request_timeout_s, 0.5),
        )
        client.application_uri = s.security.application_uri
        client.session_timeout = 600_000  # ms: a dead agent's session is dropped in 10 min
        client.name = client.description = "joint-health-agent"
        try:
            if s.security.policy == "Basic256Sha256":
                await secure_channel(client, s)
            else:
                # Allowed by the config (allow_none_security), but never quietly.
                log.warning(
                    "event=opcua_insecure_channel endpoint=%s policy=None "
                    "why=allow_none_security_in_config",
                    s.endpoint,
                )
            if s.user is not None:
                client.set_user(s.user.username)
                pw = password(s)
                if pw is not None:
                    client.set_password(pw)
            await within(client.connect(), s.request_timeout_s * 2)
        except DriverError:
            raise
        except BaseException as exc:
            await _disconnect_quietly(client)
            if not isinstance(exc, Exception):  # cancellation, interrupt: not a failed connect
                raise
            if s.security.policy == "Basic256Sha256" and _failed_opening_the_channel(exc):
                raise RejectedError(
                    f"cannot connect to {s.endpoint}: the server refused the secure channel "
                    f"(its answer to OpenSecureChannel was not a response: "
                    f"{describe_error(exc) or type(exc).__name__}). Most often it does not trust "
                    f"this agent's certificate ({_own_certificate(s)}) or the application URI in "
                    "it: add the certificate to the server's trusted list"
                ) from None
            kind = RejectedError if _is_rejection(exc) else DriverError
            raise kind(f"cannot connect to {s.endpoint}: {describe_error(exc)}") from None
        session = cls(client, s, [])
        # asyncua >= 2 reports a dropped transport here as soon as it sees it.
        client.connection_lost_callback = session._on_connection_lost
        try:
            session.namespaces = await session.request(
                client.get_namespace_array(), "read the namespace array"
            )
        except BaseException:
            await session.close()
            raise
        return session

    async def _on_connection_lost(self, exc: Exception) -> None:
        self.mark_lost(f"connection lost: {describe_error(exc)}")

    def mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            log.warning(
                "event=opcua_connection_lost endpoint=%s reason=%r", self.settings.endpoint, reason
            )
            self.lost_reason = reason
            self.lost.set()

    def node(self, text: str) -> Node:
        return self.client.get_node(resolve_text(text, self.namespaces))

    async def request(
        self, awaitable: Awaitable[T], what: str, *, timeout: float | None = None
    ) -> T:
        """Await one request under the timeout; failures become DriverError (and may mark lost)."""
        if self.lost.is_set():
            close = getattr(awaitable, "close", None)
            if callable(close):
                close()  # never awaited: do not leave a "coroutine was never awaited" warning
            raise DriverError(f"cannot {what}: {self.lost_reason}")
        limit = timeout if timeout is not None else self.settings.request_timeout_s
        try:
            return await within(awaitable, limit)
        except TimeoutError:
            self.mark_lost(f"no answer within {limit:g} s")
            raise DriverError(f"cannot {what}: no answer within {limit:g} s") from None
        except ua.UaStatusCodeError as exc:
            if exc.code in _FATAL_STATUS:
                self.mark_lost(describe_error(exc))
            raise DriverError(f"cannot {what}: {describe_error(exc)}") from None
        except (ConnectionError, OSError, ua.UaError) as exc:
            self.mark_lost(describe_error(exc))
            raise DriverError(f"cannot {what}: {describe_error(exc)}") from None

    async def read(self, nodes: list[Node], what: str) -> list[ua.DataValue]:
        return await self.request(self.client.read_attributes(nodes), what)

    async def resolve_action(self, action: OpcUaAction, what: str) -> ResolvedAction:
        """Nodes of a trigger or stop, with the types the server declares for what it takes."""
        if action.method is not None:
            if action.object is None:  # the settings check requires it
                raise RejectedError(f"{what} method {action.method}: no object node given")
            method, obj = self.node(action.method), self.node(action.object)
            types = await self._method_argument_types(method, action, what)
            return ResolvedAction(method, obj, types, action.arguments, None, None, None, ())
        if action.variable is None:  # the settings check requires method or variable
            raise RejectedError(f"{what}: neither a method nor a variable given")
        variable = self.node(action.variable)
        vtype = await self._variable_type(variable, f"{what} variable {action.variable}")
        params = []
        for name, text in action.parameters.items():
            node = self.node(text)
            params.append((name, node, await self._variable_type(node, f"{what} {name} {text}")))
        try:
            convert(action.value, vtype, f"{what} variable {action.variable}")
        except DriverError as exc:
            raise RejectedError(str(exc)) from None
        return ResolvedAction(None, None, (), (), variable, vtype, action.value, tuple(params))

    async def variable_type(self, node: Node, what: str) -> ua.VariantType:
        """The variant type the server declares for a variable (RejectedError if unusable)."""
        return await self._variable_type(node, what)

    async def write_value(self, node: Node, value: Any, vtype: ua.VariantType, what: str) -> None:
        """Write one value, converted to the variable's type; DriverError names the node."""
        dv = ua.DataValue(convert(value, vtype, what))
        await self._write([node], [dv], what)

    async def _variable_type(self, node: Node, what: str) -> ua.VariantType:
        datatype = await self.request(node.read_data_type(), f"read the data type of {what}")
        return _variant_type(datatype, what)

    async def _method_argument_types(
        self, method: Node, action: OpcUaAction, what: str
    ) -> tuple[ua.VariantType, ...]:
        prop: Node | None
        try:
            prop = await self.request(
                method.get_child("0:InputArguments"),
                f"find the arguments of {what} method {action.method}",
            )
        except DriverError:
            if self.lost.is_set():
                raise
            prop = None  # BadNoMatch: the method declares no arguments
        if prop is None:
            if action.arguments:
                raise RejectedError(
                    f"{what} method {action.method} does not declare InputArguments, so the "
                    "driver cannot type the configured arguments"
                )
            return ()
        args = await self.request(prop.read_value(), f"read the arguments of {what} method")
        if len(args) != len(action.arguments):
            names = ", ".join(a.Name for a in args) or "none"
            raise RejectedError(
                f"{what} method {action.method} takes {len(args)} argument(s) ({names}); the "
                f"config gives {len(action.arguments)} ({', '.join(action.arguments) or 'none'})"
            )
        return tuple(_variant_type(a.DataType, f"{what} method argument {a.Name}") for a in args)

    async def perform(
        self, action: ResolvedAction, values: Mapping[CycleParameter, Any], what: str
    ) -> Any:
        """Call the method or write the parameters then the trigger variable."""
        if action.method is not None:
            if action.object is None:  # resolve_action sets both
                raise DriverError(f"cannot call {what}: its method has no object node")
            variants = [
                convert(values[name], vtype, f"{what} argument {name}")
                for name, vtype in zip(action.arguments, action.argument_types, strict=True)
            ]
            return await self.request(
                action.object.call_method(action.method.nodeid, *variants), f"call {what}"
            )
        if action.variable is None or action.variable_type is None:  # resolve_action sets both
            raise DriverError(f"cannot write {what}: no resolved trigger variable")
        if action.parameters:
            nodes = [node for _, node, _ in action.parameters]
            dvs = [
                ua.DataValue(convert(values[name], vtype, f"{what} parameter {name}"))
                for name, _, vtype in action.parameters
            ]
            await self._write(nodes, dvs, f"write the {what} parameters")
        dv = ua.DataValue(convert(action.value, action.variable_type, f"{what} variable"))
        await self._write([action.variable], [dv], f"write the {what} variable")
        return None

    async def _write(self, nodes: list[Node], dvs: list[ua.DataValue], what: str) -> None:
        results = await self.request(
            self.client.uaclient.write_attributes(
                [n.nodeid for n in nodes], dvs, ua.AttributeIds.Value
            ),
            what,
        )
        bad = [(n, r) for n, r in zip(nodes, results, strict=True) if not r.is_good()]
        if bad:
            node, code = bad[0]
            raise DriverError(f"cannot {what}: node {node.nodeid.to_string()} answered {code.name}")

    async def close(self) -> None:
        self.lost.set()
        self.lost_reason = self.lost_reason or "connection closed by the agent"
        await _disconnect_quietly(self.client)


async def _disconnect_quietly(client: Client) -> None:
    try:
        await within(client.disconnect(), 2.0)
    except BaseException as exc:  # a dead peer cannot be told goodbye; the socket is closed
        if not isinstance(exc, Exception):
            raise
        log.debug("event=opcua_disconnect_failed error=%r", exc)
        with contextlib.suppress(Exception):
            client.disconnect_socket()


def _failed_opening_the_channel(exc: BaseException) -> bool:
    """Whether the connect failed while opening the secure channel without a status code.

    node-opcua answers a client certificate it does not trust with a fault asyncua cannot read
    (it raises AssertionError there, measured with asyncua 2.1 against node-opcua 2.182); the
    server refused, so retrying cannot help until a person changes a trust list.
    """
    if isinstance(exc, ua.UaStatusCodeError):
        return False
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "open_secure_channel":
            return True
        tb = tb.tb_next
    return False


def _own_certificate(s: OpcUaSettings) -> str:
    try:
        return certificate_facts(load_certificate_file(s.security.certificate or "")).describe()
    except TrustListError as exc:  # the config check reads it first; named here anyway
        return str(exc)


def _is_rejection(exc: BaseException) -> bool:
    if isinstance(exc, ua.UaStatusCodeError):
        return exc.code in _REJECTED_STATUS
    # asyncua says so when the server offers no endpoint with our policy, mode or token type.
    return isinstance(exc, ua.UaError) and "No matching endpoints" in str(exc)
