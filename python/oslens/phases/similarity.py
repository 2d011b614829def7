"""The similarity matrix (Krintz & Wolski, Figure 1): the Manhattan distance between every pair of
intervals. Runs with more than MAX_SIDE intervals are drawn from blocks of consecutive intervals
(their mean vectors), so the matrix stays small enough to draw and to compute in milliseconds."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

MAX_SIDE = 600


def block_means(x: np.ndarray, max_side: int = MAX_SIDE) -> tuple[np.ndarray, int]:
    """(mean vectors of blocks of consecutive rows, rows per block) with at most max_side blocks."""
    n = len(x)
    per = max(1, -(-n // max_side))
    if per == 1:
        return x, 1
    m = n // per
    head = x[: m * per].reshape(m, per, x.shape[1]).mean(axis=1)
    if n % per:
        head = np.vstack([head, x[m * per:].mean(axis=0, keepdims=True)])
    return head, per


def manhattan(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """Pairwise Manhattan distances between the rows of x (and of y)."""
    if x.shape[1] == 0:
        return np.zeros((len(x), len(x if y is None else y)))
    return cdist(x, x if y is None else y, metric="cityblock")


def similarity(x: np.ndarray, max_side: int = MAX_SIDE) -> tuple[np.ndarray, int]:
    """(distance matrix of the intervals or their blocks, intervals per row)."""
    blocks, per = block_means(x, max_side)
    return manhattan(blocks), per
