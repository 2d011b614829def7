"""Phase analysis (Krintz & Wolski): the program's run cut into wall-clock intervals, each described
by vectors (code from IP samples, resources from kernel events, regions), compared by Manhattan
distance, segmented at change points and clustered into a few recurring phases. See docs/phases.md.

One concern per module: grid (the intervals), binning (time and counts per interval), code,
resources, regions (the three vectors), vectors (weights, assembly), similarity (the matrix),
segment (change points, clustering, labels), render (PNG/SVG), tables (the Arrow tables),
analyse (the whole pipeline)."""
