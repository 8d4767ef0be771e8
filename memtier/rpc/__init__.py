"""memtier's RPC layer over Arrow Flight: control calls, puts and gets of Arrow data.

* :mod:`~memtier.rpc.server` - :class:`RpcServer` serves a plain-Python :class:`Service`;
* :mod:`~memtier.rpc.client` - :class:`RpcClient`, thread-safe and picklable;
* :mod:`~memtier.rpc.codec` - the JSON wire format of requests, responses and errors.
"""

from memtier.rpc.client import RpcClient
from memtier.rpc.server import RpcServer, Service

__all__ = ["RpcClient", "RpcServer", "Service"]
