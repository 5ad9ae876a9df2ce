"""What becomes of a committed transaction's staging once its version is published."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .manifest import Manifest

if TYPE_CHECKING:
    from .ids import TxnRef
    from .transaction import TwoPhaseCommitSink


def retire_staging(sink: "TwoPhaseCommitSink", txn: "TxnRef", manifest: Manifest) -> None:
    """After the publish: the staged data goes (the target holds its own copy) and the rest of the
    staging - state, counts - becomes the checkpoint. A target that publishes the sealed files in place
    (a Delta table: they are the live files) keeps them; only the manifest's extras move, file by file,
    without listing the data. Idempotent (a crash midway is finished by the next call)."""
    st = sink.storage
    if not sink.target.publishes_in_place:
        st.remove_tree(sink.data_dir(txn))
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
