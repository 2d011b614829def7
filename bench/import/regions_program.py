"""A real program whose every region lies inside one region open for its whole run (docs/
trace-schema.md, "Import memory"): python3 inserting N rows into an in-memory sqlite3 table, each
insert in a region "step", every other one with a query in a region "query", all inside "main".

    oslens record --no-kernel --no-import --on-full block -o T -- python3 bench/import/regions_program.py N
    /usr/bin/time -v oslens import --force T        # peak RSS; regions: N step, N/2 query, 1 main
"""
import sqlite3, sys, oslens
n = int(sys.argv[1])
with oslens.region("main"):
    db = sqlite3.connect(":memory:")
    db.execute("create table t (k integer primary key, v text)")
    for i in range(n):
        with oslens.region("step"):
            db.execute("insert into t values (?, ?)", (i, str(i)))
            if i % 2:
                with oslens.region("query"):
                    db.execute("select v from t where k = ?", (i // 2,)).fetchone()
print(db.execute("select count(*) from t").fetchone()[0])
