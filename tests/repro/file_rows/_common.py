"""Shared helpers of the file_rows reproducers (not a test)."""
import json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT), str(ROOT / "tests" / "integration"), str(ROOT / "tests")]

import pyarrow.parquet as pq  # noqa: E402


def delta_adds(table_url: str) -> dict[str, int | None]:
    """{add path: stats.numRecords} of every add action in the Delta log (newest wins)."""
    out = {}
    for f in sorted((Path(table_url) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            a = json.loads(line).get("add")
            if a:
                out[a["path"]] = json.loads(a.get("stats") or "{}").get("numRecords")
    return out


def footers(table_url: str, adds: dict[str, int | None]) -> dict[str, int]:
    from urllib.parse import unquote
    return {p: pq.ParquetFile(str(Path(table_url) / unquote(p))).metadata.num_rows for p in adds}
