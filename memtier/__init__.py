"""memtier: an in-memory, WAL-backed write tier over Apache Hudi tables."""

from memtier.errors import MemtierError

__all__ = ["MemtierError"]
__version__ = "0.1.0"
