"""Closed forms for speculative decoding (Leviathan et al. 2023, section 3) and their estimators.

alpha = E[beta], the chance a draft is accepted (beta = sum_v min(p, q) at a position);
k = drafts per round; c = cost ratio, the time of one draft step over the time of one target
forward. Assuming acceptances are i.i.d. with probability alpha:
  expected tokens per round  E[tau] = (1 - alpha^(k+1)) / (1 - alpha)              (eq. 1)
  expected walltime speedup         = (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))   (theorem 3.8)
The theorem prices the verify pass (the target over k + 1 tokens) like a one-token forward. On a real machine it
costs v >= 1 one-token forwards (on a CPU, more rows cost more), so with a baseline run to measure the one-token
forward this module also predicts  E[tau] / (k c + v),  c and v both relative to that forward.
"""
from __future__ import annotations


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens a round emits (accepted drafts plus the resample or bonus): 1 .. k+1."""
    _check(alpha, k)
    if alpha == 1.0:  # the limit of the geometric sum: every draft accepted, plus the bonus
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: float, c: float, v: float = 1.0) -> float:
    """Predicted walltime speedup over autoregressive decoding: a round costs k draft steps (k c) plus one
    verify pass (v target forwards; Leviathan's theorem takes v = 1) and emits expected_tokens(alpha, k)."""
    if c < 0 or v <= 0:
        raise ValueError(f"need cost ratio c >= 0 and verify cost v > 0, got c={c}, v={v}")
    return expected_tokens(alpha, k) / (k * c + v)


def counts_of(run):
    """A run's ``Counts``: from a Trace, or a Counts as it is (several runs summed)."""
    return run.counts() if hasattr(run, "counts") else run


def forward_s(run) -> float:
    """Mean seconds of one target forward pass in a run (0.0 if none was timed)."""
    c = counts_of(run)
    return c.target_s / c.target_passes if c.target_passes else 0.0


def cost_ratio(trace, baseline=None) -> float:
    """c measured (``trace`` and ``baseline``: Traces, or Counts of several runs): mean draft time per drafted
    token over the time of one target forward, which is the baseline's one-token forward where a baseline run
    is given, else this run's verify pass. 0.0 if nothing was drafted or timed."""
    c = counts_of(trace)
    unit = forward_s(baseline) if baseline is not None else forward_s(trace)
    return (c.draft_s / c.drafted) / unit if c.drafted and unit else 0.0


def verify_cost(trace, baseline) -> float:
    """v measured: the run's mean verify pass over the baseline's one-token forward (1.0 if either is unknown)."""
    unit, verify = forward_s(baseline) if baseline is not None else 0.0, forward_s(trace)
    return verify / unit if unit and verify else 1.0


def mean_k(trace) -> float:
    """Mean drafts per round (k varies under an adaptive k policy; fixed k gives k itself)."""
    c = counts_of(trace)
    return c.drafted / c.rounds if c.rounds else 0.0


def measured_speedup(trace, baseline) -> float | None:
    """tokens/s of the speculative run over tokens/s of the autoregressive baseline (None if unknown)."""
    if baseline is None:
        return None
    fast, slow = trace.summary().tokens_per_s, baseline.summary().tokens_per_s
    return fast / slow if slow else None


def _check(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")


# -- token trees: the positional acceptance model (SpecInfer, Sequoia) ------------------------------------------
def sibling_ranks(parents) -> list[int]:
    """Each node's rank among its siblings (0 = its parent's first child), nodes listed parents first."""
    seen: dict[int, int] = {}
    ranks = []
    for parent in parents:
        ranks.append(seen.get(parent, 0))
        seen[parent] = ranks[-1] + 1
    return ranks


def round_tree(r) -> tuple[list[int], list[int], list[str]]:
    """(parents, depths, statuses) of a round's drafts as a tree; a chain is the tree with one child per depth."""
    if r.tree is not None:
        nodes = r.tree.nodes
        return [n.parent for n in nodes], [n.depth for n in nodes], [n.status for n in nodes]
    m, n = len(r.drafted), r.n_accepted
    return list(range(-1, m - 1)), list(range(m)), [
        "accepted" if i < n else "rejected" if i == n else "unvisited" for i in range(m)]


def positional_rates(rounds) -> dict[tuple[int, int], tuple[int, int]]:
    """(depth, rank) -> (accepted, reached) over rounds (chains and trees): a node is reached when its parent is
    on the accepted path (or is the root). accepted / reached estimates P(the rank-th child at that depth is
    accepted | its parent was)."""
    rates: dict[tuple[int, int], list[int]] = {}
    for r in rounds:
        parents, depths, statuses = round_tree(r)
        for parent, depth, rank, status in zip(parents, depths, sibling_ranks(parents), statuses):
            if parent == -1 or statuses[parent] == "accepted":
                cell = rates.setdefault((depth, rank), [0, 0])
                cell[0] += status == "accepted"
                cell[1] += 1
    return {key: (a, n) for key, (a, n) in rates.items()}


def predicted_tau(rounds) -> float:
    """Tokens per round the positional model expects for these rounds' trees (or chains), from their own
    per-(depth, rank) acceptance rates: the mean over rounds of ``expected_tree_tokens``."""
    rounds = list(rounds)
    rates = positional_rates(rounds)
    return sum(expected_tree_tokens(*round_tree(r)[:2], rates) for r in rounds) / len(rounds) if rounds else 0.0


def expected_tree_tokens(parents, depths, rates: dict[tuple[int, int], tuple[int, int]]) -> float:
    """Expected tokens of a round with this tree (parents first), assuming each node is accepted, once its
    parent is, with its position's rate and independently of the rest: 1 (the residual or bonus token) plus the
    sum over nodes of P(node on the path) = the product of the rates along its path. A chain is the tree with one
    child per depth, where this is the per-position form of Leviathan's E[tau]."""
    reach = []
    for parent, depth, rank in zip(parents, depths, sibling_ranks(parents)):
        accepted, reached = rates.get((depth, rank), (0, 0))
        rate = accepted / reached if reached else 0.0
        reach.append(rate * (1.0 if parent == -1 else reach[parent]))
    return 1.0 + sum(reach)
