"""The opt-in OPC UA server that shows joint health where plant systems already look.

It runs in a thread of its own with its own event loop: asyncua builds its standard address
space in a burst of CPU at start, and serves clients, none of which may delay the daemon's loop
(watchdog pings, captures). The daemon's side only hands reports over.

Security: the Basic256Sha256 SignAndEncrypt endpoint is the only one unless the config sets
`allow_none_security`. A client certificate is checked at CreateSession against the trust list
(and for time, application URI and key usages), and again at ActivateSession, where the session
must also sit on a secure channel: asyncua opens unsecured channels to anyone (for discovery),
and a client that skips the endpoint check could otherwise activate a session on one. A refusal
is logged with the certificate's subject and thumbprint. With a users file, clients must also
log in with a name and password (anonymous is refused); passwords are never logged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from asyncua import Server, ua
from asyncua import __version__ as asyncua_version
from asyncua.common.utils import ServiceError
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions
from asyncua.server.user_managers import UserManager
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from agent.config.opcua_server import OpcUaServerSettings
from agent.errors import AgentError, ConfigError
from agent.opcua.trust import (
    TrustList,
    TrustListError,
    certificate_facts,
    first_certificate_der,
    load_certificate_file,
)
from agent.publish.base import HealthPublisher
from agent.publish.opcua_server.identification import IdentificationAddressSpace
from agent.publish.opcua_server.refusals import quiet_refusals
from agent.publish.opcua_server.users import UserEntry, check_private, load_users
from agent.report.model import Report

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # a first start builds the address space: slow on small CPUs
PUBLISH_TIMEOUT_S = 10.0
_DER = Encoding.DER


class ClientGuard:
    """Decides whether a client certificate is trusted (at CreateSession and ActivateSession);
    re-reads the trust list directory when it changes, so that a client can be admitted
    without a restart."""

    def __init__(self, trusted: str, revocation_lists: str | None) -> None:
        self.trusted = trusted
        self.revocation_lists = revocation_lists
        self._stamp: tuple[float, ...] = ()
        self._list = self._load()

    def _mtimes(self) -> tuple[float, ...]:
        dirs = [self.trusted, *([self.revocation_lists] if self.revocation_lists else [])]
        stamps: list[float] = []
        for d in dirs:
            with contextlib.suppress(OSError):
                stamps += [Path(d).stat().st_mtime]
                stamps += sorted(p.stat().st_mtime for p in Path(d).iterdir())
        return tuple(stamps)

    def _load(self) -> TrustList:
        self._stamp = self._mtimes()
        try:
            return TrustList.from_directories(self.trusted, self.revocation_lists)
        except TrustListError as exc:
            raise ConfigError(f"publish.opcua_server.trusted_clients: {exc}") from None

    def problem(self, cert: x509.Certificate) -> str | None:
        if self._mtimes() != self._stamp:
            try:
                self._list = self._load()
            except ConfigError as exc:  # keep the last good list; a half-copied file passes
                log.warning("event=opcua_server_trust_list_unreadable error=%r", str(exc))
        return self._list.problem(cert)

    def check_der(self, der: bytes | None) -> None:
        """Raise ServiceError(BadCertificateUntrusted/Invalid) unless the certificate is trusted."""
        if not der:
            log.warning("event=opcua_client_refused reason=%r", "no client certificate")
            raise ServiceError(ua.StatusCodes.BadCertificateInvalid)
        try:
            cert = x509.load_der_x509_certificate(first_certificate_der(der))
        except ValueError:
            log.warning("event=opcua_client_refused reason=%r", "unparsable client certificate")
            raise ServiceError(ua.StatusCodes.BadCertificateInvalid) from None
        problem = self.problem(cert)
        if problem is not None:
            facts = certificate_facts(cert)
            log.warning(
                "event=opcua_client_refused subject=%r thumbprint=%s reason=%r",
                facts.subject,
                facts.thumbprint_sha1,
                problem,
            )
            raise ServiceError(ua.StatusCodes.BadCertificateUntrusted)


class _Gate(UserManager):
    """Admits a session at activation. asyncua lets any client open an unsecured channel (for
    discovery) and create and activate a session on it, whatever endpoints are offered; so
    unless None security is allowed, a session must sit on a secure channel whose certificate
    passed the guard. With users, the name and password must match too."""

    def __init__(
        self, users: dict[str, UserEntry] | None, guard: ClientGuard | None, secure_only: bool
    ) -> None:
        self.users = users
        self.guard = guard
        self.secure_only = secure_only

    def get_user(
        self,
        iserver: Any,
        username: str | None = None,
        password: str | None = None,
        certificate: Any = None,
    ) -> User | None:
        if certificate is None and self.secure_only:
            log.warning(
                "event=opcua_client_refused reason=%r", "session on a channel without security"
            )
            return None
        if certificate is not None and self.guard is not None:
            der = certificate if isinstance(certificate, bytes) else certificate.public_bytes(_DER)
            try:
                self.guard.check_der(der)
            except ServiceError:
                return None
        if self.users is None:
            return User(role=UserRole.User)
        entry = self.users.get(username or "")
        if entry is None or password is None or not entry.matches(password):
            log.warning("event=opcua_login_refused user=%r", username)
            return None
        return User(role=UserRole.User, name=username)


class OpcUaHealthServer(HealthPublisher):
    name = "opcua_server"

    def __init__(self, settings: OpcUaServerSettings, state_dir: Path) -> None:
        self.settings = settings
        self.state_dir = Path(state_dir)
        self.endpoint = settings.endpoint  # with the real port once started (port 0 in tests)
        self.published = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._space: IdentificationAddressSpace | None = None
        self._lock: asyncio.Lock | None = None

    # -- the daemon's side ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._thread is not None:
            return
        prepared = self._prepare()  # file checks here: a config mistake fails start() at once
        ready: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(prepared, ready), name="jha-opcua-server", daemon=True
        )
        self._thread.start()
        try:
            self.endpoint = await asyncio.wait_for(asyncio.wrap_future(ready), START_TIMEOUT_S)
        except BaseException:
            await self.close()
            raise
        s = self.settings
        log.info(
            "event=opcua_server_started endpoint=%s security=%s users=%s namespace=%s",
            self.endpoint,
            "+".join(
                ["Basic256Sha256/SignAndEncrypt"] * s.secure + ["None"] * s.allow_none_security
            ),
            "file" if s.users_file else "anonymous",
            s.namespace_uri,
        )

    async def publish(self, report: Report) -> None:
        loop, space = self._loop, self._space
        if loop is None or space is None or not loop.is_running():
            log.warning("event=opcua_server_publish_skipped reason=not_running")
            return
        future = asyncio.run_coroutine_threadsafe(self._apply(report), loop)
        try:
            joints = await asyncio.wait_for(asyncio.wrap_future(future), PUBLISH_TIMEOUT_S)
        except Exception as exc:  # the server's trouble, never the daemon's
            log.error("event=opcua_server_publish_failed error=%r", exc)
            return
        self.published += 1
        log.debug("event=opcua_server_published joints=%d", joints)

    async def close(self) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and loop.is_running():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(thread.join, 10.0)
        if thread.is_alive():
            log.error("event=opcua_server_stop_timeout")
        else:
            log.info("event=opcua_server_stopped endpoint=%s", self.endpoint)
        self._thread, self._loop, self._space = None, None, None

    # -- checks before the thread starts -------------------------------------------------------

    def _prepare(self) -> dict[str, Any]:
        s = self.settings
        out: dict[str, Any] = {"guard": None, "users": None, "key_password": None}
        if s.certificate is not None and s.private_key is not None:  # settings.secure
            try:
                load_certificate_file(s.certificate)
            except TrustListError as exc:
                raise ConfigError(f"publish.opcua_server.certificate: {exc}") from None
            check_private(Path(s.private_key), "publish.opcua_server.private_key")
            if s.private_key_password_file:
                path = Path(s.private_key_password_file)
                check_private(path, "publish.opcua_server.private_key_password_file")
                out["key_password"] = path.read_text(encoding="utf-8").strip()
            if s.trusted_clients is None:
                raise ConfigError(
                    "publish.opcua_server.trusted_clients: required with a certificate"
                )
            out["guard"] = ClientGuard(s.trusted_clients, s.revocation_lists)
        elif not s.allow_none_security:
            raise ConfigError(
                "publish.opcua_server: a certificate and private_key are required "
                "unless allow_none_security is true"
            )
        if s.users_file:
            if not s.secure:
                raise ConfigError(
                    "publish.opcua_server.users_file: needs the secure endpoint "
                    "(certificate, private_key): passwords are never sent in clear"
                )
            out["users"] = load_users(s.users_file)
        if s.allow_none_security:
            log.warning(
                "event=opcua_server_insecure_endpoint endpoint=%s why=allow_none_security note=%r",
                s.endpoint,
                "any client on the network can read joint health without a certificate",
            )
        return out

    # -- the server's thread -------------------------------------------------------------------

    def _run(self, prepared: dict[str, Any], ready: concurrent.futures.Future[str]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(prepared, ready))
        except BaseException as exc:  # reported to start(), or logged
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.error("event=opcua_server_crashed error=%r", exc)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, prepared: dict[str, Any], ready: concurrent.futures.Future[str]) -> None:
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        server = await self._make_server(prepared)
        try:
            await server.start()
        except OSError as exc:
            raise AgentError(
                f"publish.opcua_server: cannot listen on {self.settings.endpoint}: "
                f"{exc.strerror or exc}"
            ) from None
        try:
            ready.set_result(self._bound_endpoint(server))
            await self._stop.wait()
        finally:
            await server.stop()

    async def _init_server(self, gate: _Gate) -> Server:
        """asyncua's standard address space, from a shelf in the state directory when there is
        one: building it costs seconds of CPU and tens of MB, loading it lazily almost nothing.
        The shelf is built in a directory of its own and renamed into place, so a crash while
        building leaves no half shelf; one that does not load is rebuilt."""
        base = self.state_dir / "opcua_server"
        final = base / f"aspace-asyncua-{asyncua_version}"
        server = Server(user_manager=gate)
        if (final / "done").is_file():
            try:
                await server.init(final / "nodes")
                return server
            except Exception as exc:
                log.warning("event=opcua_server_shelf_unusable path=%s error=%r", final, exc)
                await asyncio.to_thread(shutil.rmtree, final, True)
                server = Server(user_manager=gate)
        try:
            base.mkdir(parents=True, exist_ok=True)
            building = Path(tempfile.mkdtemp(prefix="aspace-building-", dir=base))
        except OSError as exc:  # a read-only state directory: serve without a shelf
            log.warning("event=opcua_server_shelf_skipped error=%r", str(exc))
            await server.init()
            return server
        await server.init(building / "nodes")
        nodes = building / "nodes"
        if not nodes.exists() and not nodes.with_suffix(".db").exists():
            # dbm.dumb (Pythons built without gdbm) writes nodes.dat/.dir, which asyncua does not
            # look for: an empty `nodes` makes it load the shelf (dbm.whichdb finds the rest).
            nodes.touch()
        (building / "done").write_text("1\n")
        try:
            building.rename(final)
        except OSError:  # another process put one there first
            await asyncio.to_thread(shutil.rmtree, building, True)
        return server

    async def _make_server(self, prepared: dict[str, Any]) -> Server:
        s = self.settings
        users = prepared["users"]
        gate = _Gate(users, prepared["guard"], secure_only=not s.allow_none_security)
        server = await self._init_server(gate)
        server.allow_remote_admin(False)
        # asyncua's own caps (2.1): connections beyond max_connections are closed at accept,
        # and one that has not activated a session in time is closed by its watchdog.
        server.iserver.max_connections = s.max_connections
        server.iserver.max_pending_activation_seconds = s.activation_timeout_s
        quiet_refusals()
        server.set_endpoint(s.endpoint)
        server.set_server_name(s.server_name)
        await server.set_application_uri(s.application_uri)
        policies: list[ua.SecurityPolicyType] = []
        if s.secure:
            await server.load_certificate(str(s.certificate))
            await server.load_private_key(str(s.private_key), prepared["key_password"])
            policies.append(ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt)
            validator = CertificateValidator(
                CertificateValidatorOptions.EXT_VALIDATION | CertificateValidatorOptions.PEER_CLIENT
            )
            guard: ClientGuard = prepared["guard"]

            async def validate(cert: x509.Certificate, app: ua.ApplicationDescription) -> None:
                guard.check_der(cert.public_bytes(_DER))
                try:
                    await validator.validate(cert, app)
                except ServiceError as exc:
                    facts = certificate_facts(cert)
                    log.warning(
                        "event=opcua_client_refused subject=%r thumbprint=%s reason=%r",
                        facts.subject,
                        facts.thumbprint_sha1,
                        ua.StatusCode(ua.UInt32(exc.code)).name,
                    )
                    raise

            server.set_certificate_validator(validate)
        if s.allow_none_security:
            policies.append(ua.SecurityPolicyType.NoSecurity)
        server.set_security_policy(policies)
        server.set_identity_tokens(
            [ua.UserNameIdentityToken] if users else [ua.AnonymousIdentityToken]
        )
        namespace = await server.register_namespace(s.namespace_uri)
        self._space = IdentificationAddressSpace(server, namespace)
        await self._space.build()
        return server

    def _bound_endpoint(self, server: Server) -> str:
        port = server.bserver.port if server.bserver is not None else None
        url = server.endpoint
        if port is None or url.port == port:
            return url.geturl()
        host = url.hostname or "127.0.0.1"
        return url._replace(netloc=f"{host}:{port}").geturl()

    async def _apply(self, report: Report) -> int:
        if self._space is None or self._lock is None:
            raise AgentError("the OPC UA health server is not serving")
        async with self._lock:  # one report at a time: node creation must not interleave
            return await self._space.apply(report)
