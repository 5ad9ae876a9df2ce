"""Verdicts on the database rows' survivors (PostgreSQL, MariaDB: ``targets/database.py``, ``db_claims.py``,
``db_retries.py``, ``csv_rows.py``, ``sql_dialects.py``) judged from session 27 on, merged into
:data:`tools.mutants_verdicts.VERDICTS`; the rules are that module's."""
from __future__ import annotations

from tools.mutants_reasons import CONFIG, ONE_COLUMN, PG_NULL_ONLY, TUNING

DB_VERDICTS: dict[str, str] = {
    "targets/db_claims.py:lost_partitions:ReplaceAndWithOr:931345b624":
        ("equivalent: with nothing dropped every epoch's look-up is empty and nothing is returned, as before; with "
         "partitions dropped the protocol always sets committed_files (only it sets dropped)"),
    "targets/db_claims.py:lost_partitions:NumberReplacer:749e444a86":
        ("equivalent: epoch 0 is reached only when no earlier epoch is COMMITTED, and the log has no epoch 0 "
         "(committed_files: None, not COMMITTED): nothing is returned, as before"),
    "targets/db_claims.py:_same_partitions:ReplaceBreakWithContinue:b8ea4eeb6e":
        ("equivalent: it may yield one of our partitions more than once (each interval holding an equal one), "
         "and every caller takes the first (the refusal) or the set of our partitions (a lost marker's)"),
    "targets/sql_dialects.py:raise_on_warnings:NumberReplacer:411ac52253": ONE_COLUMN,  # SELECT @@warning_count
    "mysql targets/db_claims.py:_equal_values:ReplaceComparisonOperator_Eq_NotEq:ae56d7ba81":
        "equivalent in this row: MariaDB's DROP TABLE drops the session's temporary tables of those names too",
    # MariaDB's error-code sets, one code turned into its neighbour: 1054 (the target names missing columns before
    # it loads), 1264/1261 (LOAD DATA's warnings, raised by the target itself), 2013 (lost connection: PyMySQL's
    # OperationalError, 'unavailable' by type too), 1148/2068 (LOAD DATA LOCAL refused: its advice only)
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": CONFIG for h in (
        "ef83c880d4", "3780497490", "9f7941cf86", "c4bc4ae854", "2b22127964", "c11a9a30a2")},
    # the renderer's refill path (a non-empty null) in the PostgreSQL row: never taken
    **{f"postgresql targets/csv_rows.py:{k}": PG_NULL_ONLY for k in (
        "csv_chunks:ReplaceUnaryOperator_Delete_Not:14a8da801a",
        "csv_chunks:ReplaceUnaryOperator_Delete_Not:da5024239e", "csv_chunks:ReplaceAndWithOr:006874d33a")},
    # the refill substitution itself, in every row
    **{f"targets/csv_rows.py:render:{k}": ("equivalent on every pyarrow the lock pins: it has WriteOptions."
       "null_string (NATIVE_NULL_STRING), so refill is b'' for any null and the substitution never runs; the "
       "fallback for older ones is unit-tested (tests/unit)") for k in (
        "NumberReplacer:94a6c46e41", "NumberReplacer:9fe829893a", "ReplaceOrWithAnd:de74b78541")},
    "targets/database.py:DatabaseTarget:NumberReplacer:bc8ca23290": TUNING,  # the default retries, 2 -> 1
    "targets/database.py:DatabaseTarget:NumberReplacer:6e574b9b1a": TUNING,  # batch_rows
    "targets/csv_rows.py:csv_chunks:NumberReplacer:5ae022a6ee": TUNING,  # the CSV writer's batch size
    "targets/database.py:_dry_run:ReplaceComparisonOperator_Lt_LtE:9b26842475":
        ("harmless: it differs only for a check of the epoch the marker already holds (nothing left to decide), "
         "which then runs its dry run - rolled back - instead of skipping it: the same rows, the same answer"),
    "targets/database.py:_dry_run:AddNot:0cbe137f5b":
        ("equivalent: the overlap check only applies to replace by interval column, where _reserve checks a "
         "first publish's overlap again under the table's lock before the decision (refused there all the same); "
         "a reprocess's check finds nothing, as two overlapping intervals never both hold markers"),
    "targets/database.py:_publish_once:NumberReplacer:40fc6030c1":
        "equivalent: `newest` is only compared as `newest > txn.epoch`, and every epoch is >= 1: 0 and 1 alike",
    "targets/database.py:_check_landed:ReplaceComparisonOperator_Lt_LtE:7ad40c0334":
        "equivalent: the message is chosen only when the counts differ, where < and <= agree",
    "targets/database.py:_batches:NumberReplacer:1d1ac25755": "equivalent: `counted` is a one-element list",
    "targets/database.py:_load:ReplaceFalseWithTrue:4ccd315e5a":
        "equivalent: refuse_outside's 'unchecked' flag is set but never read (the landing check runs anyway)",
    "targets/db_claims.py:reserve:ReplaceComparisonOperator_Gt_GtE:b4a99cd45e":
        ("equivalent: a reservation at our own epoch was made by a check of the same sealed version against the "
         "same marker (only this interval's publish moves it, and then nothing is reserved): the same one"),
    **{f"targets/db_retries.py:with_retries:{k}": TUNING  # the backoff
       for k in ("ReplaceBinaryOperator_Mul_Div:817bd976a3", "NumberReplacer:ea263f3b0c")},
    "targets/db_retries.py:rollback_quietly:ReplaceComparisonOperator_IsNot_Is:2df0101992":
        ("equivalent: the connection is closed right after (finally), and the server rolls back a closed "
         "session's transaction, releasing its locks and temporary tables"),
    # session 28: the MariaDB row's last survivors. Codes PyMySQL's own class already classifies the same way:
    # 1263 (NULL into NOT NULL: a DataError, 'schema'), 1927/1928 (connection killed / internal error), 2002/2003
    # (cannot connect), 2006/2007 (server gone): OperationalErrors, 'unavailable'; 2067/2068 are libmysqlclient's
    # codes, which PyMySQL never raises (a refused LOAD DATA LOCAL comes from the server as 1148 or 3948)
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": (
        "equivalent: the code leaves or joins a set only to be classified the same by PyMySQL's exception class "
        "(or never raised by PyMySQL at all)") for h in ("8703dbcd0f", "6647f21854", "3a311324f3",
                                                         "c29479c0f4", "7bc0435c05", "826c77065c", "6176c0d7c9",
                                                         "40159adba9", "2d62a36c49", "fd34c1e05c",
                                                         # session 29 (the set's lines as they are now): 2014
                                                         # (commands out of sync: PyMySQL's OperationalError) made
                                                         # 2015 or 2013; 1263 made 1262 (a DataError)
                                                         "809767bfe3", "119bf85de4", "2f9bd57984",
                                                         # checked by classifying every code of the three sets and
                                                         # the neighbour with and without the change (the same
                                                         # answers): 1366->1367, 1264, 1265, 1451 dropped, 2055->2054
                                                         "3fae6f756c", "ef943360ba", "5eb7965470", "d5034c998c",
                                                         "c2be66aa96")},
    # 1364 (a NOT NULL column without a default the rows do not fill) comes as a LOAD DATA warning, which the
    # target raises itself (SHOW WARNINGS): made 1363
    "mysql targets/sql_dialects.py:-:NumberReplacer:62047662f0": CONFIG,
    # session 29, more of the code sets, each classified with and without the change: the codes that then differ
    # are LOAD DATA warnings the target raises itself (1261, 1262, 1292, 1364) or ones the target's statements
    # never meet as errors (1061 a duplicate index name, 1260 GROUP_CONCAT, 1266 another storage engine, 1293, 1365)
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": CONFIG
       for h in ("b2f1de855b", "041a248920", "9383f41061", "7c12389912", "3b7252eca7", "c206c844bd",
                 # the removed code classified alike by its class; only a neighbour joins 'schema': 1145, 1405,
                 # 1049 (an unknown database: refused instead of retried), 1047, 1450, 1453
                 "e129ecadbc", "2fe0f802f5", "8e25ca3e35", "58cd294f53", "7e8fb5dca2", "e664ebe4bf")},
    "mysql targets/sql_dialects.py:Dialect:ReplaceFalseWithTrue:fc980d6b0a":
        "equivalent in this row: MySQL sets its own case_insensitive_columns (True); only PostgreSQL inherits this",
    "targets/sql_dialects.py:load:ReplaceTrueWithFalse:1a17b94a23":
        ("harmless: the load removes the temporary directory it made either way; only a failure to remove it "
         "would then raise instead of leaving it behind"),
    "mysql targets/sql_dialects.py:identity:NumberReplacer:63ea3a106d": ONE_COLUMN,  # SELECT COALESCE(%s, DATABASE())
    "targets/sql_dialects.py:connect:NumberReplacer:a0847eb947": TUNING,  # connect_timeout 10 -> 9
    "mysql targets/db_retries.py:error:AddNot:89d5133374":
        ("harmless in this row: a MariaDB error carries no hint (the class-53 hints are PostgreSQL's), so the "
         "message only gains '; None' - the text, not what is retried or refused"),
    "mysql targets/db_claims.py:whereabouts:NumberReplacer:6401ec98c3":
        ("harmless in this row: MariaDB has no server_uuid row, so the default pair names the server: None instead "
         "of '-', alike in every binding this code records and compares; a binding an older release wrote would "
         "read as another database - refused as another owner's location, nothing published"),
    "mysql targets/db_claims.py:lock_table:NumberReplacer:b74d865c35":
        "equivalent in this row: MariaDB's lock query (SELECT GET_LOCK(...)) returns one column, so [-1] is [0]",
    "mysql targets/db_claims.py:_equal_values:AddNot:c230013c77":
        "equivalent in this row: MariaDB's DROP TABLE drops the session's temporary tables of those names too",
    # (2003->2002, 2006->2007, 1146->1147: no such table, a ProgrammingError; 1927->1926; 1062->1063: a
    # duplicate key, and 1452->1451 a missing referenced row, IntegrityErrors; 2055->2056: libmysqlclient's)
    "targets/sql_dialects.py:raise_on_warnings:ReplaceOrWithAnd:4c81e23ad3":
        ("equivalent: the session records no notes (sql_notes 0, set at connect), so what SHOW WARNINGS lists is "
         "warnings and errors, and its first rows are there exactly when the count is not 0"),
    # 1261 (LOAD DATA: too few fields) is a LOAD DATA warning the target raises itself (SHOW WARNINGS)
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": CONFIG  # 1262 too (too many fields), and 1136
       for h in ("a75f55adc6", "a75a9c3952", "77824dc8bf", "9357c26d44")},  # (a column count: the target's
    # statements never); 1143, a column's privilege: PyMySQL's OperationalError, retried, then unavailable
    **{f"mysql targets/sql_dialects.py:-:NumberReplacer:{h}": (  # 1142 -> 1143, 1142 -> 1141
        "harmless: 1142 (a command denied on a table) then reaches classify as a ProgrammingError: a schema "
        "refusal instead of a privilege one - rolled back, nothing published, only the advice differs")
       for h in ("264333221f", "ff9e2ae33c")},
    **{f"targets/sql_dialects.py:exact_names:NumberReplacer:{h}": ONE_COLUMN for h in ("d731e522d8", "e5f45e7901")},
    "targets/sql_dialects.py:upsert_sql:NumberReplacer:116c42328d":
        ("equivalent: when every column is a key, the no-op update assigns one key column to itself, or two: the "
         "same row either way"),
    # MySQL 8's 3948 (LOAD DATA LOCAL disabled; MariaDB says 1148): a misclassified one only loses its advice
    "mysql targets/sql_dialects.py:-:NumberReplacer:076ab8040c": CONFIG,
    "targets/sql_dialects.py:table_info:NumberReplacer:3d71a95242":
        "equivalent: a TableInfo's column types are never read (its column names are: `column`, the messages)",
    **{f"mysql targets/csv_rows.py:csv_chunks:{k}": (
        "equivalent: MariaDB's null ('NULL') is then put into the empty fields after rendering instead of by "
        "pyarrow's null_string: the same bytes (tests/unit/test_targets_config.py renders both ways and compares)")
       for k in ("ReplaceUnaryOperator_Delete_Not:da5024239e", "ReplaceAndWithOr:006874d33a")},
    "mysql targets/database.py:_ts:AddNot:7fada919e7":
        ("equivalent in this row: an Interval's instants are UTC already, and PyMySQL renders an aware datetime by "
         "its wall clock (converters.escape_datetime drops tzinfo): the same literal either way"),
    "targets/db_claims.py:_taken:ReplaceAndWithOr:f9b85ae576":
        ("equivalent: a marker of epoch > 0 was written by a publish's UPDATE, which sets its partitions (the "
         "column exists since the first release), and a row of epoch 0 holds none"),
}
