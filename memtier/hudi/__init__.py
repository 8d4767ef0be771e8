"""The Apache Hudi on-disk format: properties, timeline, files, file-system view, merge.

memtier writes table version 6 (timeline layout 1) and reads versions 6 and 8.
:class:`HudiTable` is the entry point; the modules below it are the format's parts.
"""

from memtier.hudi.table import HudiTable

__all__ = ["HudiTable"]
