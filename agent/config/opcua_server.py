"""Settings of the opt-in OPC UA server that exposes joint health (`publish.opcua_server:`).

Secure by default: only Basic256Sha256 SignAndEncrypt endpoints, the server's own certificate
and key from files, and a trust list directory of the client certificates (or their CAs) that
may connect. An endpoint without security takes `allow_none_security: true`, logged loudly at
every start. Optional users come from a file readable only by the service user.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HEALTH_NAMESPACE_URI = "urn:jha:health"


@dataclass(frozen=True)
class OpcUaServerSettings:
    endpoint: str = field(
        default="opc.tcp://127.0.0.1:4841/jha/", metadata={"doc": "where the server listens"}
    )
    certificate: str | None = field(
        default=None, metadata={"doc": "the server's application instance certificate, DER/PEM"}
    )
    private_key: str | None = field(default=None, metadata={"doc": "its private key, PEM/DER"})
    private_key_password_file: str | None = None
    trusted_clients: str | None = field(
        default=None,
        metadata={"doc": "directory of trusted client certificates and CA certificates"},
    )
    revocation_lists: str | None = field(
        default=None, metadata={"doc": "directory of CRLs of the CAs in trusted_clients"}
    )
    users_file: str | None = field(
        default=None,
        metadata={"doc": "name:pbkdf2 hash per line (python -m agent.publish.opcua_server.users)"},
    )
    allow_none_security: bool = field(
        default=False, metadata={"doc": "also offer an endpoint without signature or encryption"}
    )
    # Must match the URI in the server certificate's subjectAltName; clients check it.
    application_uri: str = field(default="urn:jha:health:server", metadata={"min_len": 1})
    namespace_uri: str = field(default=HEALTH_NAMESPACE_URI, metadata={"min_len": 1})
    server_name: str = field(default="joint-health-agent", metadata={"min_len": 1})
    # An HMI or SCADA client needs one or two connections; the cap keeps a flood of idle ones
    # from taking the descriptors a stop needs (agent.service.preflight's margin is 32).
    max_connections: int = field(
        default=16, metadata={"ge": 1, "le": 1024, "doc": "served at once; more are closed"}
    )
    activation_timeout_s: float = field(
        default=10.0,
        metadata={
            "gt": 0.0,
            "le": 300.0,
            "doc": "a connection without an activated session is closed after this",
        },
    )

    @property
    def secure(self) -> bool:
        """Whether the Basic256Sha256 endpoint is offered (certificate and key configured)."""
        return self.certificate is not None and self.private_key is not None

    def check(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not self.endpoint.startswith("opc.tcp://") or len(self.endpoint) <= len("opc.tcp://"):
            found = f"found {self.endpoint!r}"
            out.append(("endpoint", f"expected opc.tcp://host:port[/path], {found}"))
        if (self.certificate is None) != (self.private_key is None):
            missing = "private_key" if self.private_key is None else "certificate"
            out.append((missing, "expected both certificate and private_key, or neither"))
        if not self.secure and not self.allow_none_security:
            out.append(
                (
                    "certificate",
                    "required: the server offers only Basic256Sha256 SignAndEncrypt endpoints, "
                    "which need its certificate and private_key (or set allow_none_security: "
                    "true to serve joint health without security)",
                )
            )
        if self.secure and self.trusted_clients is None:
            out.append(
                (
                    "trusted_clients",
                    "required with a certificate: the directory of client certificates allowed in",
                )
            )
        if self.users_file is not None and not self.secure:
            out.append(
                (
                    "users_file",
                    "needs the secure endpoint (certificate, private_key): passwords are never "
                    "sent in clear",
                )
            )
        if self.revocation_lists is not None and self.trusted_clients is None:
            out.append(("revocation_lists", "only used with trusted_clients"))
        return out
