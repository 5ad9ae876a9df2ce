"""Verdicts on the Redis row's survivors, and on endpoint.py's shared with the database rows (merged into
:data:`tools.mutants_verdicts.VERDICTS`; the rules are that module's)."""
from __future__ import annotations

from tools.mutants_reasons import MESSAGE, TUNING

REDIS_VERDICTS: dict[str, str] = {
    "targets/keyvalue.py:_glob:AddNot:716f36df8b":
        ("equivalent: the namespace is an identifier ([A-Za-z0-9_]) - no glob character to escape; the partition "
         "is escaped only in the error's hint"),
    "targets/keyvalue.py:RedisTarget:NumberReplacer:19fec881fa": TUNING,
    "targets/keyvalue.py:claim:NumberReplacer:76ef3d024a": TUNING,
    "targets/keyvalue.py:_refuse_unknown_keys:NumberReplacer:502add62fd": TUNING,
    "targets/keyvalue.py:_refuse_unknown_keys:NumberReplacer:9bfce2c230": MESSAGE,
    "targets/keyvalue.py:_client:NumberReplacer:6d11366c8c": TUNING,
    "targets/keyvalue.py:-:NumberReplacer:26ab661db7": TUNING,
    "targets/keyvalue.py:claim:NumberReplacer:25a45fb0c4": TUNING,
    "targets/keyvalue.py:_client:NumberReplacer:8fc828084a": TUNING,
    "targets/keyvalue.py:_glob:ReplaceBinaryOperator_Add_Sub:ec212a5735":
        ("equivalent: the namespace is an identifier ([A-Za-z0-9_]) - no glob character to escape; the partition "
         "is escaped only in the error's hint"),
    "targets/keyvalue.py:_refuse_foreign:ReplaceComparisonOperator_LtE_Lt:9df034e7a9":
        ("equivalent: a marker always holds an epoch >= 1 (the publish writes it with the rows in one MULTI); "
         "a marker with epoch 0 never exists, so `<= 0` and `< 0` skip the same markers"),
    "targets/keyvalue.py:_refuse_foreign:NumberReplacer:96084cfd9b":
        ("equivalent: a marker always holds its epoch (the publish writes it with the rows in one MULTI); the "
         "default for a missing one is never read"),
    "targets/keyvalue.py:_refuse_evicting:ReplaceComparisonOperator_GtE_Gt:9ff7ba1b3a":
        ("harmless: TTL answers 0 only in a key's last half second; such a key is gone before the decision, and "
         "a missing marker is judged by the log's newest committed epoch (review 44 #3)"),
    "targets/keyvalue.py:_refuse_unknown_keys:NumberReplacer:e3df22ee6a":
        ("equivalent: a marker always holds its rows count (written with the epoch in one MULTI); the default "
         "is read only for an empty marker, which `not marker.get(b'epoch')` refuses either way"),
    "targets/keyvalue.py:_refuse_unknown_keys:NumberReplacer:f98c519714": MESSAGE,
    "targets/keyvalue.py:_refuse_unknown_keys:NumberReplacer:43296b13e1": MESSAGE,
    "targets/keyvalue.py:_values:ReplaceTrueWithFalse:bcb8cd3ddb":
        ("harmless: a value's JSON then lists its fields in the staged columns' order instead of sorted - the "
         "same object for every JSON reader; the marker, not the bytes, decides what is live"),
    **{f"targets/keyvalue.py:{key}": TUNING for key in (
        "-:NumberReplacer:e9a0cfdda3", "RedisTarget:NumberReplacer:9682881169", "_client:NumberReplacer:891365e730",
        "_client:NumberReplacer:4bf1e71ded", "_interval_keys:NumberReplacer:d7a808e866",
        "_interval_keys:NumberReplacer:4636a62414")},
    **{f"targets/keyvalue.py:_refuse_unknown_keys:{key}": MESSAGE for key in (
        "NumberReplacer:9ee2a503b9", "ReplaceBinaryOperator_Add_Sub:7149c48916", "NumberReplacer:d5988b95c3",
        "NumberReplacer:2b74102df3", "NumberReplacer:107d02322e", "NumberReplacer:a20485a845",
        "NumberReplacer:7f4348134e")},
    **{f"targets/keyvalue.py:{key}": ("equivalent: a marker always holds an epoch >= 1 and its rows count (the "
                                      "publish writes them in one MULTI): the defaults and the `<= 0` test differ "
                                      "only for markers that never exist")
       for key in ("_refuse_foreign:ReplaceOrWithAnd:73d177262b", "_refuse_foreign:NumberReplacer:95086c75ea",
                   "_refuse_foreign:NumberReplacer:91478ebb26", "_refuse_unknown_keys:NumberReplacer:1f6885a926",
                   "is_live:NumberReplacer:f486683c3d")},
    "targets/keyvalue.py:_refuse_unknown_keys:ReplaceUnaryOperator_Delete_Not:fac569a15e":
        ("harmless: it picks which of the two refusals before the decision says why (key set gone / keys not "
         "ours); both refuse, nothing is decided"),
    "targets/keyvalue.py:_refuse_evicting:NumberReplacer:0646955ab5":
        ("harmless: TTL answers 0 only in a key's last half second; such a key is gone before the decision, and "
         "a missing marker is judged by the log's newest committed epoch (review 44 #3)"),
    "targets/keyvalue.py:claim:ZeroIterationForLoop:3034ae6df4":
        ("harmless: the scan refuses another owner's markers from before claims at claim time; check() refuses the "
         "same marker before the decision (test_target_ownership::..._before_claims_existed_...[redis])"),
    "targets/keyvalue.py:_publish:ReplaceTrueWithFalse:2d4111a031":
        ("equivalent: the publish calls pipe.multi() itself after its WATCHes, and redis-py wraps an explicit "
         "multi() in MULTI/EXEC whatever `transaction` says"),
    "targets/keyvalue.py:RedisTarget:ReplaceFalseWithTrue:f864850a9e":
        "harmless: the owner's repr names the pipeline, sink and log URL (no credentials); never logged",
    "targets/keyvalue.py:RedisTarget:ReplaceFalseWithTrue:de46a52c13": "equivalent: two targets are never compared",
    "targets/keyvalue.py:-:ReplaceTrueWithFalse:8c8d715bf6":
        "equivalent: a RedisTarget is never mutated (dataclasses.replace makes a new one); frozen only guards",
    "targets/endpoint.py:-:ReplaceTrueWithFalse:8c8d715bf6":
        "equivalent: an Endpoint is never mutated; frozen only guards",
    "targets/endpoint.py:Endpoint:ReplaceFalseWithTrue:39e2a4defc":
        "equivalent: every Endpoint is built by resolve(), which sets tls from the URL's scheme",
    # session 28: SCAN's batch hint, and how many foreign keys one refusal names
    **{f"targets/keyvalue.py:{k}": TUNING for k in (
        "-:NumberReplacer:7661ff39b2", "_published_partitions:NumberReplacer:e72375a96c",
        "_interval_keys:NumberReplacer:f400ec05eb", "_published_partitions:NumberReplacer:c2e931210d",
        "_interval_keys:NumberReplacer:5345d2a34e", "-:NumberReplacer:982ad92876",
        "_published_partitions:NumberReplacer:f44fae5da7", "_published_partitions:NumberReplacer:0d82901f68")},
    **{f"targets/keyvalue.py:_refuse_unknown_keys:NumberReplacer:{h}":  # the "gone" message's epoch default
       "equivalent: a marker with rows has its epoch (one HSET sets both), so the default is never taken"
       for h in ("858c8c16ed", "d181d301f8")},
    **{f"{row} targets/base.py:_etag_of:ReplaceOrWithAnd:40f1e89a66":
       "equivalent in this row: its versions are staged on local disk, whose files list no ETag (files-s3's row)"
       for row in ("redis", "files-local", "delta-local", "postgresql", "mysql")},
}
