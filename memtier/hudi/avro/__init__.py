"""Arrow <-> Avro binary datums, vectorized, the way Spark + Hudi write them.

* :mod:`~memtier.hudi.avro.schemas` - Arrow <-> Avro schemas (and how the codec works);
* :mod:`~memtier.hudi.avro.plans` - how each field of a record schema is laid out;
* :mod:`~memtier.hudi.avro.varints` - zigzag varints, vectorized;
* :mod:`~memtier.hudi.avro.encoders` - columns into byte pieces per row, one encoder per field;
* :mod:`~memtier.hudi.avro.encoding` - pieces into one contiguous buffer of datums;
* :mod:`~memtier.hudi.avro.source` - the bytes being decoded, as 64-bit words;
* :mod:`~memtier.hudi.avro.decoding` - datums into Arrow columns;
* :mod:`~memtier.hudi.avro.frames` - length-prefixed records found without a sequential walk.
"""

from memtier.hudi.avro.decoding import decode_framed, decode_records
from memtier.hudi.avro.encoders import avro_long
from memtier.hudi.avro.encoding import encode_framed, encode_records
from memtier.hudi.avro.schemas import (
    META_FIELDS,
    arrow_to_avro_schema,
    avro_to_arrow_schema,
    decimal_size,
    with_meta_fields,
)

__all__ = [
    "META_FIELDS",
    "arrow_to_avro_schema",
    "avro_long",
    "avro_to_arrow_schema",
    "decimal_size",
    "decode_framed",
    "decode_records",
    "encode_framed",
    "encode_records",
    "with_meta_fields",
]
