"""Block verification (Sun et al. 2024, Algorithm 2; ``specviz.sampling.verify_block``): the paper's own example by
hand, the target's law kept exactly (every outcome enumerated over several rounds of a small pair of models whose
distributions depend on the context, with and without a draft that stops on its own confidence), never fewer drafts
kept in expectation than token by token, and the decoders' runs."""
import itertools

import numpy as np
import pytest
import torch

from specviz import DecodeConfig, speculative_generate
from specviz import sampling as T
from specviz.reference import speculative_decode
from tests.helpers.models import perturbed, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs

V = 3


def model(name: str, sharp: float):
    """A toy next-token law over V ids for any context: seeded by the context itself."""
    def law(prefix) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((name, *prefix)) % 2**31)
        w = torch.rand(V, generator=g, dtype=torch.float64) ** sharp
        return w / w.sum()
    return law


def round_outcomes(p_of, q_of, prefix, k, stop=0.0, stop_rule=None):
    """{tokens a round emits: probability} under ``stop_rule`` (h_i of block verification, or None: token by token),
    every draft of k tokens from q enumerated (drafting ends after a token whose q is below ``stop``), the uniforms
    integrated out exactly: the round keeps i drafts with chance h_i prod_{j > i} (1 - h_j)."""
    out = {}
    for xs in itertools.product(range(V), repeat=k):  # the tokens past a stop are summed out: their q's sum to 1
        qs = [float(q_of(prefix + list(xs[:i]))[x]) for i, x in enumerate(xs)]
        chance, m = float(np.prod(qs)), next((i + 1 for i, qi in enumerate(qs) if qi < stop), k)
        xs = xs[:m]
        p = [p_of(prefix + list(xs[:i])) for i in range(m + 1)]
        q = [q_of(prefix + list(xs[:i])) for i in range(m)]
        for n, law in kept(p, q, xs, stop_rule):
            for t in range(V):
                key = tuple(xs[:n]) + (t,)
                out[key] = out.get(key, 0.0) + chance * law[t]
    return out


def kept(p, q, xs, stop_rule):
    """[(drafts kept, chance times the law of the token drawn after them)] for one drafted block."""
    m, x = len(xs), torch.tensor(xs, dtype=torch.long)
    idx = torch.arange(m)
    pm, qm = (torch.stack(p[:m]), torch.stack(q)) if m else (torch.zeros(0, V), torch.zeros(0, V))
    if stop_rule is None:  # Leviathan: keep while u_i < min(1, p/q)
        a = torch.clamp(pm[idx, x] / qm[idx, x], max=1.0).tolist()
        out, alive = [], 1.0
        for n in range(m):
            out.append((n, alive * (1 - a[n]) * T.residual(p[n], q[n])))
            alive *= a[n]
        return out + [(m, alive * p[m])]
    w = T.block_weights(pm[idx, x], qm[idx, x])
    h = stop_rule(w, p, q)
    out = []
    for n in range(m + 1):
        chance = (h[n - 1] if n else 1.0) * float(np.prod([1 - h[j - 1] for j in range(n + 1, m + 1)]))
        out.append((n, chance * (p[m] if n == m else T.block_residual(p[n], q[n], w[n]))))
    return out


def block_h(w, p, q):
    m = len(q)
    return [T.block_stop(w[i], float((w[i] * p[i] - q[i]).clamp(min=0).sum())) for i in range(1, m)] + [w[m]]


def emitted_law(p_of, q_of, prefix, k, n, **rule):
    """P(first n tokens emitted) over as many rounds as it takes."""
    if n <= 0:
        return {(): 1.0}
    out = {}
    for em, chance in round_outcomes(p_of, q_of, prefix, k, **rule).items():
        if chance == 0:
            continue
        if len(em) >= n:
            out[em[:n]] = out.get(em[:n], 0.0) + chance
            continue
        for rest, c in emitted_law(p_of, q_of, prefix + list(em), k, n - len(em), **rule).items():
            out[em + rest] = out.get(em + rest, 0.0) + chance * c
    return out


def target_law(p_of, prefix, n):
    out = {}
    for seq in itertools.product(range(V), repeat=n):
        out[seq] = float(np.prod([float(p_of(prefix + list(seq[:i]))[t]) for i, t in enumerate(seq)]))
    return out


@pytest.mark.parametrize("k, stop", [(2, 0.0), (3, 0.0), (3, 0.3)])
@pytest.mark.parametrize("pair", [0, 1])
def test_block_verification_keeps_the_targets_law_exactly(k, stop, pair):
    p_of, q_of = model(f"p{pair}", 3.0), model(f"q{pair}", 2.0)
    want = target_law(p_of, [0], 4)
    for rule in (None, block_h):
        got = emitted_law(p_of, q_of, [0], k, 4, stop=stop, stop_rule=rule)
        assert max(abs(got.get(s, 0.0) - c) for s, c in want.items()) < 1e-12
        assert set(got) <= set(want)


def test_the_law_check_sees_a_wrong_stop_chance():
    """h_i = P_i (the weight alone, without the residual's share) keeps too many drafts: the same check fails."""
    p_of, q_of = model("p0", 3.0), model("q0", 2.0)
    want = target_law(p_of, [0], 4)
    got = emitted_law(p_of, q_of, [0], 3, 4, stop_rule=lambda w, p, q: w[1:])
    assert max(abs(got.get(s, 0.0) - c) for s, c in want.items()) > 1e-3


def expected_kept(p_of, q_of, prefix, k, stop_rule):
    return sum(chance * (len(em) - 1) for em, chance in round_outcomes(p_of, q_of, prefix, k,
                                                                      stop_rule=stop_rule).items())


def test_the_papers_example_by_hand():
    """Sun et al. 2024's first example: M_b gives a 1/3 and b 2/3, M_s the reverse, blocks of 2: token by token keeps
    10/9 drafts a round, block verification 11/9."""
    p_of = lambda prefix: torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)  # noqa: E731
    q_of = lambda prefix: torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)  # noqa: E731
    global V
    V, before = 2, V
    try:
        assert expected_kept(p_of, q_of, [], 2, None) == pytest.approx(10 / 9, abs=1e-12)
        assert expected_kept(p_of, q_of, [], 2, block_h) == pytest.approx(11 / 9, abs=1e-12)
    finally:
        V = before


@pytest.mark.parametrize("pair", range(6))
def test_block_verification_never_keeps_fewer_drafts(pair):
    p_of, q_of = model(f"p{pair}", 2.0 + pair % 3), model(f"q{pair}", 1.0 + pair % 2)
    token, block = expected_kept(p_of, q_of, [1], 3, None), expected_kept(p_of, q_of, [1], 3, block_h)
    assert block >= token - 1e-12


def test_verify_block_decides_as_its_closed_form():
    """verify_block's verdict on given draws: the longest prefix i with u_i < h_i, then the token the inverse CDF
    of its residual (or of the last p) gives at the next draw."""
    g = torch.Generator().manual_seed(0)
    for seed in range(60):
        p = torch.softmax(torch.randn(4, 7, generator=g, dtype=torch.float64) * 2, -1)
        q = torch.softmax(torch.randn(3, 7, generator=g, dtype=torch.float64) * 2, -1)
        x = torch.multinomial(q, 1, generator=g).view(-1)
        verdict = T.verify_block(p, q, x, torch.Generator().manual_seed(seed))
        replay = torch.Generator().manual_seed(seed)
        u = torch.rand(3, generator=replay, dtype=torch.float64)
        w = T.block_weights(p[torch.arange(3), x], q[torch.arange(3), x])
        h = block_h(w, list(p), list(q))
        n = max([i for i in range(1, 4) if float(u[i - 1]) < h[i - 1]], default=0)
        assert verdict.n_accepted == n and verdict.accept_prob.tolist() == pytest.approx(h)
        law = p[3] if n == 3 else T.block_residual(p[n], q[n], w[n])
        assert verdict.next_token == int(T.sample(law, replay))
        assert (verdict.residual is None) == (n == 3)


def test_block_verification_is_refused_with_a_tree_or_another_rule():
    with pytest.raises(ValueError, match="block verification takes a chain"):
        DecodeConfig(verify="block", rule="typical")
    with pytest.raises(ValueError, match="verify must be one of token, block"):
        DecodeConfig(verify="blocks")


@pytest.mark.law
@pytest.mark.slow
def test_the_decoder_with_block_verification_is_lossless_and_the_reference_agrees():
    target = tiny_llama(vocab=16, seed=11, sharpen=5)
    draft = perturbed(target, 0.5)
    prompt = torch.tensor([[1, 2, 1, 2, 1]])
    cfg = DecodeConfig(k=3, max_new_tokens=4, verify="block")
    traces = seeded_runs(target, draft, prompt, cfg, 1000)
    assert 10 < sum(t.rounds[0].rejected for t in traces) < 990
    assert chi2_pvalue(first_two_counts(traces, 16), exact_first_two(target, prompt, cfg)) > 1e-3
    for seed in range(4):
        one = DecodeConfig(k=3, max_new_tokens=12, verify="block", seed=seed)
        assert speculative_decode(target, draft, [1, 2, 1, 2, 1], one) == \
            speculative_generate(target, draft, prompt, one).new_tokens
