"""Verdicts on the protocol row's survivors (``protocol/transaction.py``, ``decisions.py``, ``staging.py``),
merged into :data:`tools.mutants_verdicts.VERDICTS`; the rules are that module's."""
from __future__ import annotations

from tools.mutants_reasons import MESSAGE

# a signature's bare `*` (keyword-only after it) turned into `/` (positional-only before it)
STAR_TO_SLASH = ("equivalent: the signature's `*` made `/`: the parameters after it may then also be passed by "
                 "position, and every caller passes them by keyword - the same calls bind the same way")

PROTOCOL_VERDICTS: dict[str, str] = {
    **{f"protocol/decisions.py:published_version:{k}":
       ("equivalent: a first epoch (1) has no earlier epoch, so reading the log for it finds nothing to empty and "
        "the version is the same; the condition only saves that read (a batch checks a year of first epochs)")
       for k in ("ReplaceComparisonOperator_Gt_GtE:6dd1aba0da", "NumberReplacer:46960fe668")},
    "protocol/decisions.py:published_version:ReplaceComparisonOperator_Lt_LtE:b6eeec72d7":
        ("equivalent: it adds the transaction's own epoch where it is COMMITTED - at the publish, never at the check "
         "(not decided yet) - and that epoch's partitions are its manifest's, already in the version (its published "
         "record is written only after the publish, which then returns early): setdefault changes nothing"),
    "protocol/transaction.py:pre_commit:ReplaceBinaryOperator_Mul_Div:29b8460f97": STAR_TO_SLASH,
    **{f"protocol/transaction.py:{k}": STAR_TO_SLASH
       for k in ("abort:ReplaceBinaryOperator_Mul_Div:1ef9ec0a8c", "open:ReplaceBinaryOperator_Mul_Div:f5cb357cd6")},
    "protocol/transaction.py:_commit_recovered:ReplaceAndWithOr:abda6a217d":
        ("equivalent: it differs only where a verdict is already recorded, and there claiming one is a no-op (the "
         "first recorded wins) and validation_ok answers as before - a passing verdict commits; a failing one never "
         "gets here, as recovery reaches this only for the newest epoch whose validation is ok or for a version the "
         "target holds, which a failed verdict never lets be published"),
    "protocol/transaction.py:pre_commit:AddNot:3a542d4211":
        ("harmless: the writer's per-file counts are passed only where they cannot be used (no trusted partition "
         "count to add up to) and withheld where they could: the manifest then reads those files' footers - "
         "the true counts, more I/O"),
    "protocol/staging.py:retire_staging:ReplaceAndWithOr:f6d88b43c7":
        ("harmless: an extras' top dir holds extras only (pre_commit lists every file outside the data dirs as "
         "one), so once they are moved it is empty and both remove it; the mutant also removes one a zombie "
         "wrote into after pre_commit, a file never published either way. Never a data dir: data and sealed "
         "files are partitions, not extras"),
    "protocol/staging.py:retire_staging:ReplaceAndWithOr:768bf31861":
        ("equivalent: a data dir apart from the sealed one exists only where storage renames, and the commit's "
         "seal renamed it away before the publish (a late writer's file from before that rides along, never "
         "listed); only a writer recreating data/ between the seal and this call differs - its file kept in the "
         "checkpoint until gc instead of removed, never published (a rollback republishes the manifest's names)"),
    "protocol/staging.py:retire_staging:NumberReplacer:6f62ca8af2":
        "equivalent: the first part of a split is the same whatever its limit (1 or 2)",
    **{f"protocol/transaction.py:recover:NumberReplacer:{h}":
       "equivalent: the default is taken only for an interval with no epoch, whose loop then runs nothing"
       for h in ("eb81c3e924", "81a53e2444")},
    "protocol/staging.py:kept_copies:ReplaceOrWithAnd:5811401da4":
        ("equivalent: the next check (the sealed data inside the checkpoint) answers None in both cases it lets "
         "through - a target that keeps no copies has none there, and a missing checkpoint nothing below it"),
    **{f"protocol/transaction.py:record_validation:{k}": MESSAGE  # only whether it logs a warning
       for k in ("AddNot:8b5e8bc5b1", "ReplaceComparisonOperator_NotEq_Eq:1fff636022")},
    **{f"protocol/transaction.py:{k}": STAR_TO_SLASH for k in (
        "transaction:ReplaceBinaryOperator_Mul_Div:71f60ebfa2", "begin:ReplaceBinaryOperator_Mul_Div:2efcf51af4",
        "recover:ReplaceBinaryOperator_Mul_Div:941e98371b", "at:ReplaceBinaryOperator_Mul_Div:ecf9be7f27")},
    # (no caller names the interval, or at()'s url, by keyword)
    "protocol/transaction.py:begin:NumberReplacer:26bbccee4d":
        ("harmless: a begin that lost the race for an epoch tries two higher instead of one - epochs stay unique "
         "and increasing, which is all the log, the fencing (the newest wins) and the targets' markers compare"),
    "protocol/transaction.py:_publish:ReplaceComparisonOperator_Lt_LtE:9fda800d41":
        ("equivalent: the one COMMITTED epoch not older is the one publishing, whose partitions are its manifest's "
         "(already there: setdefault keeps them); its published record, which would name more, exists only once "
         "its publish is finished, and then _publish returns before"),
    "protocol/transaction.py:_publish:NumberReplacer:c011fa8f47":
        ("harmless: only the file count a retried commit reports for a version whose manifest gc has compacted "
         "(unknown, 0 by convention); nothing published or decided differs"),
    **{f"protocol/{m}.py:-:AddNot:e78b191703": (
       "equivalent: the names imported for annotations only (strings: PEP 563) are then imported at run time "
       "too, which changes nothing (no import circle: the module imports)") for m in ("staging", "decisions")},
    **{f"protocol/transaction.py:_newest_epoch:NumberReplacer:{h}":
        ("equivalent: asked only by the commit of a transaction of that interval, whose own epoch is in the log, "
         "so the default is never taken") for h in ("7b9dadfe3d", "7cefbc53ff")},
}
