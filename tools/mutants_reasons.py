"""The reasons shared by many verdicts of ``make mutants`` (:mod:`tools.mutants_verdicts`)."""
from __future__ import annotations

# endpoint.py's DEFAULT_PORTS mutants by dialect (the key's hash of the changed line: one up, one down)
PORT_MUTANTS = {"postgresql": ("05de6442c6", "4bc6acac07"), "mysql": ("c5f51742f6", "f260b0548c"),
                "redis": ("30f5a40281", "6880ef7bcc")}
TUNING = ("equivalent: a tuning constant (a timeout, a SCAN batch size, a retry budget, a file mode) - one more "
          "or less changes no row, marker or decision")
MESSAGE = "harmless: it changes only the text of a description, an error or its hint, never what is published"
VALIDATION = ("harmless: defence in depth - the protocol builds every StagedVersion from its own manifest, whose "
              "names pre_commit already refused (unsafe names, symlinks, nested partitions); unit-tested")
OTHER_DIALECT = ("equivalent for this row: MariaDB/MySQL's error codes, never consulted by a PostgreSQL target "
                 "(the mysql row tests them)")
CONFIG = ("harmless: configuration validation and error classification (tests/unit, "
          "tests/conformance/test_targets_db.py); a misclassified error is retried or raised, and a publish is "
          "safe to retry either way (the marker decides)")
NEVER_COMPARED = "equivalent: two StagedVersions are never compared"
ONE_COLUMN = "equivalent: the query selects one column, so its first and its last are the same"
TARGETS_NEVER_COMPARED = ("equivalent: no code compares two DatabaseTargets (the dataclass __eq__ is never called); "
                          "owners are compared by id in db_claims")
PG_NULL_ONLY = ("equivalent in this row: PostgreSQL's COPY renders with null '' only (`csv_chunks(batches)`), where "
                "refill is b'' either way; MariaDB's 'NULL' is the mysql row's (test_values_and_reserved_word_columns)")
