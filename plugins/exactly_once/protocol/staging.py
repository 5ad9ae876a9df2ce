"""What becomes of a committed transaction's staging once its version is published."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..records.manifest import Manifest

if TYPE_CHECKING:
    from ..ids import TxnRef
    from .sinkview import SinkView


def retire_staging(sink: "SinkView", txn: "TxnRef", manifest: Manifest) -> None:
    """After the publish: the staged data goes (the target holds its own copy) and the rest of the
    staging - state, counts - becomes the checkpoint. A target that publishes the sealed files in place
    (a Delta table: they are the live files) keeps them; only the manifest's extras move, file by file,
    without listing the data. A target that replaces rows in place (database, Redis:
    ``keeps_staged_copies``) keeps the sealed files inside the checkpoint, the version's write-ahead log
    that a rollback republishes; gc removes them with the checkpoint, after the grace period.
    Idempotent (a crash midway is finished by the next call)."""
    st = sink.storage
    if not sink.target.publishes_in_place:
        keep = sink.target.keeps_staged_copies
        if not (keep and sink.data_dir(txn) == sink.sealed_dir(txn)):
            st.remove_tree(sink.data_dir(txn))  # S3 seals in place: there the data dir is the sealed one
        if not keep:
            st.remove_tree(sink.sealed_dir(txn))
        st.move_tree(sink.staging_dir(txn), sink.checkpoint_dir(txn))
        return
    for extra in manifest.extras:
        src, dst = st.join(sink.staging_dir(txn), extra.name), st.join(sink.checkpoint_dir(txn), extra.name)
        if not st.exists(src):
            continue  # moved by an earlier call
        st.write_atomic(dst, st.read_bytes(src))  # extras are small: state, counts, quarantine
        st.remove_tree(src)
    for top in {e.name.split("/", 1)[0] for e in manifest.extras if "/" in e.name}:
        path = st.join(sink.staging_dir(txn), top)
        if st.exists(path) and not st.walk_files(path):
            st.remove_tree(path)  # the dirs the extras left (local storage has directories)


def kept_copies(sink: "SinkView", txn: "TxnRef", partition: str,
                names: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """Storage paths of published ``txn``'s sealed files of ``partition`` that :func:`retire_staging` kept
    in its checkpoint (targets with ``keeps_staged_copies``), and those of them that are missing (paths
    relative to the checkpoint). None if nothing of the version's data is kept there: the target keeps
    none, gc removed the checkpoint after the grace period, or the version was published before its
    target kept staged rows (its checkpoint has no sealed data at all)."""
    st, checkpoint = sink.storage, sink.checkpoint_dir(txn)
    if not sink.target.keeps_staged_copies or not st.exists(checkpoint):
        return None
    sealed = sink.sealed_dir(txn)[len(sink.staging_dir(txn)) + 1:]  # "sealed", or "data" on S3
    if not st.exists(st.join(checkpoint, sealed)):
        return None
    paths = {n: st.join(checkpoint, sealed, partition, n) for n in names}
    return paths, [f"{sealed}/{partition}/{n}" for n, p in paths.items() if not st.exists(p)]
