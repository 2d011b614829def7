"""kernel_layout's numpy and SQL readers agree with each other and with the declaration's
meaning of a field (crates/format/src/kernel.rs)."""

import duckdb
import numpy as np

from oslens.store import kernel_layout as kl

WORDS = {
    "id": np.array([0, 1, 0xFFFFFFFF, 0x80000000, 12345], dtype=np.uint32),
    "a": np.array([0, 1, 0xFFFFFFFFFFFFFFFF, 0x8000000080000000, (7 << 32) | 0xFFFFFFFE], dtype=np.uint64),
    "b": np.array([0, 0x100, 0xFFFFFFFFFFFFFFFF, 0x0001000000000005, (120 << 32) | 1], dtype=np.uint64),
}


def test_every_field_reads_the_same_in_numpy_and_sql():
    con = duckdb.connect()
    con.execute("CREATE TABLE k (id UINTEGER, a UBIGINT, b UBIGINT)")
    con.executemany("INSERT INTO k VALUES (?, ?, ?)", [(int(i), int(a), int(b)) for i, a, b in zip(*WORDS.values())])
    for kind, decl in kl.KINDS.items():
        for name in decl["fields"]:
            sql = [v for (v,) in con.execute(f"SELECT {kl.field_sql(kind, name)} FROM k").fetchall()]
            assert kl.field_np(kind, name, WORDS).tolist() == sql, (kind, name)


def test_fields_read_their_bits_with_their_sign():
    assert kl.field_np("sched_switch", "next_tid", WORDS).tolist() == [0, 1, -1, -2147483648, -2]
    assert kl.field_np("sched_switch", "prev_pid", WORDS).tolist() == [0, 0, -1, -2147483648, 7]
    assert kl.field_np("sched_switch", "prev_prio", WORDS).tolist() == [0, 0, -1, 65536, 120]
    assert kl.field_np("sched_switch", "prev_state", WORDS).tolist() == [0, 0x100, 0xFFFFFFFF, 5, 1]
    assert kl.field_np("sys_exit", "ret", WORDS).tolist() == [0, 0x100, -1, 0x0001000000000005, (120 << 32) | 1]
    assert kl.field_np("page_fault_user", "error_code", WORDS).tolist() == [0, 0, 0xFFFF, 1, 0]
    assert kl.field_np("sample", "in_kernel", WORDS).tolist() == [0, 0, 1, 0, 0]
    assert kl.same_layout("block_rq_issue", "block_rq_complete", "dev", "sectors", "rw")
