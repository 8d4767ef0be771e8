"""The two sides of a served component: a service that dispatches named control calls to
plain-Python code, and a proxy that makes the same calls from another process."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memtier.errors import InvalidArgumentError
from memtier.rpc.client import RpcClient

__all__ = ["Action", "ActionService", "Proxy", "no_result"]

#: One control call: the JSON request in, the JSON response out.
Action = Callable[[dict[str, Any]], dict[str, Any]]


def no_result(_: Any) -> dict[str, Any]:
    """The response of a call that returns nothing."""
    return {}


class ActionService:
    """Serves control calls from a table of actions; ``owner`` names the component in the
    error for an unknown call."""

    def __init__(self, owner: str, actions: Mapping[str, Action]) -> None:
        self._owner = owner
        self._actions = dict(actions)

    def handle_action(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        action = self._actions.get(name)
        if action is None:
            raise InvalidArgumentError(f"{self._owner} has no call {name!r}")
        return action(request)


class Proxy:
    """A component served at ``location``, called from this process; picklable (the copy
    shares the connections)."""

    def __init__(self, location: str, *, token: str | None = None, tls_ca: str | None = None,
                 timeout: float | None = 60.0) -> None:
        self.location = location
        self._rpc = RpcClient(location, token=token, tls_ca=tls_ca, timeout=timeout)

    def _call(self, action: str, /, **request: Any) -> dict[str, Any]:
        return self._rpc.call(action, request)

    def close(self) -> None:
        self._rpc.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.location,), {"_rpc": self._rpc})
