"""A token tree's attention over a cache: each node's position and what it may see (its ancestors and the
prefix). The runtime feeds a tree in one forward with this mask; the trees themselves live in ``specviz.trees``."""
from __future__ import annotations

import numpy as np
import torch


def tree_attention(start: int, n_prefix: int, parents: list[int], first: int, device=None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (n,) and visibility (n, start + n) of a forward that appends n_prefix tokens to a cache of
    ``start`` positions and then tree nodes first, first + 1, ... of ``parents`` (every node's parent, -1: the
    last prefix token): prefix tokens see what comes before them; node i sees the prefix and its ancestors, at
    position (prefix length) + depth(i). Nodes before ``first`` are already cached, after the prefix."""
    nodes = len(parents) - first
    base = start + n_prefix - first  # the slot of node 0 (a prefix starts a new tree: first = 0)
    end = start + n_prefix + nodes
    ancestors = np.zeros((len(parents), len(parents)), dtype=bool)  # row i: node i and its ancestors
    depth = np.zeros(len(parents), dtype=np.int64)
    for i, parent in enumerate(parents):  # parents come before their children
        if parent >= 0:
            ancestors[i] = ancestors[parent]
            depth[i] = depth[parent] + 1
        ancestors[i, i] = True
    visible = np.zeros((n_prefix + nodes, end), dtype=bool)  # built in numpy: a few microseconds, not a hundred
    visible[:n_prefix] = np.tri(n_prefix, end, start, dtype=bool)
    visible[n_prefix:, :base] = True
    visible[n_prefix:, base:] = ancestors[first:]
    positions = np.concatenate([np.arange(start, start + n_prefix), base + depth[first:]])
    return torch.from_numpy(positions).to(device), torch.from_numpy(visible).to(device)
