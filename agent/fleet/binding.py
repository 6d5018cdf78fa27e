"""Which agent speaks for which machine (`sources[].agents`), checked on every message after it
has parsed. The broker's ACL binds each agent's credential to its own topics
(config/mosquitto/jha.acl.example); the fleet holds the same binding itself, so a broker set up
too loosely, or two agents that both call their controller "robot-1", cannot overwrite each
other's machines unseen. A message that disagrees is refused and counted ("agent binding").

What it cannot catch: an agent whose credential is stolen still speaks for its own machines,
and on a broker without the ACL a client may claim another agent's client id in its payload
(the fleet never sees an MQTT publisher's identity; only the broker does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.fleet.messages import Message, StatusMessage
from agent.fleet.settings import SourceSettings


@dataclass(frozen=True)
class Bindings:
    owners: Mapping[str, Mapping[str, str]]  # topic prefix -> machine -> agent's client id
    agents: Mapping[str, frozenset[str]]  # topic prefix -> its bound agents' client ids

    @classmethod
    def of(cls, sources: Iterable[SourceSettings]) -> Bindings:
        owners: dict[str, dict[str, str]] = {}
        agents: dict[str, frozenset[str]] = {}
        for s in sources:
            if not s.agents:
                continue  # unbound: any agent may speak for any machine under this prefix
            owners[s.topic_prefix] = {m: a.client_id for a in s.agents for m in a.machines}
            agents[s.topic_prefix] = frozenset(a.client_id for a in s.agents)
        return cls(owners, agents)

    def problem(self, m: Message) -> str | None:
        """Why `m` is refused by its source's binding, else None."""
        bound = self.agents.get(m.prefix)
        if bound is None:
            return None
        if isinstance(m, StatusMessage):
            if m.client_id in bound:
                return None
            return f"agent binding: a status of {m.client_id!r}, an agent not bound to {m.prefix}"
        owner = self.owners[m.prefix].get(m.machine)
        if owner is None:
            return f"agent binding: machine {m.machine!r} is bound to no agent of {m.prefix}"
        if m.client_id != owner:
            said = repr(m.client_id) if m.client_id else "no agent_client_id"
            return f"agent binding: machine {m.machine!r} is bound to agent {owner!r}, found {said}"
        return None
