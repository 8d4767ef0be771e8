"""The master: catalog, table-server registry, bucket placement, transactions, and
ownership of every table's Hudi timeline. Plain Python; :mod:`memtier.cluster` makes it
an actor, :mod:`memtier.master.service` serves it over RPC."""

from memtier.exchange import AUTOCOMMIT, TxnSnapshot
from memtier.master.master import Master, validate_table_name
from memtier.master.state import MasterState

__all__ = ["AUTOCOMMIT", "Master", "MasterState", "TxnSnapshot", "validate_table_name"]
