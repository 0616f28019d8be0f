"""specviz.slim.FeatureDraft: a feature draft (one Llama layer over the target's features, a pruned head of the
target's own rows) on the C stack's 8-bit kernels, for a GemmaSequence, on a tiny GGUF written here. Its h is the
torch FeatureHead's within 8-bit rounding, greedy speculative text equals the target's own greedy text at every k, its
sampled runs emit the target's law, its cache holds only rows of true features between rounds, and what does not fit
is refused in words before any work."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from specviz.config import DecodeConfig
from specviz.drafts.eagle import FeatureHead
from specviz.runtime import blocks
from specviz.runtime.native import gemma as native_gemma
from specviz.slim import FeatureDraft, Hybrid, Lookup, autoregressive, speculative
from specviz.slim import feature_draft as F
from tests.helpers.tiny_gguf import D, write_tiny_feature_draft, write_tiny_gemma

pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(not native_gemma.available(), reason="the C Gemma-3 pass needs AVX-512 VNNI")

IDS = [2, 9, 5, 13, 7, 4, 4, 11, 6, 14, 5]
D2T = [2, 4, 5, 6, 7, 9, 11, 12, 13, 14, 15]  # the tiny vocabulary's ids the draft can draft (2: its greedy text)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from specviz.runtime import gguf as loader

    folder, cache = tmp_path_factory.mktemp("gguf"), tmp_path_factory.mktemp("cache")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(cache))
        loader.described(folder, path.name)  # the config, as the loader caches it
    return path, cache


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A feature draft with random weights (scaled so that its q is spread), saved as the trainer saves one."""
    return write_tiny_feature_draft(tmp_path_factory.mktemp("draft"), d2t=D2T)


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """A feature draft of zero weights: h = 0, so its argmax is its first id, 2, the tiny target's greedy token."""
    return write_tiny_feature_draft(tmp_path_factory.mktemp("flat"), scale=0.0, d2t=D2T)[0]


@pytest.fixture
def seq(written, monkeypatch):
    from specviz.runtime.gemma_sequence import GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(written[1]))
    return GemmaSequence.from_gguf(written[0])


def test_features_are_the_heads_input_and_roll_back_with_the_cache(seq):
    logits = seq.decode(IDS)
    f = seq.features().copy()
    assert f.shape == (len(IDS), seq.d)
    rows = seq.embed(np.arange(seq.vocab)) / seq.scale  # the tied head's rows, dequantized
    mine = f @ rows.T
    assert np.array_equal(mine.argmax(-1), logits.argmax(-1))
    assert np.abs(mine - logits).max() < 0.05 * (logits.max() - logits.min())  # 8-bit activations in the head
    seq.crop(4)
    assert len(seq.features()) == 4
    seq.decode(IDS[4:])
    assert np.array_equal(seq.features(), f)
    with pytest.raises(ValueError, match="holds"):
        seq.features(len(IDS) + 1)


@pytest.mark.parametrize("weights, within", [("Q8_0", 0.15), ("Q5_0", 0.3)])
def test_its_h_is_the_torch_heads_within_its_rounding(seq, saved, weights, within):
    """The draft's layer in one C call (sv_draft_layer, Q8_0 or Q5_0 matrices, 8-bit x) against the torch FeatureHead
    of the weights as stored, over the same true features and embeddings, row by row and a step after."""
    from specviz.runtime.int8 import unpack

    folder, trained = saved
    head = FeatureHead(trained.config)  # the draft as stored: its matrices in 8-bit rows
    raw = load_file(str(folder / F.FILE))
    head.load_state_dict(unpack({k: v for k, v in raw.items() if k != "d2t"}), strict=False)
    seq.decode(IDS)
    n, f = len(IDS) + 1, torch.from_numpy(seq.features().copy())
    with torch.no_grad():
        theirs = head(torch.cat([torch.zeros(1, seq.d), f])[None], torch.from_numpy(seq.embed(np.asarray(IDS + [3])))[None],
                      torch.arange(n)[None], torch.ones(n, n, dtype=torch.bool).tril())[0].numpy()
    draft = FeatureDraft(seq, folder, weights=weights)
    h = draft._sync(IDS + [3])  # every committed row fed with its true feature: the last one's h
    assert len(draft.ids) == draft.kv.shape[2] == n
    for mine, want in ((h[0], theirs[-1]), (draft._layer(theirs[-1:], np.asarray([5]))[0], None)):
        if want is None:  # a drafted step: h of the last row stands in for its feature
            with torch.no_grad():
                x = torch.cat([torch.zeros(1, seq.d), f, torch.from_numpy(theirs[-1:])])[None]
                e = torch.from_numpy(seq.embed(np.asarray(IDS + [3, 5])))[None]
                want = head(x, e, torch.arange(n + 1)[None], torch.ones(n + 1, n + 1, dtype=torch.bool).tril())[0, -1].numpy()
        assert np.abs(mine - want).max() < within * np.abs(want).max()  # x and the weights rounded
        assert np.corrcoef(mine, want)[0, 1] > 0.99


def test_the_c_layer_refuses_what_does_not_fit_and_writes_nothing(seq, saved):
    import ctypes

    from specviz.runtime.native import build

    draft = FeatureDraft(seq, saved[0])
    draft._reserve(8)
    so, x, h = build.lib(), np.ones((2, 2 * D), np.float32), np.full((2, D), 7.0, np.float32)
    before = draft.cache.copy()

    def call(dims=draft.dims, layer=draft.layer, n=2, start=0, cap=draft.cache.shape[2]):
        return so.sv_draft_layer(ctypes.byref(dims), ctypes.byref(layer), x.ctypes.data, n, start,
                                 draft.cache.ctypes.data, cap, draft.cos.ctypes.data, draft.sin.ctypes.data,
                                 h.ctypes.data, 1)

    bad_dims = build.Dims(*[getattr(draft.dims, f) for f, _ in build.Dims._fields_])
    bad_dims.nkv = 1  # grouped heads: not this layer's
    short = build.DLayer(*[getattr(draft.layer, f) for f, _ in build.DLayer._fields_])
    wrong_rows = build.QMat(draft.mats["o"][1].data, draft.mats["o"][1].type, 48)
    short.o = ctypes.addressof(wrong_rows)
    for kwargs in ({"n": 0}, {"start": -1}, {"start": draft.cache.shape[2] - 1}, {"dims": bad_dims},
                   {"layer": short}):
        assert call(**kwargs) == -2, kwargs
    assert np.array_equal(h, np.full((2, D), 7.0)) and np.array_equal(draft.cache, before)
    assert call() == 0 and not np.array_equal(h, np.full((2, D), 7.0))


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("which", ["saved", "flat"])
@pytest.mark.parametrize("weights", ["Q8_0", "Q5_0"])
def test_greedy_speculative_text_is_the_targets_own(seq, saved, flat, k, which, weights):
    """A draft that is rejected at once (random weights) and one accepted every time (its argmax is the target's),
    its weights in 8 or 5 bits: the same text, and the draft's cache holds exactly the committed rows between rounds."""
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=40, k=k)
    reference = autoregressive(seq, IDS[:4], cfg).new_tokens
    draft = FeatureDraft(seq, saved[0] if which == "saved" else flat, weights=weights)
    trace = speculative(seq, draft, IDS[:4], cfg)
    assert trace.new_tokens == reference
    assert all(all(t in D2T for t in r.drafted) for r in trace.rounds)
    assert draft.kv.shape[2] == len(draft.ids) and draft.ids == (IDS[:4] + trace.new_tokens)[: len(draft.ids)]
    accepted = sum(r.n_accepted for r in trace.rounds)
    assert accepted == 0 if which == "saved" else accepted == sum(len(r.drafted) for r in trace.rounds) > 0


def test_a_hybrid_drafts_by_lookup_where_the_text_repeats_and_keeps_the_targets_greedy_text(seq, saved):
    """Lookup rounds (the tiny target's greedy text repeats) and feature-draft rounds (before it does): the target's
    own greedy text; a hybrid of something that is not a draft is refused."""
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=40, k=3)
    draft = Hybrid(Lookup(3, 2), FeatureDraft(seq, saved[0]))
    assert speculative(seq, draft, IDS[:4], cfg).new_tokens == autoregressive(seq, IDS[:4], cfg).new_tokens
    assert draft.used["lookup"] > 0 and draft.used["draft"] > 0
    with pytest.raises(ValueError, match="slim.Hybrid drafts with"):
        Hybrid(Lookup(), object())
    with pytest.raises(ValueError, match="slim.Hybrid drafts with"):
        Hybrid(Lookup(), Lookup(2, 1))


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("hybrid", [False, True])
def test_sampled_runs_emit_the_targets_law(seq, saved, hybrid):
    """Two tokens after a prompt over many seeds, k = 2: their frequencies against the law enumerated from the
    target's own logits (chi-square at the 99.99th percentile); q is a real distribution on the draft's ids (kept
    over those ids alone, the run unrecorded), or (a hybrid, recorded, after a prompt whose last token came before)
    the lookup's point mass."""
    from scipy.stats import chi2 as dist

    from specviz.slim import sampling as S

    prompt, runs, t = [2, 9, 5, 9] if hybrid else [2, 9, 5], 2500, 1.0
    law = {}
    first = S.logits_to_probs(seq.decode(prompt)[-1:], t)[0]
    for a in np.flatnonzero(first > 0):
        seq.crop(len(prompt))
        second = S.logits_to_probs(seq.decode([int(a)])[-1:], t)[0]
        law.update({(int(a), int(b)): float(first[a] * second[b]) for b in np.flatnonzero(second > 0)})
    draft, seen = FeatureDraft(seq, saved[0]), {}
    if hybrid:
        draft = Hybrid(Lookup(2, 1), draft, greedy_only=False)
    for seed in range(runs):
        cfg = DecodeConfig(seed=seed, temperature=t, max_new_tokens=2, k=2, record=hybrid)  # unrecorded: q over
        pair = tuple(speculative(seq, draft, prompt, cfg).new_tokens)  # the draft's ids (S.DraftQ) decides alone
        seen[pair] = seen.get(pair, 0) + 1
    big = [s for s in law if law[s] * runs >= 5]
    expected = [law[s] * runs for s in big] + [runs * (1 - sum(law[s] for s in big))]
    observed = [seen.get(s, 0) for s in big] + [runs - sum(seen.get(s, 0) for s in big)]
    chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, expected) if e > 0)
    assert chi2 < dist.ppf(0.9999, len(big)), chi2
    assert not hybrid or draft.used["lookup"] == runs


def test_what_does_not_fit_is_refused_in_words(seq, saved, tmp_path):
    from safetensors.numpy import load_file as load_numpy
    from safetensors.numpy import save_file

    folder = saved[0]
    with pytest.raises(ValueError, match="holds no feature draft"):
        FeatureDraft(seq, tmp_path)
    with pytest.raises(ValueError, match="GemmaSequence"):
        FeatureDraft(object(), folder)
    state = load_numpy(str(folder / F.FILE))
    for change, words in ((lambda s: s.update({"fc.weight": s["fc.weight"][:, :10]}), "fc.weight"),
                          (lambda s: s.update({"d2t": np.asarray([3, 1], np.int64)}), "ascending"),
                          (lambda s: s.update({"d2t": np.asarray([1, 99], np.int64)}), "ascending"),
                          (lambda s: s.pop("norm.weight"), "missing")):
        bad = tmp_path / words
        bad.mkdir(exist_ok=True)
        changed = dict(state)
        change(changed)
        save_file(changed, str(bad / F.FILE))
        (bad / F.CONFIG).write_text((folder / F.CONFIG).read_text())
        with pytest.raises(ValueError, match=words):
            FeatureDraft(seq, bad)
    wide = tmp_path / "wide"
    wide.mkdir()
    meta = json.loads((folder / F.CONFIG).read_text())
    save_file(state, str(wide / F.FILE))
    (wide / F.CONFIG).write_text(json.dumps({**meta, "hidden_size": 2 * D}))
    with pytest.raises(ValueError, match="fit its config"):
        FeatureDraft(seq, wide)
    with pytest.raises(ValueError, match="Q8_0 or Q5_0, not 'Q4_K'"):
        FeatureDraft(seq, folder, weights="Q4_K")
    draft = FeatureDraft(seq, folder)
    assert draft.fits(seq.vocab) is None and "tokens" in draft.fits(seq.vocab + 1)
    draft.vocab = seq.vocab + 1  # bound to another target: refused before any pass
    with pytest.raises(ValueError, match="tokens"):
        speculative(seq, draft, IDS, DecodeConfig(k=2))


def test_q8_0_rows_are_ggmls_layout():
    """A row rounded here reads back, through the gguf package's own dequantizer, within half a step of each block."""
    import gguf

    w = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    back = gguf.quants.dequantize(blocks.q8_0(w), gguf.GGMLQuantizationType.Q8_0)
    step = np.abs(w.reshape(3, 2, 32)).max(-1, keepdims=True) / 127
    assert np.all(np.abs(back.reshape(3, 2, 32) - w.reshape(3, 2, 32)) <= step * 0.5 + 1e-3 * step)


def test_twins_share_the_weights_and_keep_their_own_caches(seq, saved):
    """A twin sequence (GemmaSequence.twin) reads nothing again and starts empty; a twin draft (FeatureDraft.twin)
    shares the rounded matrices and drafts for its twin alone: two runs interleaved round by round each keep the
    target's own greedy text. A twin draft for a sequence of other weights is refused in words."""
    from specviz.runtime.gemma_sequence import GemmaSequence
    from specviz.slim import SlimDecoding

    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=14)
    want = autoregressive(seq, IDS, cfg).new_tokens
    draft = FeatureDraft(seq, saved[0])
    a, b = seq.twin(), seq.twin()
    assert a.w is seq.w and b.w is seq.w and a.length == 0 and a.kv is not seq.kv and a.limit == seq.limit
    da, db = draft.twin(a), draft.twin(b)
    assert da.mats is draft.mats and da.head is draft.head and da.length == 0 and da.ids is not draft.ids
    decodings = [SlimDecoding(a, IDS, cfg, da), SlimDecoding(b, IDS, cfg, db)]
    steps, live = [iter(d) for d in decodings], [0, 1]
    while live:  # a round of each in turn: the two caches never mix
        for i in list(live):
            if next(steps[i], None) is None:
                live.remove(i)
    assert [d.trace.new_tokens for d in decodings] == [want, want]
    with pytest.raises(ValueError, match="twin of its own target"):
        draft.twin(GemmaSequence(seq.path, seq.config))


def test_rounds_split_out_the_heads_time(seq, saved):
    """The timing chart's split for a real model: each round's verify pass gives its head's share (the C call times
    it), the draft its pruned head's; both within their parts' times. Prompt lookup times no head."""
    cfg = DecodeConfig(k=3, temperature=0.8, max_new_tokens=12, seed=1)
    trace = speculative(seq, FeatureDraft(seq, saved[0]), IDS, cfg)
    for r in trace.rounds:
        assert r.target_head_s is not None and 0 < r.target_head_s <= r.target_s
        assert (r.draft_head_s is None) if r.k == 0 else (0 < r.draft_head_s <= r.draft_s)  # k = 0: no draft
    assert any(r.k for r in trace.rounds)
    lookup = speculative(seq, Lookup(), IDS, cfg)
    assert all(r.draft_head_s is None for r in lookup.rounds)
    assert all(r.target_head_s is not None for r in lookup.rounds[1:])


def test_the_drafts_own_embeddings_and_q_over_its_ids_are_the_targets_and_the_dense_rows(seq, saved):
    """A drafted token's input embedding, read from the rows the draft keeps, is the target's lookup of the file; the
    q a sampled proposal returns over the draft's ids is, made dense, zero off them and a distribution on them; an
    unrecorded run emits what a recorded one does, seed for seed."""
    from specviz.slim import sampling as S

    draft = FeatureDraft(seq, saved[0])
    for j in (0, 1, len(draft.d2t) - 1):
        assert np.array_equal(draft._embed_own(j), seq.embed(draft.d2t[j: j + 1]))
    for ids in ([2, 15, 4], [2, 3, 4], [0], [15, 1]):  # all the draft's own, or not (3, 0, 1 are not)
        assert np.array_equal(draft._embed(np.asarray(ids)), seq.embed(np.asarray(ids)))
    seq.crop(0)
    seq.decode([2, 9, 5])  # the target's features of the committed text, as a run has them
    xs, q = draft.propose([2, 9, 5], 3, DecodeConfig(temperature=0.9, k=3, record=False), np.random.default_rng(0))
    assert isinstance(q, S.DraftQ) and len(q) == len(xs)
    rows = q.dense()
    off = np.setdiff1d(np.arange(seq.vocab), draft.d2t)
    assert (rows[:, off] == 0).all() and np.allclose(rows.sum(-1), 1.0, atol=1e-5)
    assert all(q.at(i, x) == rows[i, x] > 0 for i, x in enumerate(xs))
    for seed in range(6):
        runs = [speculative(seq, draft, [2, 9, 5], DecodeConfig(seed=seed, temperature=0.9, max_new_tokens=8, k=3,
                                                                 record=rec)).new_tokens for rec in (True, False)]
        assert runs[0] == runs[1]


@pytest.mark.parametrize("case", [dict(temperature=0.9), dict(temperature=0.7, draft_stop=0.3),
                                  dict(temperature=0.0, record=True), dict(temperature=0.0, draft_stop=0.2),
                                  dict(temperature=1.1, draft_greedy=True), dict(temperature=0.0, record=False)])
@pytest.mark.parametrize("weights", ["Q8_0", "Q5_0"])
def test_the_chain_in_c_is_the_step_loops(seq, saved, monkeypatch, case, weights):
    """sv_draft_chain against the loop a step at a time (both on C's sampling, rows of any length let through): the
    same ids, q floats, rows written into the cache and head time split out, and the generator left where the loop
    leaves it, for sampled, greedy and stopped chains."""
    from specviz.slim import sampling as S

    monkeypatch.setattr(S, "NATIVE_FROM", 4)
    draft = FeatureDraft(seq, saved[0], weights=weights)
    seq.crop(0)
    seq.decode(IDS[:5])
    cfg = DecodeConfig(k=5, **{"record": False, **case})
    need_q = cfg.record or not cfg.greedy or cfg.draft_stop > 0 or not cfg.draft_greedy
    for seed in range(8):
        got = {}
        for way in ("_steps", "_chain"):
            draft.length, draft.ids = 0, []
            h, rng = draft._sync(IDS[:5]), np.random.default_rng(seed)
            draft.cache[:, :, 5:] = 0
            idx, q = getattr(draft, way)(h, 5, cfg, rng, need_q)
            got[way] = idx, q, draft.cache[:, :, : 5 + len(idx) - 1].copy(), rng.random()
        (a, qa, ca, ua), (b, qb, cb, ub) = got["_steps"], got["_chain"]
        assert list(a) == list(b) and ua == ub and np.array_equal(ca, cb)
        assert (qa is None and qb is None) or np.array_equal(qa, qb)
        assert (qa is None) == (not need_q)


def test_the_c_chain_refuses_what_does_not_fit_and_draws_nothing(seq, saved):
    import ctypes

    from specviz.runtime.gguf_header import BLOCKS
    from specviz.runtime.native import build

    draft = FeatureDraft(seq, saved[0])
    draft._reserve(8)
    so, v, (_, head) = build.lib(), len(D2T), draft.head
    h, u = np.ones(D, np.float32), np.full(4, 0.5)
    idx, q, secs = np.full(4, -9, np.int32), np.full((4, v), 7.0, np.float32), ctypes.c_double()

    def call(k=4, start=2, inv_t=1.0, stop=0.0, greedy=0, v=v, head=head, u=u, q=q, cap=draft.cache.shape[2],
             emb_type=BLOCKS[seq.w.embed_kind][0]):
        return so.sv_draft_chain(ctypes.byref(draft.dims), ctypes.byref(draft.layer), ctypes.byref(head),
                                 draft.own_rows.ctypes.data, emb_type, float(seq.scale), v,
                                 h.ctypes.data, start, draft.cache.ctypes.data, cap, draft.cos.ctypes.data,
                                 draft.sin.ctypes.data, k, greedy, inv_t, stop, None if u is None else u.ctypes.data,
                                 idx.ctypes.data, None if q is None else q.ctypes.data, ctypes.byref(secs), 1)

    fewer = build.QMat(head.data, head.type, 16 * (v // 16 + 1))
    for kwargs in ({"k": 0}, {"start": -1}, {"start": draft.cache.shape[2] - 2}, {"inv_t": 0.0},
                   {"inv_t": float("inf")}, {"stop": 1.0}, {"stop": -0.1}, {"u": None}, {"q": None},
                   {"u": np.asarray([0.5, 1.0, 0.5, 0.5])}, {"v": v - 1}, {"head": fewer},
                   {"greedy": 1, "stop": 0.2, "q": None}, {"emb_type": 99}):
        assert call(**kwargs) == -2, kwargs
    assert (idx == -9).all() and (q == 7.0).all()
    assert 1 <= call(greedy=1, q=None, u=None) <= 4 and 0 <= idx[0] < v
