"""Free text a person typed (the reason of a table action: the confirm step's field, or ``eo_reason`` in a
run's conf through Airflow's REST API, "Trigger w/ config" or CLI) as it is recorded and printed: one line
of printable characters. Control characters (newlines that would forge rows of ``eo history``, terminal
escape sequences), bidirectional overrides and other non-printable ones become spaces; runs of white
space one space."""
from __future__ import annotations

REASON_CHARS = 500  # the most of a reason that is kept


def one_line(text: object, limit: int | None = REASON_CHARS) -> str:
    """``text`` as one printable line, at most ``limit`` characters (None: all of it)."""
    clean = " ".join("".join(c if c.isprintable() else " " for c in str(text or "")).split())
    return clean if limit is None else clean[:limit]
