"""flexcheck: write flex-attention fixtures (docs/fixtures.md) for the flexcheck gate.

The gate itself, and the float64 oracle, are the C command `flexcheck`; this package writes
the files it reads: an engine's q/k/v (write_case), what the engine's kernel produced from them
(add_tested), and reads them back (read_case, list_cases); and asks, in process, whether an
output is right (judge, assert_attention_close: flexcheck's verdict through libflexcheck.so).
See python/README.md.
"""
from ._version import __version__
from .judging import Verdict, assert_attention_close, judge
from .fixtures import (
    DTYPES,
    SCHEMA,
    SCHEMA_TERMS,
    SCHEMA_PAGED,
    SCHEMA_XTERMS,
    SCHEMAS,
    Case,
    Tested,
    add_tested,
    bfloat16_bits,
    bfloat16_to_float32,
    list_cases,
    read_case,
    round_to,
    write_case,
)

__all__ = [
    "DTYPES",
    "SCHEMA",
    "SCHEMA_TERMS",
    "SCHEMA_PAGED",
    "SCHEMA_XTERMS",
    "SCHEMAS",
    "Case",
    "Tested",
    "Verdict",
    "__version__",
    "add_tested",
    "assert_attention_close",
    "bfloat16_bits",
    "bfloat16_to_float32",
    "judge",
    "list_cases",
    "read_case",
    "round_to",
    "write_case",
]
