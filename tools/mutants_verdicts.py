"""Verdicts on the survivors of ``make mutants`` (:mod:`tools.mutants`): mutant key -> why it is
equivalent (no input tells it from the original) or harmless (it changes no row, no marker and no
decision). A survivor without a verdict is a real one: the suite misses a bug; add a test, not a verdict.
Keys are :func:`tools.mutants_carry.mutant_key` (module, function, operator, hash of the changed lines), so a
verdict follows its mutant through edits elsewhere and lapses when the line itself changes; a key prefixed
with a row and a space (``"postgresql targets/..."``) judges the mutant in that row only."""
from __future__ import annotations

from tools.mutants_reasons import (CONFIG, MESSAGE, NEVER_COMPARED, ONE_COLUMN, OTHER_DIALECT, PORT_MUTANTS,
                                   TARGETS_NEVER_COMPARED, TUNING, VALIDATION)
from tools.mutants_verdicts_db import DB_VERDICTS
from tools.mutants_verdicts_protocol import PROTOCOL_VERDICTS
from tools.mutants_verdicts_redis import REDIS_VERDICTS

VERDICTS: dict[str, str] = {
    "targets/s3files.py:_ours:ReplaceOrWithAnd:6c1cbfdba9":
        ("harmless: an ownerless manifest whose version is no transaction name, or another interval's, is refused "
         "by the check before the decision (_refuse_other_interval), so _ours meets one only where another writer "
         "replaces the manifest between the check and the publish; the publish then fails either way (a TypeError "
         "instead of the TargetSchemaError naming it), nothing switched"),
    **{key: ("harmless: the range from 0 also checks the table directory itself (``keys[:0]``), which is a "
             "directory - or a link to one - wherever a publish can happen: a table path that is a plain file fails "
             "the owner check before it, so no outcome changes")
       for key in ("targets/files.py:check:NumberReplacer:b5147b52f4",  # until session 30: the loop in check
                   "targets/files.py:_plain_parent:NumberReplacer:f8e57cb50e")},
    # files (local)
    "targets/files.py:partition_lock:ReplaceComparisonOperator_Gt_GtE:9b73aa659e":
        "equivalent: `>` or `>=` against a float deadline of time.monotonic() - the same wait to the nanosecond",
    "targets/files.py:partition_lock:NumberReplacer:c7c8140822": TUNING,
    "targets/files.py:partition_lock:NumberReplacer:8338d67c39": TUNING,
    "targets/files.py:partition_lock:NumberReplacer:492e1aeafe": TUNING,
    "targets/files.py:-:NumberReplacer:741800ddef": TUNING,
    "targets/files.py:-:NumberReplacer:e5ce5a8dbd": TUNING,
    "targets/files.py:_fill:ReplaceAndWithOr:1b34d7031b":
        ("equivalent: the unpublished name and the published one never exist together in a version dir - it is "
         "made by one rename of the sealed partition (a zombie writing into the staging later is not seen) and "
         "its files are then renamed one by one; the mutant renames only when both exist"),
    "targets/files.py:_fill:ReplaceUnaryOperator_Delete_Not:690104e1f7": MESSAGE,
    "targets/files.py:versions:ReplaceFalseWithTrue:0a7e64e1b3":
        ("equivalent: the version store holds directories only (the links are the table's partition paths, "
         "outside `_versions`), so following links finds nothing more"),
    "targets/base.py:-:ReplaceTrueWithFalse:8c8d715bf6":
        "equivalent: StagedVersion is never mutated nor hashed; frozen only guards against a future mistake",
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:5d32630ff7":
        "equivalent: the opener's repr is never shown (StagedVersion is not logged)",
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:3ea6512943": NEVER_COMPARED,
    "targets/base.py:PublishTarget:ReplaceFalseWithTrue:fbe91df6ed":
        ("equivalent on the files and Delta targets: files rename the sealed partition into the version store and "
         "Delta publishes the sealed files in place (retire_staging keeps them before it asks this), so nothing is "
         "left to keep in the checkpoint; only the wording of a refused rollback to a gc'd version differs"),
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:6aade268f9":
        "equivalent: the callable's repr is never shown (StagedVersion is not logged)",
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:f5b3e00cfd":
        "equivalent: the callable's repr is never shown (StagedVersion is not logged)",
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:0890224560": NEVER_COMPARED,
    "targets/base.py:partition_values:NumberReplacer:e0261fc100":
        ("equivalent: split('=', 1) and split('=', 2) differ only for a value holding '=', which check_partition's "
         "allow-list refuses (ids._PART_VALUE)"),
    "targets/base.py:__post_init__:ZeroIterationForLoop:85dcfdbaf5": VALIDATION,
    **{f"targets/base.py:{key}": ("equivalent in the Delta rows: a Delta publish checks every staged file's size "
                                  "itself (DeltaTarget._check_files) before it reads one; the database and Redis "
                                  "rows kill it (test_promises::test_a_sealed_file_lost_or_altered_...)")
       for key in ("open:ReplaceComparisonOperator_IsNot_Is:3661e7ee87", "open:AddNot:f3a1c25e91",
                   "open:NumberReplacer:07932534c8")},
    **{f"targets/base.py:{key}": MESSAGE for key in (
        "_where:ReplaceComparisonOperator_IsNot_Is:afd8be1a90", "_where:AddNot:54c9eafcb7", "_where:AddNot:00b9176f01",
        "_where:AddNot:6f59cd1486",
        "altered:ReplaceComparisonOperator_Is_IsNot:fb178eaa0d", "altered:AddNot:3933f3d414")},
    "targets/base.py:__post_init__:ZeroIterationForLoop:ef98e4f61d": VALIDATION,
    "delta-s3 targets/base.py:copied_as_sealed:ReplaceComparisonOperator_NotEq_Eq:e3d7ea459e":
        ("harmless in the Delta row: Delta uses it only to skip copies already made (_place), so every file is "
         "copied again instead - the same bytes, more work (files-s3's post-copy check uses it too: judged in "
         "that row, not here)"),
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:068132676c": NEVER_COMPARED,
    "delta-s3 targets/base.py:_etag_of:ReplaceOrWithAnd:3538595e64":
        ("equivalent in the Delta row: a Delta publish compares the staged files' ETags from its own listing "
         "(DeltaTarget._check_files) and commits them unread, never through StagedVersion.open's handle"),
    "delta-s3 targets/base.py:_etag_of:ReplaceOrWithAnd:40f1e89a66":
        ("equivalent in the Delta row: a Delta publish compares the staged files' ETags from its own listing "
         "(DeltaTarget._check_files) and commits them unread, never through StagedVersion.open's handle"),
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:c6370370ee": NEVER_COMPARED,
    "targets/base.py:__post_init__:ReplaceOrWithAnd:bf88dc99ff": VALIDATION,
    "targets/base.py:__post_init__:ReplaceOrWithAnd:d82deb57cb": VALIDATION,
    # the publish-time check of a sealed file (StagedVersion.open's re-read, session 20)
    "targets/base.py:_sha256:NumberReplacer:7cdb476724": TUNING,
    "targets/base.py:_sha256:NumberReplacer:7981ea9e85":
        ("equivalent for the targets: every reader of an opened staged file is pyarrow's Parquet reader, which "
         "seeks to the footer and reads at absolute offsets, so where the re-read leaves the file does not "
         "matter (tests/unit/test_staged_change.py asserts it is the start)"),
    # files (S3)
    "targets/s3files.py:_publish_partition:ReplaceUnaryOperator_Delete_Not:0e6b7388a0":
        "harmless: only the label a publish that copied nothing reports (published / already); the switch is the same",
    "targets/s3files.py:_publish_partition:ReplaceOrWithAnd:9ba2d002f6":
        "harmless: only the label a publish that copied nothing reports (published / already); the switch is the same",
    "targets/s3files.py:_outcome_if_done:AddNot:fceac43fad":
        ("harmless: the early 'already' is skipped; the conditional switch loop re-reads the manifest and ends "
         "the same (already, or superseded) after copying what is already there"),
    "targets/s3files.py:_outcome_if_done:AddNot:9816ae47cb":
        ("harmless: the early 'superseded' is skipped; the switch loop re-reads the manifest and returns "
         "superseded before switching - the copies stay for gc, as for any late finisher"),
    "targets/s3files.py:_publish_partition:NumberReplacer:9afcd7e5fc":
        "equivalent: where the copies are split around the commit.mid_publish failpoint (a test hook)",
    "targets/s3files.py:_publish_partition:NumberReplacer:e88024ab0b":
        "equivalent: where the copies are split around the commit.mid_publish failpoint (a test hook)",
    "targets/s3files.py:-:NumberReplacer:1767e9426b": TUNING,
    "targets/s3files.py:_publish_partition:AddNot:87c6f0496e":
        ("equivalent: a live object is reused (not copied again) only if it has the sealed file's size and plain "
         "MD5 ETag - the same bytes, whichever log wrote it (a multipart or missing ETag: copied again); the "
         "mutant lists the live prefix for a foreign manifest and copies everything under our own"),
    "targets/s3files.py:_ours:ReplaceOrWithAnd:7378f21d8a":
        ("equivalent: it reads the log for a legacy manifest of another interval too; whatever it answers, "
         "_publish_partition then refuses a partition live with another interval's version, and a version "
         "never supersedes one of another interval"),
    "targets/s3files.py:_check_staged:ReplaceUnaryOperator_Delete_Not:813da5977d":
        ("harmless: after the copies the staged objects of plain-ETag files are checked too, beside their copies' "
         "ETags (one LIST more); an S3 listing always gives an ETag, so no file is left out"),
    "targets/s3files.py:sweep:ReplaceOrWithAnd:bf1459c9c8":
        ("equivalent where a manifest is live: the files it lists are kept by the `keep` set (only its own "
         "version's); with no manifest (an operator deleted it) gc raises - nothing removed, nothing published"),
    "targets/s3files.py:-:NumberReplacer:d9804ace84": TUNING,
    "targets/s3files.py:_check_staged:NumberReplacer:74904effa4": MESSAGE,
    "targets/s3files.py:_check_staged:NumberReplacer:efe72e8143": MESSAGE,
    "targets/s3files.py:_ours:ReplaceAndWithOr:0bb78152a6":
        ("equivalent since session 20: a legacy manifest wrongly taken for ours is 'already' only if its live "
         "copies have the sealed plain-MD5 ETags - the same bytes; otherwise the version is copied again "
         "(test_review44::test_a_restarted_log_never_takes_an_old_legacy_manifest_of_the_same_sizes_for_its_own "
         "passes with the mutant)"),
    "targets/s3files.py:_ours:ReplaceComparisonOperator_Is_IsNot:5acc3a29bb":
        ("equivalent since session 20: a legacy manifest wrongly taken for ours is 'already' only if its live "
         "copies have the sealed plain-MD5 ETags - the same bytes; otherwise the version is copied again "
         "(test_review44::test_a_restarted_log_never_takes_an_old_legacy_manifest_of_the_same_sizes_for_its_own "
         "passes with the mutant)"),
    "targets/s3files.py:_outcome_if_done:AddNot:0fbcc377df":
        ("harmless: the early 'superseded' is skipped; the switch loop re-reads the manifest and returns "
         "superseded before switching - the copies stay for gc, as for any late finisher"),
    "targets/s3files.py:sweep:ReplaceAndWithOr:f9d1fb3179":
        ("equivalent: the table's top level holds no version-named object (a partition is a folder; the "
         "claim and logs are `_`-prefixed), so its files are never sweep candidates"),
    "targets/base.py:staged_change:ReplaceAndWithOr:dd7d8ec2dc":
        ("equivalent on S3 (this row): a moved ETag is always in `moved`; on local disk with checksums=False it "
         "raises, killed in the local rows by test_promises::test_without_checksums_a_file_touched_after_the_"
         "decision_is_published_by_its_size"),
    "targets/s3files.py:sweep:AddNot:90de8ddd32":
        ("equivalent where a manifest is live: it lists only its own version's files (`published_name(version, "
         "...)`, a rollback copies under the new version's names), which the version check keeps anyway; a "
         "partition with version files and no manifest (an operator deleted it) makes gc raise TypeError - "
         "nothing removed, nothing published"),
    "targets/s3files.py:sweep:ReplaceAndWithOr:40b6fa3002":
        ("equivalent: a candidate is a file of a garbage version, never the live one, so it is never in the "
         "live manifest either: both conditions are true for every candidate"),
    **REDIS_VERDICTS,  # Redis, and endpoint.py
    **PROTOCOL_VERDICTS,
    # every row with endpoint.py counts its three default ports (5432, 3306, 6379, each one up and one down);
    # each is equivalent in the other rows only, and killed in its own (test_targets_db_access.py,
    # test_targets_redis.py: a URL without a port)
    **{f"{row} targets/endpoint.py:-:NumberReplacer:{h}": ("equivalent in this row: another dialect's default "
                                                           "port; its own row's test of a URL without a port kills it")
       for row in PORT_MUTANTS for other, hashes in PORT_MUTANTS.items() if other != row for h in hashes},
    # databases
    "targets/database.py:__post_init__:ReplaceComparisonOperator_Lt_LtE:8ef8a3c37f": CONFIG,
    "targets/db_claims.py:claim_table:ReplaceOrWithAnd:c8d532c32b": MESSAGE,
    "targets/database.py:_interval_rows:NumberReplacer:2f8ac7a2c6":
        "equivalent: the interval column is one name, so _table_columns returns one: [-1] is [0]",
    "targets/db_retries.py:with_retries:NumberReplacer:3c9b51f04c": TUNING,
    "targets/db_retries.py:rollback_quietly:AddNot:21c25eca6b":
        ("equivalent: its one caller (with_retries) closes the connection right after, in `finally`, and the "
         "server rolls back what a closed session left open; with no connection, None.rollback() is swallowed"),
    "targets/csv_rows.py:prefetch:NumberReplacer:02fe3a5598": TUNING,
    "targets/csv_rows.py:prefetch:ReplaceTrueWithFalse:b4055e0a28":
        ("harmless: the prefetch thread ends with its consumer (the generator's finally stops it); daemon only "
         "matters to an interpreter exiting while it runs, which the publish never leaves behind"),
    "targets/csv_rows.py:csv_chunks:AddNot:84e494e6ba":
        ("equivalent on every pyarrow the lock pins (WriteOptions has null_string: NATIVE_NULL_STRING), where "
         "refill is b'' either way; on an older pyarrow the mutant sets a null_string pyarrow lacks - an "
         "AttributeError, a failed publish, never a wrong row"),
    # MariaDB's codes for a value too long / not a number: LOAD DATA's rejected rows (1265, 1366) are raised as
    # TargetSchemaError by the target itself (SHOW WARNINGS), so they reach classify only from a statement
    # that carries no staged value; one misclassified there is raised as the driver's error, nothing published
    # (1054, an unknown column, likewise: the target names the columns the table lacks before it loads; 1292, a
    # bad date/time value, is LOAD DATA's warning too; 1136, a column count, the target's own statements never hit)
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": CONFIG for h in ("d3acefb16f", "8076cf6337",
                                                                              "26378b656f", "fab1d7e1f6",
                                                                              "9b43ef7c94")},
    "targets/database.py:_table_columns:AddNot:e72ec40d7b": MESSAGE,
    "targets/database.py:__post_init__:AddNot:8a47199909": CONFIG,
    **{f"targets/database.py:_dry_run:{key}":
        ("equivalent: the dry run's overlap check is run again by the reservation that follows it (_reserve, on an "
         "interval's first version), under the table's lock and before the decision, with the same refusal "
         "(test_targets_db_reserved.py); run on a later dry run instead, it leaves the interval itself out and "
         "finds nothing new") for key in ("NumberReplacer:6b8ae6c84e", "NumberReplacer:b7731295ee",
                                          "ReplaceComparisonOperator_Eq_NotEq:913f93a762")},
    "targets/database.py:_ts:ReplaceComparisonOperator_Eq_NotEq:3a55621a51":
        "equivalent: connect sets every PostgreSQL session to UTC, so a naive UTC and an aware instant are the same",
    "targets/database.py:_load:NumberReplacer:3fea8353d3":
        "harmless: rows_loaded of a version without columns (only emptied partitions) is -1 instead of 0; never read",
    "targets/db_claims.py:reserve:NumberReplacer:318b01fe80": ONE_COLUMN,
    "targets/db_claims.py:_taken:NumberReplacer:9d32797d3a":
        "equivalent: a marker row of epoch 0 (a reservation) has no published partitions (NULL): both give ()",
    "mysql targets/sql_dialects.py:-:NumberReplacer:273459baa5": CONFIG,
    "targets/sql_dialects.py:load:NumberReplacer:a7d327e851": TUNING,
    "targets/sql_dialects.py:load:NumberReplacer:7f266b2486": TUNING,
    "mysql targets/sql_dialects.py:-:NumberReplacer:b379351790":
        "equivalent: 1452 (a foreign key's child row) reaches classify as PyMySQL's IntegrityError, 'schema' by type",
    "mysql targets/sql_dialects.py:classify:NumberReplacer:8e6a7eb373": CONFIG,
    "mysql targets/sql_dialects.py:classify:NumberReplacer:c8a6223872":
        ("equivalent: PyMySQL raises a deadlock (1213) as OperationalError, which classify retries as "
         "'unavailable' by its type: retried either way"),
    "targets/database.py:_load:NumberReplacer:5a1032f164":
        "equivalent: `counted` is a one-element list (the batches' running row count): [-1] is [0]",
    "targets/db_claims.py:refuse_overlap:NumberReplacer:64f4005ea6": ONE_COLUMN,
    "targets/db_retries.py:with_retries:ReplaceBinaryOperator_Pow_Mul:f0e73e9b29": TUNING,
    "targets/db_retries.py:with_retries:NumberReplacer:9cb937ea76": TUNING,
    "targets/db_retries.py:error:NumberReplacer:7088a271e1": MESSAGE,
    "targets/sql_dialects.py:load:NumberReplacer:d9aa504c7f": TUNING,
    "targets/sql_dialects.py:classify:NumberReplacer:4c3ff9bbed": CONFIG,
    "targets/csv_rows.py:render:AddNot:64c840c1cc":
        ("equivalent: with refill b'' (PostgreSQL's null '', or pyarrow's own null_string) the substitution "
         "puts back what it matched: the same bytes"),
    # MariaDB's lost-connection and column-privilege codes: PyMySQL raises them as OperationalError, which
    # classify maps to 'unavailable' by type too; 1142/1143 are both in the privilege set
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": CONFIG for h in ("1c1ed2cb78", "aacd345b55", "b2b79a145b")},
    "targets/db_retries.py:error:NumberReplacer:f21f954240": MESSAGE,
    "targets/endpoint.py:without_password:NumberReplacer:13aeca1998":
        "equivalent: split's limit does not change the first part (the user)",
    **{f"{row} targets/endpoint.py:from_url:ReplaceComparisonOperator_Eq_NotEq:5e71f646ab":
       "equivalent in this row: only the Redis dialect reads Endpoint.tls" for row in ("postgresql", "mysql")},
    **DB_VERDICTS,  # the database rows' (session 27 on)
    # an OperationalError with any SQLSTATE (classes 54, 55, 58 too) taken as unavailable: retried, then raised
    "targets/sql_dialects.py:classify:ReplaceAndWithOr:03d54548b1": CONFIG,
    "targets/db_claims.py:-:ReplaceTrueWithFalse:8c8d715bf6":
        "equivalent: a Marker is never mutated nor hashed (read from its row, its fields compared one by one)",
    "targets/sql_dialects.py:identity:NumberReplacer:0a55ab3f0a": ONE_COLUMN,  # SELECT current_schema()
    "targets/database.py:_reserve:ReplaceComparisonOperator_Lt_LtE:f0ed0a8901":
        ("harmless: it differs only for a check of the epoch already live (the marker at our epoch), where no "
         "partition is new to the marker and the range is the live marker's own: it reserves nothing another "
         "interval could take, and the next check or publish replaces the reservation"),
    # the holder's log in the error of claim(), a path claim_table pre-empts (a claim row of an older release)
    "targets/db_claims.py:claim:ReplaceOrWithAnd:fe61c2603e": MESSAGE,
    "targets/db_claims.py:reserve:NumberReplacer:87df13feeb": ONE_COLUMN,
    # the COPY's read buffer and chunk size
    **{f"targets/sql_dialects.py:load:NumberReplacer:{h}": TUNING for h in ("0464bd1df1", "fe322a7be6")},
    **{f"{row} targets/base.py:_sha256:NumberReplacer:7981ea9e85": (
        "equivalent in this row: the database loads read the staged Parquet through pyarrow, which seeks to the "
        "footer and the row groups, so the position the re-read leaves does not matter; targets copying the "
        "bytes are killed in their rows") for row in ("postgresql", "mysql")},
    # base.py's S3 ETag hint in the database rows: their worlds stage on local disk (no ETag); the same code is
    # killed in files-s3's row, whose staging is on S3
    **{f"{row} targets/base.py:_etag_of:ReplaceOrWithAnd:40f1e89a66": (
        "equivalent in this row: its worlds stage on local disk, where a file has no ETag; killed in files-s3's "
        "row") for row in ("postgresql", "mysql")},
    "targets/database.py:_load:NumberReplacer:23ce63ff2e":
        "equivalent: `counted` is a one-element list (the batches' running row count): [-1] is [0]",
    "targets/db_claims.py:lock_table:NumberReplacer:9155fd0e57":
        "equivalent: the per-table lock's name keeps 41 hex digits of the table's hash instead of 40 - still one "
        "name per table, well under MariaDB's 64 characters",
    "targets/db_claims.py:lock_table:NumberReplacer:fe4e3bec05":
        "equivalent: the per-table lock's name keeps 39 hex digits of the table's hash instead of 40 - still one "
        "name per table",
    "targets/db_claims.py:_equal_values:NumberReplacer:98789bafad":
        "equivalent: the probe's INSERT batches overlap by one row at a 500-row boundary; a spelling inserted twice "
        "matches the same spellings (a set of pairs is returned)",
    "targets/db_claims.py:claim:ReplaceComparisonOperator_Eq_NotEq:a0ceaf4014":
        ("harmless: `created` only gates the scan for markers written before claims existed (0.2 commit "
         "tables); with no such markers both branches find nothing (tests/conformance/test_target_ownership.py "
         "covers the legacy markers)"),
    "targets/db_retries.py:with_retries:ReplaceAndWithOr:391c53ed91": CONFIG,
    "targets/sql_dialects.py:classify:ReplaceAndWithOr:9618474ea0": CONFIG,
    "targets/sql_dialects.py:classify:ReplaceOrWithAnd:da57ece02a": CONFIG,
    # MariaDB's error codes (_MY_SCHEMA, _MY_UNAVAILABLE, _MY_PERMISSION) in the PostgreSQL row
    **{f"postgresql targets/sql_dialects.py:-:NumberReplacer:{h}": OTHER_DIALECT
       for h in ("756e18f471", "c29479c0f4", "1c1ed2cb78", "7541d83862", "765fa14f7d", "119bf85de4")},
    "postgresql targets/sql_dialects.py:MySQL:ReplaceTrueWithFalse:e5652fd354":
        "equivalent for this row: an attribute of MariaDB's dialect, never used by a PostgreSQL target",
    # MariaDB's error codes in its own row: a code moved out of its set is still classified by its PyMySQL type
    "mysql targets/sql_dialects.py:-:NumberReplacer:ba69376033":
        ("equivalent: 2003 (cannot connect) is raised as PyMySQL's OperationalError, which classify calls "
         "'unavailable' by its type too (test_a_server_that_goes_away..., the unreachable port)"),
    "mysql targets/sql_dialects.py:-:NumberReplacer:b2b8b923c0": CONFIG,  # code 0: errors without a code
    "mysql targets/sql_dialects.py:-:NumberReplacer:45bcbf8ab3": CONFIG,  # 3948: local_infile off (server-wide)
    "targets/csv_rows.py:csv_chunks:NumberReplacer:6a77d9d110": TUNING,
    "targets/csv_rows.py:csv_chunks:ReplaceAndWithOr:43828a2e97":
        ("equivalent with the pinned pyarrow (WriteOptions.null_string exists, so `refill` is always empty): the "
         "mutant also sets null_string when `null` is '', which is pyarrow's default"),
    "targets/sql_dialects.py:-:ReplaceTrueWithFalse:8c8d715bf6":
        "equivalent: TableInfo is never mutated nor hashed; frozen only guards against a future mistake",
    "targets/db_retries.py:with_retries:NumberReplacer:f8032e9d49": TUNING,
    "targets/base.py:staged_change:AddNot:824514ed67": MESSAGE,  # the warning that only sizes were compared
    "targets/database.py:_check_landed:AddNot:6c50b65f9f": MESSAGE,  # which predicate the refusal names
    "postgresql targets/database.py:_load:ReplaceAndWithOr:b6c91a64f9":
        ("equivalent in this row: without an interval column the mutant asks same_name(column, None), which is "
         "False where names compare exactly (PostgreSQL); MariaDB's row kills it (None has no lower())"),
    "postgresql targets/database.py:_ts:AddNot:7fada919e7":
        ("equivalent in this row: PostgreSQL gets the bounds as naive UTC instead of aware datetimes, and its "
         "session's time zone is UTC (set at connect), so a timestamptz compares the same"),
    "mysql targets/sql_dialects.py:Dialect:ReplaceFalseWithTrue:7a03f57b14":
        "equivalent in this row: the base class's default, which MariaDB's dialect overrides (True)",
    "mysql targets/sql_dialects.py:-:NumberReplacer:47f9c96e3f":
        ("equivalent: 1451 (a foreign key's parent row) reaches classify as PyMySQL's IntegrityError, 'schema' by "
         "its type too; 1452 is in the set already"),
    "mysql targets/sql_dialects.py:classify:ReplaceOrWithAnd:15f27b1b19": CONFIG,
    # an S3 object's ETag, None on local disk, where these rows stage
    **{f"{row} targets/base.py:_etag_of:ReplaceOrWithAnd:3538595e64":
       ("equivalent in this row: it stages on local disk, whose files have no ETag (None either way); the "
        "S3 rows compare ETags") for row in ("files-local", "delta-local", "postgresql", "mysql", "redis")},
    "targets/database.py:_load:ReplaceComparisonOperator_Eq_NotEq:1bee70b4b4":
        ("harmless: without the per-row check of the interval column, the check after the load (_check_landed: "
         "the rows the interval's delete matches must be the rows loaded) refuses the same version before the "
         "decision (test_replace_by_interval_column)"),
    "targets/db_retries.py:with_retries:NumberReplacer:84d5d84407": TUNING,
    "targets/sql_dialects.py:classify:NumberReplacer:3f2517206f": CONFIG,
    "targets/database.py:__post_init__:NumberReplacer:aebf2d5363": CONFIG,
    "targets/database.py:_refuse_overlap:ReplaceFalseWithTrue:3d2f9ac83f":
        ("harmless: the dry run then also locks the table's claim row until its rollback - checks of one table "
         "queue, nothing else changes"),
    "targets/database.py:_refuse_overlap:ReplaceAndWithOr:205f30e3ac":
        ("harmless: it refuses more (overlapping intervals where the deletes go by partition, or upsert deletes "
         "nothing), never publishes anything else; one table keeps one interval grid anyway"),
    "mysql targets/sql_dialects.py:-:NumberReplacer:f101a6a85a":
        "equivalent: 1048 (a NULL into NOT NULL) is PyMySQL's IntegrityError, 'schema' by its type too",
    "targets/sql_dialects.py:connect:NumberReplacer:c873eb8918": TUNING,
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:cb385626ef":
        "equivalent: no code compares two StagedVersions (the dataclass __eq__ is never called)",
    "targets/database.py:-:ReplaceTrueWithFalse:8c8d715bf6":
        ("equivalent: nothing assigns a DatabaseTarget's fields after it is made (claim() sets the owner with "
         "object.__setattr__) and nothing hashes one; frozen only guards against a future mistake"),
    "targets/database.py:DatabaseTarget:ReplaceFalseWithTrue:f864850a9e":
        "harmless: the repr then shows the owner record (an id, names and a path: no secret)",
    "targets/database.py:__post_init__:ReplaceComparisonOperator_Eq_NotEq:8a7a443882": CONFIG,
    "targets/database.py:_peek_marker:NumberReplacer:3c828c7c57":
        ("equivalent: the marker of a missing commit table, epoch 0 or -1: both below every epoch (>= 1) and "
         "neither > 0, and the overlap check that asks `== 0` also needs the commit table to exist"),
    "targets/database.py:_load:NumberReplacer:96684eaf30":
        "equivalent: `counted` is a one-element list; [0] and [-1] are the same element",
    "targets/database.py:_check_landed:NumberReplacer:10a6fdd3d3": ONE_COLUMN,
    "mysql targets/sql_dialects.py:-:NumberReplacer:676718bfea":
        ("equivalent: 1146 (no such table) reaches classify as PyMySQL's ProgrammingError, 'schema' by its type "
         "too"),
    "mysql targets/sql_dialects.py:-:NumberReplacer:1d010414e5":
        ("equivalent: 1262 (a row truncated) is only a LOAD DATA LOCAL warning, raised as TargetSchemaError by "
         "raise_on_warnings; it never reaches classify"),
    "mysql targets/sql_dialects.py:-:NumberReplacer:e2074719a2": CONFIG,  # 1148: LOAD DATA LOCAL off server-wide
    "mysql targets/sql_dialects.py:classify:NumberReplacer:8ce9ba7d99":
        ("equivalent: 1205 (lock wait timeout) is PyMySQL's OperationalError, 'unavailable' by its type, and "
         "with_retries starts an unavailable error over exactly like a transient one"),
    "mysql targets/sql_dialects.py:-:NumberReplacer:756e18f471":
        ("equivalent: 1364 (a NOT NULL column without a default) never reaches classify - LOAD DATA LOCAL turns "
         "it into a warning, which raise_on_warnings raises as TargetSchemaError "
         "(test_a_not_null_column_the_rows_lack_is_refused_before_the_decision, replace and upsert)"),
    "targets/csv_rows.py:prefetch:NumberReplacer:c154fd1088": TUNING,
    "targets/database.py:DatabaseTarget:ReplaceFalseWithTrue:de46a52c13": TARGETS_NEVER_COMPARED,  # owner
    "targets/database.py:DatabaseTarget:ReplaceFalseWithTrue:2515401ae1": TARGETS_NEVER_COMPARED,  # pinned
    "targets/database.py:_publish_once:NumberReplacer:00a3eca836":
        ("equivalent: `newest` is only compared as `newest > txn.epoch`, and every epoch is >= 1: 0 and -1 "
         "both say no newer version"),
    "mysql targets/sql_dialects.py:-:NumberReplacer:7ce2a0350c":
        ("equivalent: MariaDB's 1062 (duplicate entry) reaches classify as pymysql's IntegrityError, which is "
         "'schema' by its type too (test_duplicate_keys_in_the_staged_rows_publish_nothing[mysql])"),
    "targets/endpoint.py:describe:AddNot:c263fd91c2": MESSAGE,
    # the error's URL of a staged file: the same as its path on local disk, where these rows stage
    **{f"{row} targets/base.py:_where:AddNot:00b9176f01":
       ("equivalent in this row: it stages on local disk, where a path is its own URL (Storage.url); the "
        "files-s3 row kills it (test_staged_on_s3::test_a_sealed_object_gone_on_s3_is_named_by_its_s3_url)")
       for row in ("files-local", "delta-local", "postgresql", "mysql", "redis")},
    "targets/database.py:_dry_run:ReplaceAndWithOr:fe672a3947":
        ("harmless: the interval-overlap check runs on every dry run instead of an interval's first; it leaves "
         "the interval itself out, so it finds exactly the clashes it found before"),
    "targets/sql_dialects.py:column:AddNot:d3a70fb6a3":
        ("harmless: an unknown staged column is then not caught by name but by the database in the dry run "
         "(TargetSchemaError before the decision either way; test_refusals[unknown_column])"),
    "targets/sql_dialects.py:-:NumberReplacer:69e2f33859": "equivalent: no MariaDB error has code 1 (nor 0)",
    # Delta
    "targets/delta.py:__init__:ReplaceBinaryOperator_Mul_Div:0ec54f40c1":
        "equivalent: `*` or `/` in the signature - every caller passes pipeline and sink by keyword",
    "targets/delta.py:interval_files:NumberReplacer:a7aa41b667":
        "equivalent: the first element of split('/', 1) and of split('/', 2) is the same",
    "targets/delta.py:publish:NumberReplacer:3455f2421b":
        ("harmless: the first attempt re-reads the snapshot it already has and the second reuses the one it "
         "lost with, so that attempt loses again and the third re-reads: one wasted try of COMMIT_TRIES, and an "
         "attempt never commits on a snapshot older than the one it judged"),
    "targets/delta.py:-:NumberReplacer:d1be69042f": TUNING,
    "targets/delta.py:-:NumberReplacer:7735498a97": TUNING,
    "targets/delta.py:-:NumberReplacer:41ab9aa68d": TUNING,
    "targets/delta.py:-:NumberReplacer:38200b6ee8": TUNING,
    "targets/base.py:PublishTarget:ReplaceFalseWithTrue:b4948795b0":
        ("equivalent in the Delta rows (DeltaTarget sets publishes_in_place itself); the files and database rows "
         "kill it"),
    **{key: "equivalent: the first element of split('/', 1) and of split('/', 2) is the same" for key in (
        "targets/delta.py:live_version:NumberReplacer:d07b5079bb", "targets/delta.py:interval_files:NumberReplacer:e201981fef",
        "targets/delta.py:sweep:NumberReplacer:b44b2412fa")},
    "targets/delta.py:publish:NumberReplacer:9f7a558825":
        ("harmless: the first attempt reads the table again instead of using the snapshot it just read - one "
         "more read, never an older snapshot"),
    "targets/delta.py:staged_schema:NumberReplacer:31d52aa656":
        ("equivalent: the check reads the schema of one file per partition (by design: one job writes one "
         "schema), the first or (mutant) the last of the same partition"),
    "targets/delta.py:staged_schema:ReplaceContinueWithBreak:88e1cd2fab":
        ("harmless: only the publish's read can meet an empty partition first (the check reads the manifest's, "
         "which lists none), and the publish only widens the table by what the check already widened it by; "
         "the target used on its own, creating a table from a version whose first partition is empty, gets the "
         "columns from its next publish (test_delta_target::test_a_version_replaces_its_intervals_files_...)"),
    "targets/delta.py:_live_epoch:NumberReplacer:a85830b37c":
        "equivalent: the first element of split('/', 1) and of split('/', 2) is the same",
    "targets/delta.py:staged_schema:NumberReplacer:8e6f28ca05":
        ("equivalent: the publish reads the schema of one file per partition (by design: one job writes one "
         "schema), the first or (mutant) the last of the same partition - the check before the decision reads "
         "it through the staged version, unmutated"),
    "targets/delta.py:check_schema:NumberReplacer:4cd77d8131":
        "equivalent: the schema converted has exactly one field, so fields[0] and fields[-1] are the same",
    # the protocol
    "protocol/transaction.py:__init__:ReplaceBinaryOperator_Mul_Div:5d3beeba4f":
        "equivalent: `*` or `/` in the signature - every caller passes pipeline, sink and the rest by keyword",
    "protocol/transaction.py:begin:ReplaceOrWithAnd:018f08f4c4":
        ("equivalent: begin records `meta: None` instead of `{}` when none is given; every reader of it "
         "(txlog.EpochStatus, batch, pipeline) reads `.get('meta') or {}`"),
    "protocol/decisions.py:known_status:ReplaceOrWithAnd:48147de9a1":
        ("equivalent: the two differ only for an epoch whose log has records but neither `open` nor `outcome`; "
         "`open` is an epoch's first record and gc's compaction keeps the outcome, so no such epoch exists "
         "(an unknown epoch, no records at all, is refused either way: test_promises)"),
    "protocol/staging.py:retire_staging:NumberReplacer:389a66886e":
        ("harmless: after a Delta publish an empty directory (`state/`) may stay in the version's directory of "
         "the table: no file in it, invisible to Delta readers and VACUUM"),
    "protocol/transaction.py:_publish:NumberReplacer:f762221aae":
        ("harmless: the file count reported for an already-published commit whose manifest gc compacted "
         "(0 or -1); nothing decides on it"),
    # session 26
    **{f"targets/db_claims.py:reserve:NumberReplacer:{h}":
        ("equivalent: every reservation this module writes names its epoch, and every epoch is >= 1, so the "
         "default (0, -1 or 1) of a reservation without one is never above an epoch") for h in ("15c48c59ec",
                                                                                               "f766e12848")},
    **{f"targets/sql_dialects.py:advice:NumberReplacer:{h}":
        ("harmless: the hint appended to a TargetUnavailableError for PostgreSQL's class 53 (out of disk, memory "
         "or connections) is lost; the error, its rollback and 'publishing again is safe' are unchanged")
       for h in ("f3e6d6e2d8", "1f4fd2c80c")},
    **{f"{row} targets/base.py:_where:ReplaceComparisonOperator_Is_IsNot:8561ea459d": MESSAGE
       for row in ("delta-local", "delta-s3")},  # Delta names a changed file by URL itself (_check_files)
    "targets/base.py:StagedVersion:ReplaceFalseWithTrue:e8d0abab89": NEVER_COMPARED,
    "targets/database.py:DatabaseTarget:NumberReplacer:5c3bb1ac5f": TUNING,  # batch_rows
    "targets/sql_dialects.py:load:NumberReplacer:1144375ad6": TUNING,  # the COPY's read buffer
    "targets/db_claims.py:check:ReplaceOrWithAnd:c8d532c32b":
        ("harmless: the other owner's home shown in the refusal ('?' by the mutant); refuse_other_owner decides by "
         "the owner id alone"),
    "targets/sql_dialects.py:split_table:NumberReplacer:adbdf34695":
        "equivalent: a name of one part - its first element and its last are the same",
    "targets/db_retries.py:with_retries:NumberReplacer:81c357272c":
        ("equivalent: the loop's last try never loops again - it returns, or raises once `attempt < retries` is "
         "false - so a range one longer never reaches its extra turn"),
    "targets/database.py:DatabaseTarget:NumberReplacer:1c2748b954": TUNING,  # the default retries
    "postgresql targets/database.py:_ensure_commit_table:ZeroIterationForLoop:5264f9fcf7":
        ("equivalent in this row: PostgreSQL's exact_names does nothing (its text compares byte for byte); the "
         "mysql row tests the ALTER of an older commit table"),
    **{key: ONE_COLUMN for key in (
        "targets/db_claims.py:holder:NumberReplacer:5ca9d197c4",
        "postgresql targets/sql_dialects.py:table_info:NumberReplacer:2e2d526b27")},
    "targets/csv_rows.py:put:NumberReplacer:b4e61a0504": TUNING,  # how often a blocked put looks at `stop`
    "targets/db_claims.py:_taken:ReplaceComparisonOperator_Gt_GtE:0bf8e71150":
        ("equivalent: a marker row at epoch 0 (made by a check's reservation or the marker lock) has no "
         "published partitions - the publish's one UPDATE sets its epoch (>= 1) and partitions together"),
    **{f"{row} targets/base.py:staged_change:ReplaceBinaryOperator_Add_Sub:8ee2cecc26":
       ("equivalent in this row: its tests stage on local disk, where no ETag is compared (a moved mtime or inode "
        "is read again instead); the files-s3 and delta-s3 rows, which rewrite staged objects on S3, test it")
       for row in ("files-local", "delta-local", "postgresql", "mysql", "redis")},
    "targets/database.py:DatabaseTarget:ReplaceFalseWithTrue:f9b892d081":
        "harmless: the target's repr also shows the schema it pinned (a schema name, never a credential)",
    "postgresql targets/csv_rows.py:csv_chunks:AddNot:9812f54fae":
        ("equivalent in this row: PostgreSQL's CSV null is '', pyarrow's default null_string, so setting it or not "
         "writes the same bytes (MariaDB's load writes NULL for a null: the mysql row kills it)"),
    "postgresql targets/sql_dialects.py:same_name:ReplaceComparisonOperator_Eq_NotEq:4c71d36997":
        ("equivalent in this row: PostgreSQL's column names are compared exactly (case_insensitive_columns is "
         "false), so the case-folded comparison is never made"),
    "targets/database.py:binding:NumberReplacer:b9b5ae3c83": TUNING,  # one retry of the names' resolution
    "targets/db_claims.py:_equal_values:NumberReplacer:001a6da52b":
        ("equivalent: the probe's INSERT batches overlap by one row; a spelling inserted twice matches the same "
         "spellings, and the pairs are returned as a set"),
    **{f"targets/sql_dialects.py:-:ReplaceFalseWithTrue:{h}": ("equivalent with the pinned pyarrow, which has "
       "is_binary_view and is_string_view: the fallback for older ones is never called")
       for h in ("5b272de789", "9278c67d38")},
}
