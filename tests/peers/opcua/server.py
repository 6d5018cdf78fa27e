"""The OPC UA side of the controller peer (tests/peers/opcua_controller.py): the asyncua server
with its security policies, certificates and users, the fake controller's variables, and the
two ways a value gets written (typed, and wrong-typed as a misbehaving program would).

What the controller does (state machine, methods, the cycle and its faults) stays in
opcua_controller.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from asyncua import Server, ua
from asyncua.crypto.permission_rules import User, UserRole

from agent.config.model import JointSettings

NAMESPACE = "urn:jha:test:robot"
APPLICATION_URI = "urn:jha:test:opcua-controller"


def nid(name: str) -> ua.NodeId:
    return ua.NodeId(name, 2)


class Users:
    """user:password pairs from the command line; anything else is refused."""

    def __init__(self, pairs: dict[str, str]) -> None:
        self.pairs = pairs

    def get_user(
        self,
        iserver: Any,
        username: str | None = None,
        password: str | None = None,
        certificate: Any = None,
    ) -> User | None:
        if username is not None and self.pairs.get(username) == password:
            return User(role=UserRole.User, name=username)
        return None


async def new_server(a: argparse.Namespace, server: Server) -> Server:
    """`server` (or, with --users, a new one that checks them) initialised with the endpoint,
    security policies, certificates and namespace of the command line; not started."""
    s = server
    if a.users:
        pairs = dict(u.split(":", 1) for u in a.users)
        s = Server(user_manager=Users(pairs))
    await s.init()
    s.set_server_name("jha test controller")
    await s.set_application_uri(APPLICATION_URI)
    s.set_endpoint(f"opc.tcp://{a.host}:{a.port}/jha/")
    if a.security == "none":
        s.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    else:
        await s.load_certificate(a.cert)
        await s.load_private_key(a.key)
        policies = {
            "sign": [ua.SecurityPolicyType.Basic256Sha256_Sign],
            "encrypt": [ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt],
            "both": [
                ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
                ua.SecurityPolicyType.Basic256Sha256_Sign,
            ],
        }
        s.set_security_policy(policies[a.security])
        if a.trust:
            trusted = {Path(p).read_bytes() for p in a.trust}

            async def validate(cert: Any, app: Any) -> None:
                from cryptography.hazmat.primitives.serialization import Encoding

                if cert.public_bytes(Encoding.DER) not in trusted:
                    raise ua.uaerrors.BadCertificateUntrusted()

            s.set_certificate_validator(validate)
    if a.users:
        s.set_identity_tokens([ua.UserNameIdentityToken])
    idx = await s.register_namespace(NAMESPACE)
    assert idx == 2, idx
    return s


def advertise(s: Server, a: argparse.Namespace) -> str:
    """The endpoint of the started server, advertised with the port the kernel chose when
    bound to port 0."""
    port = s.bserver.port if s.bserver is not None else a.port
    endpoint = f"opc.tcp://{a.host}:{port}/jha/"
    for edp in s.iserver.endpoints:
        edp.EndpointUrl = endpoint
        edp.Server.DiscoveryUrls = [endpoint]
    return endpoint


async def add_variables(
    s: Server, args: argparse.Namespace, joints: dict[int, JointSettings]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The controller's objects and variables: (variable nodes by dotted name, objects)."""
    objects = s.nodes.objects
    ctrl = await objects.add_object(nid("Controller"), "Controller")
    cyc = await objects.add_object(nid("Cycle"), "Cycle")
    buf = await objects.add_object(nid("Buffers"), "Buffers")
    plant = await objects.add_object(nid("Plant"), "Plant")
    vt = ua.VariantType
    positions = [0.0] * max(joints, default=1)
    for j in joints.values():
        positions[j.index - 1] = j.test_pose_rad
    specs: list[tuple[Any, str, Any, ua.VariantType, bool]] = [
        (ctrl, "Controller.State", args.mode, vt.String, False),
        (ctrl, "Controller.Permission", not args.no_permission, vt.Boolean, False),
        (ctrl, "Controller.JointPositions", positions, vt.Double, False),
        (ctrl, "Controller.Alarms", [], vt.String, False),
        (ctrl, "Controller.SpeedOverride", 100.0, vt.Double, False),
        (ctrl, "Controller.Watchdog", 0, vt.UInt32, True),
        (ctrl, "Controller.WatchdogTimeoutS", args.watchdog_s, vt.Double, True),
        (cyc, "Cycle.Status", "idle", vt.String, False),
        (cyc, "Cycle.JointIndex", 1, vt.UInt32, True),
        (cyc, "Cycle.MotorSpeed", 0.0, vt.Double, True),
        (cyc, "Cycle.SettleS", 0.0, vt.Double, True),
        (cyc, "Cycle.DurationS", 0.0, vt.Double, True),
        (cyc, "Cycle.SampleRateHz", 0.0, vt.Double, True),
        (cyc, "Cycle.Start", False, vt.Boolean, True),
        (cyc, "Cycle.Stop", False, vt.Boolean, True),
        (buf, "Buffers.Sequence", 0, vt.UInt32, False),
        (buf, "Buffers.TimeS", [0.0], vt.Double, False),
        (buf, "Buffers.MotorCounts", [0], vt.UInt32, False),
        (buf, "Buffers.LinkCounts", [0], vt.UInt32, False),
        (buf, "Buffers.CurrentA", [0.0], vt.Float, False),
        (plant, "Plant.StopRequests", 0, vt.UInt32, False),
        (plant, "Plant.CyclesStarted", 0, vt.UInt32, False),
        (plant, "Plant.PublishedSamples", 0, vt.UInt64, False),
        (plant, "Plant.PublishSeconds", 0.0, vt.Double, False),
        (plant, "Plant.FirstChunkUnixTime", 0.0, vt.Double, False),
        (plant, "Plant.WatchdogTrips", 0, vt.UInt32, False),
        (plant, "Plant.WatchdogTripUnixTime", 0.0, vt.Double, False),
        (plant, "Plant.WatchdogSilentS", 0.0, vt.Double, False),
    ]
    nodes: dict[str, Any] = {}
    for parent, name, value, vtype, writable in specs:
        node = await parent.add_variable(nid(name), name.split(".")[-1], ua.Variant(value, vtype))
        if writable:
            await node.set_writable()
        nodes[name] = node
    return nodes, {"Controller": ctrl, "Cycle": cyc, "Buffers": buf, "Plant": plant}


async def write_value(
    server: Server,
    name: str,
    value: Any,
    vtype: ua.VariantType | None = None,
    stamp: dt.datetime | None = None,
) -> None:
    now = stamp or dt.datetime.now(dt.UTC)
    variant = value if isinstance(value, ua.Variant) else ua.Variant(value, vtype)
    dv = ua.DataValue(variant, SourceTimestamp=now, ServerTimestamp=now)
    await server.write_attribute_value(nid(name), dv)


async def write_untyped(server: Server, name: str, variant: ua.Variant, now: dt.datetime) -> None:
    """Store a value of the wrong type, as a misbehaving controller program would.

    asyncua refuses such a write through its API, so this sets the stored value and runs
    the data-change callbacks itself (what write_attribute_value does after its checks).
    """
    dv = ua.DataValue(variant, SourceTimestamp=now, ServerTimestamp=now)
    node = server.iserver.aspace.get(nid(name))
    assert node is not None
    attval = node.attributes[ua.AttributeIds.Value]
    attval.value = dv
    for handle, callback in list(attval.datachange_callbacks.items()):
        await callback(handle, dv)
