"""Publish targets: the idempotent, rolled-forward publish step of a sink (DESIGN §4 "Publish targets").

The decision (the outcome record in the transaction log) is the same for every target and lives in
:mod:`exactly_once.transaction`; a target only makes a decided version live, idempotently, never going
back to an older epoch. Files: :mod:`.files` (local/POSIX) and :mod:`.s3files` (S3).
"""
from .base import PublishTarget, StagedVersion

__all__ = ["PublishTarget", "StagedVersion"]
