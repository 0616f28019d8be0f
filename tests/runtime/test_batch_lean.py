"""Batched decoding on the lean forward's C layers (specviz.runtime.batch_lean): which models take it and which stay on
transformers' DynamicCache (and the trace says which); every row's logits the bits of its single-prompt lean run
through feed, extend, rollback, rows leaving and the cache growing; batched runs equal to their single-prompt runs
token for token (greedy and sampled, with the recorded probabilities), their rows' law exact; the C entry
(native.layers_rows) refusing each wrong argument before a pointer reaches C, and its rows equal to torch's layers."""
import copy
from contextlib import nullcontext

import pytest
import torch

from specviz import DecodeConfig, autoregressive_generate, speculative_generate
from specviz.batch import BatchDecoding, autoregressive_generate_batch, speculative_generate_batch
from specviz.runtime import lean_llama, lm, native
from specviz.runtime.batch_lean import LeanBatchLM
from specviz.runtime.batch_lm import BatchLM
from specviz.runtime.lm import CachedLM
from tests.helpers.models import gqa_llama, perturbed, reference_greedy, tiny, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs

pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")

F32 = dict(dtype=torch.float32, device="cpu")
TARGET = gqa_llama(seed=3, dtype=torch.float32, layers=3, sharpen=30)  # 3 query heads per key/value head
DRAFT = perturbed(TARGET, 0.3)


def prompts_of(*lengths, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)  # no id 0: generate() would take it for padding
    return [torch.randint(1, vocab, (1, n), generator=g) for n in lengths]


PROMPTS = prompts_of(3, 7, 12, 5, 9)


def decided(trace):  # what a trace decided (timings differ run to run)
    return [(r.k, r.drafted, r.n_accepted, r.emitted, r.resampled, r.bonus) for r in trace.rounds]


# -- which forward ---------------------------------------------------------------------------------------------------
def test_float32_llama_family_models_take_the_lean_rows_and_the_trace_says_so():
    assert type(BatchLM(TARGET, 2)) is LeanBatchLM
    (trace,) = autoregressive_generate_batch(TARGET, PROMPTS[:1], DecodeConfig(max_new_tokens=2, temperature=0))
    assert trace.forward == "lean-c"


@pytest.mark.parametrize("why", ["float64", "gpt2", "native disabled", "SPECVIZ_FORWARD=dynamic"])
def test_other_models_and_switches_stay_on_the_dynamic_cache(why, monkeypatch):
    model = {"float64": gqa_llama(), "gpt2": tiny_gpt2()}.get(why, TARGET)
    if why == "SPECVIZ_FORWARD=dynamic":
        monkeypatch.setenv(lm.PATH_ENV, "dynamic")
    with native.disabled() if why == "native disabled" else nullcontext():
        assert type(BatchLM(model, 2)) is BatchLM and BatchLM(model, 2).forward_name == "dynamic"
        (trace,) = autoregressive_generate_batch(model, PROMPTS[:1], DecodeConfig(max_new_tokens=2, temperature=0))
    assert trace.forward == "dynamic"


# -- the rows' logits against single runs, bit for bit ---------------------------------------------------------------
def single(model, ids: list[int], new: list[int] = ()) -> torch.Tensor:
    """The logits after ids[-1] and after each of new, from a fresh single-prompt lean run."""
    return CachedLM(model, "lean").extend(list(ids), list(new))


@pytest.mark.parametrize("family", ["llama-gqa", "qwen3", "qwen3-bias", "phi3-partial-rotary"])
def test_every_row_is_the_bits_of_its_single_run_through_feed_rollback_rows_leaving_and_growth(family):
    model = TARGET if family == "llama-gqa" else tiny(family, seed=2).float()
    rows = BatchLM(model, 3)
    assert isinstance(rows, LeanBatchLM)
    a, b, c = [1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11]
    out = rows.feed([a, b, c])  # ragged: right-aligned, as BatchLM's
    for s, ids in enumerate((a, b, c)):
        assert torch.equal(out[s, -len(ids):], CachedLM(model, "lean").feed(ids))
    got = rows.extend([(a + [5], [6, 7]), None, (c + [3, 4], [])])  # drafts of row 0; row 1 left out
    assert torch.equal(got[0], single(model, a + [5], [6, 7])) and got[1] is None
    assert torch.equal(got[2], single(model, c + [3, 4]))
    got = rows.extend([(a + [5, 9], [1]), (b, [2]), (c + [3, 4, 7], [])])  # row 0 rejected 6, 7: overwritten
    assert torch.equal(got[0], single(model, a + [5, 9], [1])) and torch.equal(got[1], single(model, b, [2]))
    assert rows.ids == [a + [5, 9, 1], b + [2], c + [3, 4, 7]]
    assert rows.mask.sum(1).tolist() == [6, 8, 4]  # no holes: each row's tokens, nothing else
    rows.keep_rows([2, 0])  # row 1 finished
    got = rows.extend([(c + [3, 4, 7], [8]), (a + [5, 9, 1], [2])])
    assert torch.equal(got[0], single(model, c + [3, 4, 7], [8])) and torch.equal(got[1], single(model, a + [5, 9, 1], [2]))
    long = c + [3, 4, 7, 8] + [t % 60 + 1 for t in range(130)]  # past the first capacity of 64 positions a row
    got = rows.extend([(long, []), (a + [5, 9, 1, 2], [3])])
    assert rows.capacity >= len(long)
    assert torch.equal(got[0], single(model, long)) and torch.equal(got[1], single(model, a + [5, 9, 1, 2], [3]))


def test_a_timed_pass_is_rolled_back_exactly():
    rows = BatchLM(TARGET, 2)
    rows.feed([[1, 2, 3], [4, 5, 6]])
    before = rows.feed([[7], [8]])[:, -1].clone()
    rows.drop_last(1)
    rows.feed([[9, 10, 11]] * 2)
    rows.drop_last(3)
    assert torch.equal(rows.feed([[7], [8]])[:, -1], before)
    rows.feed([[1, 2], [3]])
    with pytest.raises(ValueError, match="newest"):  # row 1 took one token only
        rows.drop_last(2)


def test_one_c_call_a_pass_for_every_row_and_no_padding(monkeypatch):
    calls = []
    real = native.layers_rows
    monkeypatch.setattr(native, "layers_rows", lambda x, *a, **k: calls.append(x.shape[0]) or real(x, *a, **k))
    autoregressive_generate_batch(TARGET, PROMPTS, DecodeConfig(max_new_tokens=12, temperature=0))
    assert calls == [sum(p.shape[1] for p in PROMPTS)] + [len(PROMPTS)] * 11  # the prefill, then a row a token


# -- batched runs against single runs --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_rows_equal_their_single_prompt_greedy(k):
    cfg = DecodeConfig(k=k, max_new_tokens=30, temperature=0)
    traces = speculative_generate_batch(TARGET, DRAFT, PROMPTS, cfg)
    for ids, trace in zip(PROMPTS, traces):
        assert trace.forward == "lean-c" and trace.new_tokens == reference_greedy(TARGET, ids, 30)
        assert decided(trace) == decided(speculative_generate(TARGET, DRAFT, ids, cfg))
    uneven = [len({t.rounds[i].n_accepted for t in traces}) > 1 for i in range(min(len(t.rounds) for t in traces))]
    assert k == 1 or sum(uneven) >= 3  # rows advanced unevenly: rollbacks by position were exercised
    ar = autoregressive_generate_batch(TARGET, PROMPTS, DecodeConfig(max_new_tokens=30, temperature=0))
    assert [t.new_tokens for t in ar] == [t.new_tokens for t in traces]


@pytest.mark.slow
def test_sampled_rows_reproduce_single_prompt_traces_bit_for_bit():
    cfg = DecodeConfig(k=3, max_new_tokens=25, seed=10, draft_stop=0.5)
    traces = speculative_generate_batch(TARGET, DRAFT, PROMPTS, cfg)
    for b, (ids, trace) in enumerate(zip(PROMPTS, traces)):
        one = speculative_generate(TARGET, DRAFT, ids, DecodeConfig(**{**cfg.to_dict(), "seed": cfg.seed + b}))
        assert decided(trace) == decided(one)
        assert all(r.p == s.p and r.q == s.q and r.u == s.u for r, s in zip(trace.rounds, one.rounds))  # same bits
    ar = autoregressive_generate_batch(TARGET, PROMPTS, DecodeConfig(max_new_tokens=20, seed=3))
    for b, (ids, trace) in enumerate(zip(PROMPTS, ar)):
        assert trace.new_tokens == autoregressive_generate(TARGET, ids, DecodeConfig(max_new_tokens=20, seed=3 + b)).new_tokens


@pytest.mark.slow
def test_caches_equal_full_recompute_after_rejections_and_row_drops():
    run = BatchDecoding(TARGET, perturbed(TARGET, 0.5), PROMPTS, DecodeConfig(k=4, max_new_tokens=40))
    rejected, sizes = 0, []
    for rounds in run:
        rejected += sum(r is not None and r.rejected for r in rounds)
        sizes.append(len(run.live))
    assert rejected >= 6 and min(sizes) < len(PROMPTS)
    for rows in (run.target, run.draft_lm):
        assert isinstance(rows, LeanBatchLM) and len(rows.ids) == len(run.live)
        outs = rows.extend([(run.committed[b], []) for b in run.live])
        for s, b in enumerate(run.live):
            torch.testing.assert_close(outs[s][-1], single(rows.model, run.committed[b])[-1], rtol=0, atol=0)


V = 8
LAW_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5).float()
LAW_DRAFT = perturbed(LAW_TARGET, 0.5)
LAW_REFERENCE = copy.deepcopy(LAW_TARGET).double()  # the exact law in float64 (float32's sums miss 1 by ~1e-7)


@pytest.mark.law
@pytest.mark.slow
def test_each_row_is_lossless_on_the_lean_rows():
    """Chi-square of each row's first two tokens against the target's exact law (false-fail rate 1e-3 a prompt)."""
    prompts = [torch.tensor([[1, 2, 1]]), torch.tensor([[3, 1, 4, 1, 5, 2, 6]]), torch.tensor([[7]])]
    cfg, runs = DecodeConfig(k=2, max_new_tokens=3), 600
    assert type(BatchLM(LAW_TARGET, 1)) is LeanBatchLM
    traces = seeded_runs(LAW_TARGET, LAW_DRAFT, prompts, cfg, runs * len(prompts))
    for b, prompt in enumerate(prompts):
        rows = traces[b::len(prompts)]
        assert 10 < sum(t.rounds[0].rejected for t in rows) < runs - 10
        assert chi2_pvalue(first_two_counts(rows, V), exact_first_two(LAW_REFERENCE, prompt, cfg)) > 1e-3


# -- the C entry's boundary ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lean():
    rows = LeanBatchLM(TARGET, 2)
    rows.kv.zero_()  # every slot a pass may attend to holds numbers
    return rows


def valid(rows) -> dict:
    """native.layers_rows' arguments: two sequences (2 rows in region 0, 1 row in region 1), with the head."""
    cap, w = rows.capacity, rows.w
    x = torch.randn(3, rows.dims.d, generator=torch.Generator().manual_seed(0), **F32)
    return dict(x=x, slots=torch.tensor([4, 5, cap + 2]), first=torch.tensor([0, 0, cap]),
                positions=torch.tensor([4, 5, 2]), stack=rows._c_stack(), dims=rows.dims, cos=rows.cos, sin=rows.sin,
                head=(w.norm, w.head_t, w.head_b, 0))


WRONG = {
    "x float64": (lambda r, a: dict(x=a["x"].double()), "x must be float32"),
    "x of another width": (lambda r, a: dict(x=torch.zeros(3, r.dims.d + 1, **F32)), r"x must be of shape"),
    "x without rows": (lambda r, a: dict(x=torch.zeros(0, r.dims.d, **F32)), "x has no rows"),
    "slots too few": (lambda r, a: dict(slots=torch.tensor([4, 5])), r"slots must be a tensor of shape \(3,\)"),
    "slots floats": (lambda r, a: dict(slots=torch.tensor([4.0, 5.0, 6.0])), "slots must be integers"),
    "a slot past the cache": (lambda r, a: dict(slots=torch.tensor([4, 5, 2 * r.capacity])), "slots must lie in"),
    "a slot negative": (lambda r, a: dict(slots=torch.tensor([-1, 5, r.capacity + 2])), "slots must lie in"),
    "first past the slot": (lambda r, a: dict(first=torch.tensor([0, 6, r.capacity])), "first slot must lie"),
    "first not a tensor": (lambda r, a: dict(first=[0, 0, r.capacity]), "first must be a tensor"),
    "slots out of order": (lambda r, a: dict(slots=torch.tensor([5, 4, r.capacity + 2])), "slots in order"),
    "positions negative": (lambda r, a: dict(positions=torch.tensor([4, -1, 2])), "positions must lie in"),
    "positions past the tables": (lambda r, a: dict(positions=torch.tensor([4, 5, r.capacity])), "positions must lie in"),
    "positions bool": (lambda r, a: dict(positions=torch.ones(3, dtype=torch.bool)), "positions must be integers"),
    "cos of another rot": (lambda r, a: dict(cos=r.cos[:, :-2].contiguous()), "cos must be of shape"),
    "head first past the rows": (lambda r, a: dict(head=(*a["head"][:3], 3)), "first must be a row"),
    "dims not the stack's": (lambda r, a: dict(dims=native.Dims(r.dims.d, r.dims.nh, r.dims.nkv, r.dims.hd,
                                                                  2 * r.dims.inter, r.dims.rot, r.dims.eps,
                                                                  r.dims.scale)), "the stack was built for dims"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_the_rows_entry_refuses_a_wrong_argument_and_writes_nothing(lean, case):
    change, says = WRONG[case]
    args = valid(lean)
    args.update(change(lean, args))
    caches = lean.kv.clone()
    with pytest.raises(ValueError, match=says):
        native.layers_rows(**args)
    assert torch.equal(lean.kv.view(torch.int32), caches.view(torch.int32))  # nothing reached C
    h, logits = native.layers_rows(**valid(lean))  # and the next right call still runs
    assert h.shape == (3, lean.dims.d) and logits.shape == (3, lean.w.head_t.shape[1])


def test_a_right_call_matches_the_torch_layers_of_each_sequence(lean):
    """Each sequence's rows against torch's layers (``LeanLlama._torch_layers``) over that sequence's region alone."""
    args = valid(lean)
    h, _ = native.layers_rows(**args)
    reference = lean_llama.LeanLlama(TARGET)
    cap, layers = lean.capacity, len(lean.w.blocks)
    for rows, region, start in ((slice(0, 2), 0, 4), (slice(2, 3), 1, 2)):
        kv = lean.kv.view(layers, lean.kv.shape[1], 2, cap, lean.hd)[:, :, region].clone()  # its region, written
        kv[:, :, start:] = 0  # the torch layers write these rows' keys and values again
        reference.kv[:, :, :cap] = kv
        x = reference._torch_layers(args["x"][rows], start, list(zip(reference.w.blocks, reference.kv)), None, None)
        want = lean_llama.rms_norm(x, lean.w.norm, reference.eps)
        torch.testing.assert_close(h[rows], want, atol=2e-5, rtol=1e-4)
