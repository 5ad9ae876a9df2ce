"""Verdicts on the protocol row's survivors (``protocol/transaction.py``, ``decisions.py``, ``staging.py``),
merged into :data:`tools.mutants_verdicts.VERDICTS`; the rules are that module's."""
from __future__ import annotations

PROTOCOL_VERDICTS: dict[str, str] = {
    "protocol/staging.py:retire_staging:ReplaceAndWithOr:f6d88b43c7":
        ("harmless: an extras' top dir holds extras only (pre_commit lists every file outside the data dirs as "
         "one), so once they are moved it is empty and both remove it; the mutant also removes one a zombie "
         "wrote into after pre_commit, a file never published either way. Never a data dir: data and sealed "
         "files are partitions, not extras"),
}
