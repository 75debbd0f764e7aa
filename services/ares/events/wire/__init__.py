"""The bytes of ares records: Avro schemas found and fingerprinted once (``schemas``), the
single-object codec (``codec``), the append path's hand-written envelope encoder
(``envelope``) and generated readers (``avro_reader``), canonical JSON (``canonical``),
the schema-evolution checks (``compat``) and the documents other languages generate types
from (``export``). No I/O beyond reading the .avsc files."""
