"""Batched decoding against references: each row's single-prompt decode, the target's greedy, its exact law."""
import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter, autoregressive_generate, speculative_generate
from specviz.batch import BatchDecoding, autoregressive_generate_batch, speculative_generate_batch
from specviz.drafts.drafter import draft_view
from tests.helpers.models import perturbed, reference_greedy, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs


def prompts_of(*lengths, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)  # no id 0: generate() would take it for padding (pad_token_id=0)
    return [torch.randint(1, vocab, (1, n), generator=g) for n in lengths]


SHARP_LLAMA = tiny_llama(seed=3, sharpen=30)
SHARP_GPT2 = tiny_gpt2(seed=4, sharpen=30)
PAIRS = {"llama": (SHARP_LLAMA, perturbed(SHARP_LLAMA, 0.3)), "gpt2": (SHARP_GPT2, perturbed(SHARP_GPT2, 0.3))}
PROMPTS = prompts_of(3, 7, 12)


def strip(trace):  # what a trace decided (timings differ run to run)
    return [(r.k, r.drafted, r.n_accepted, r.emitted, r.resampled, r.bonus) for r in trace.rounds]


@pytest.mark.slow
@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_rows_equal_their_single_prompt_greedy(pair, k):
    target, draft = PAIRS[pair]
    traces = speculative_generate_batch(target, draft, PROMPTS, DecodeConfig(k=k, max_new_tokens=30, temperature=0))
    for ids, trace in zip(PROMPTS, traces):
        assert trace.new_tokens == reference_greedy(target, ids, 30)
        assert trace.prompt_ids == ids[0].tolist() and trace.stop_reason == "length"
    if k == 3:  # the rows really advanced unevenly, so holes and masks were exercised
        uneven = [len({t.rounds[i].n_accepted for t in traces}) > 1 for i in range(min(len(t.rounds) for t in traces))]
        assert sum(uneven) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("pair", list(PAIRS))
def test_batch_autoregressive_greedy_equals_generate(pair):
    target, _ = PAIRS[pair]
    traces = autoregressive_generate_batch(target, PROMPTS, DecodeConfig(max_new_tokens=25, temperature=0))
    for ids, trace in zip(PROMPTS, traces):
        assert trace.new_tokens == reference_greedy(target, ids, 25)
        assert trace.mode == "autoregressive" and all(r.k == 0 and len(r.emitted) == 1 for r in trace.rounds)


@pytest.mark.slow
def test_prompt_lookup_draft_in_a_batch():
    prompts = [torch.tensor([[1, 2, 3, 1, 2]]), torch.tensor([[4, 5, 6, 7, 4, 5, 6, 8, 4, 5]])]
    traces = speculative_generate_batch(SHARP_LLAMA, PromptLookupDrafter(), prompts,
                                        DecodeConfig(k=3, max_new_tokens=20, temperature=0))
    for ids, trace in zip(prompts, traces):
        assert trace.new_tokens == reference_greedy(SHARP_LLAMA, ids, 20)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batch_of_one_equals_the_single_prompt_decoder(temperature):
    target, draft = PAIRS["llama"]
    cfg = DecodeConfig(k=3, max_new_tokens=30, temperature=temperature, seed=5)
    (batched,) = speculative_generate_batch(target, draft, PROMPTS[1:2], cfg)
    assert strip(batched) == strip(speculative_generate(target, draft, PROMPTS[1], cfg))


@pytest.mark.slow
@pytest.mark.parametrize("stop", [0.0, 0.5])
def test_sampled_rows_reproduce_single_prompt_traces_seeded_seed_plus_row(stop):
    target, draft = PAIRS["llama"]
    cfg = DecodeConfig(k=3, max_new_tokens=30, seed=10, draft_stop=stop)
    traces = speculative_generate_batch(target, draft, PROMPTS, cfg)
    for b, (ids, trace) in enumerate(zip(PROMPTS, traces)):
        single = speculative_generate(target, draft, ids, DecodeConfig(**{**cfg.to_dict(), "seed": cfg.seed + b}))
        assert strip(trace) == strip(single)
        for r, s in zip(trace.rounds, single.rounds):  # the recorded probabilities agree too
            assert r.p == pytest.approx(s.p) and r.q == pytest.approx(s.q) and r.u == s.u
    if stop:  # rows stopped drafting early on their own, as the single-prompt decoder does
        assert any(len(r.drafted) < r.k for t in traces for r in t.rounds)
    again = speculative_generate_batch(target, draft, PROMPTS, cfg)
    assert [strip(t) for t in again] == [strip(t) for t in traces]  # same seed, same traces
    ar = autoregressive_generate_batch(target, PROMPTS, DecodeConfig(max_new_tokens=20, seed=3))
    for b, (ids, trace) in enumerate(zip(PROMPTS, ar)):
        single = autoregressive_generate(target, ids, DecodeConfig(max_new_tokens=20, seed=3 + b))
        assert trace.new_tokens == single.new_tokens


# -- losslessness: each row's first two tokens follow the target's exact law ------------------------
V = 8
LOSSLESS_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5)
LOSSLESS_DRAFT = perturbed(LOSSLESS_TARGET, 0.5)
N_RUNS = 600



@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("k,extra", [(2, {}), (1, {"top_k": 5, "top_p": 0.9, "temperature": 0.8})])
def test_each_row_is_lossless(k, extra):
    prompts = [torch.tensor([[1, 2, 1]]), torch.tensor([[3, 1, 4, 1, 5, 2, 6]]), torch.tensor([[7]])]
    cfg = DecodeConfig(k=k, max_new_tokens=k + 1, **extra)
    traces = seeded_runs(LOSSLESS_TARGET, LOSSLESS_DRAFT, prompts, cfg, N_RUNS * len(prompts))  # all in one batch
    for b, prompt in enumerate(prompts):  # row (and seed) s decodes prompt s % 3: N_RUNS distinct seeds each
        rows = traces[b::len(prompts)]
        rejections = sum(t.rounds[0].rejected for t in rows)
        assert 10 < rejections < N_RUNS - 10  # both the residual and the acceptance branch are exercised
        assert chi2_pvalue(first_two_counts(rows, V), exact_first_two(LOSSLESS_TARGET, prompt, cfg)) > 1e-3


# -- caches, EOS, budget ------------------------------------------------------------------------------
def assert_caches_match_recompute(run):
    """Every live row's cached logits (both models) equal a full recompute of its committed tokens."""
    as_draft_sees = lambda ids: draft_view(ids, run.n_embed, run.vocab_size)  # noqa: E731
    for lm, visible in ((run.target, lambda ids: ids), (run.draft_lm, as_draft_sees)):
        assert lm.mask.shape[0] == len(lm.ids) == len(run.live)  # finished rows have left the batch
        outs = lm.extend([(visible(run.committed[b]), []) for b in run.live])
        for s, b in enumerate(run.live):
            c = visible(run.committed[b])
            assert lm.ids[s] == c and int(lm.mask[s].sum()) == len(c)
            with torch.no_grad():
                full = lm.model(torch.tensor([c], device=lm.device)).logits[0, -1]
            torch.testing.assert_close(outs[s][-1], full)


@pytest.mark.slow
def test_caches_equal_full_recompute_after_rejections_and_row_drops():
    target = tiny_llama(seed=3, sharpen=30)
    run = BatchDecoding(target, perturbed(target, 0.5), PROMPTS, DecodeConfig(k=4, max_new_tokens=40))
    sizes, rejected = [], 0
    for rows in run:
        rejected += sum(r is not None and r.rejected for r in rows)
        if sizes and len(run.live) < sizes[-1] and len(run.live) > 1:
            assert_caches_match_recompute(run)  # right after rows left, with more than one row still in
        sizes.append(len(run.live))
    assert rejected >= 6 and sizes[0] == len(PROMPTS) and min(sizes) < len(PROMPTS)
    assert_caches_match_recompute(run)


@pytest.mark.slow
def test_prefill_serves_the_first_round():
    """One batched prefill of the whole prompts, whose last logits give every row's first token: 10 tokens
    per row take 1 + 9 target forwards, as the single-prompt decoder's and transformers' do."""
    target = tiny_llama(seed=3, sharpen=30)
    sizes = []
    forward = target.forward
    target.forward = lambda input_ids=None, **kw: sizes.append(input_ids.shape[1]) or forward(input_ids=input_ids, **kw)
    traces = autoregressive_generate_batch(target, PROMPTS, DecodeConfig(max_new_tokens=10, temperature=0))
    assert sizes == [max(p.shape[1] for p in PROMPTS)] + [1] * 9
    assert [t.new_tokens for t in traces] == [reference_greedy(tiny_llama(seed=3, sharpen=30), ids, 10) for ids in PROMPTS]
    assert all(t.summary().target_forwards_per_token == pytest.approx(9 / 10) for t in traces)


@pytest.mark.slow
def test_eos_in_one_row_stops_that_row_only():
    target = tiny_llama(seed=3, sharpen=30)
    refs = [reference_greedy(target, ids, 30) for ids in PROMPTS]
    eos, row = next((t, b) for b, ref in enumerate(refs) for t in ref[2:]  # a token only one row ever emits
                    if all(t not in other for other in refs[:b] + refs[b + 1:]))
    target.generation_config.eos_token_id = eos
    try:
        for draft in (target, perturbed(target, 0.3)):
            cfg = DecodeConfig(k=4, max_new_tokens=30, temperature=0)
            traces = speculative_generate_batch(target, draft, PROMPTS, cfg)
            for b, (ref, trace) in enumerate(zip(refs, traces)):
                if b == row:
                    assert trace.new_tokens == ref[: ref.index(eos) + 1] and trace.stop_reason == "eos"
                else:
                    assert trace.new_tokens == ref and trace.stop_reason == "length"
            assert len(traces[row].rounds) < max(len(t.rounds) for t in traces)
    finally:
        target.generation_config.eos_token_id = None


@pytest.mark.slow
@pytest.mark.parametrize("n", [0, 1, 2, 5, 13])
def test_max_new_tokens_bound_per_row(n):
    target, draft = PAIRS["llama"]
    traces = speculative_generate_batch(target, draft, PROMPTS, DecodeConfig(k=4, max_new_tokens=n))
    for trace in traces:
        assert len(trace.new_tokens) == n and all(r.k <= 4 for r in trace.rounds)
        assert all(len(r.drafted) == r.k for r in trace.rounds)


@pytest.mark.slow
def test_traces_feed_the_frame_and_summary():
    target, draft = PAIRS["llama"]
    traces = speculative_generate_batch(target, draft, PROMPTS, DecodeConfig(k=3, max_new_tokens=20))
    for trace in traces:
        df = trace.to_frame()
        assert len(df) == sum(len(r.drafted) + (r.resampled is not None) + (r.bonus is not None) for r in trace.rounds)
        assert trace.summary().new_tokens == 20 and trace.prefill_s > 0 and trace.total_s > 0
    assert [r.target_s for r in traces[0].rounds][:3] == [r.target_s for r in traces[1].rounds][:3]  # batch timings


@pytest.mark.parametrize("args,match", [
    ((SHARP_LLAMA, None, PROMPTS, DecodeConfig()), "needs a draft"),
    ((SHARP_LLAMA, SHARP_LLAMA, [], DecodeConfig()), "non-empty list"),
    ((SHARP_LLAMA, SHARP_LLAMA, [torch.tensor([1, 2])], DecodeConfig()), "shape"),
    ((SHARP_LLAMA, SHARP_LLAMA, PROMPTS, DecodeConfig(k_policy="heuristic", k=2)), "k_policy='fixed'"),
    ((SHARP_LLAMA, SHARP_LLAMA, [torch.ones(1, 250, dtype=torch.long)], DecodeConfig()), "context window"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        speculative_generate_batch(*args)


# -- the benchmark and its figure ---------------------------------------------------------------------
@pytest.mark.slow
def test_batch_bench_counts_every_token_and_the_figure_plots_them():
    from specviz.labs.batch_bench import BATCH_COLUMNS, report, run_batch_bench
    from specviz.views.compare_plots import tokens_per_s_by_batch

    target, draft = PAIRS["llama"]
    cfg = DecodeConfig(k=2, max_new_tokens=6, temperature=0, record=False)
    frame = run_batch_bench(target, draft, PROMPTS, cfg, sizes=(1, 3), repeats=2)
    assert list(frame.columns) == BATCH_COLUMNS and len(frame) == 4
    assert sorted(frame.tokens) == [12, 12, 36, 36]  # size x max_new_tokens x repeats, no EOS
    assert (frame.tokens_per_s == frame.tokens / frame.seconds).all()
    assert "spec/AR" in report(frame)
    fig = tokens_per_s_by_batch(frame)
    assert {d.name for d in fig.data} == {"speculative", "autoregressive"}
    for d in fig.data:
        rows = frame[frame.method == d.name].sort_values("batch_size")
        assert list(d.x) == [1, 3] and list(d.y) == pytest.approx(list(rows.tokens_per_s))


@pytest.mark.slow
@pytest.mark.parametrize("draft_vocab", [60, 72])
def test_padded_vocabularies_work_over_the_shared_range(draft_vocab):
    target = tiny_llama(seed=3, sharpen=30)
    draft = tiny_llama(vocab=draft_vocab, seed=3, sharpen=30)
    traces = speculative_generate_batch(target, draft, PROMPTS, DecodeConfig(k=3, temperature=0, max_new_tokens=20))
    assert [t.new_tokens for t in traces] == [reference_greedy(target, ids, 20) for ids in PROMPTS]


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_pruned_exit_drafts_in_a_batch_of_identical_prompts(temperature):
    """A pruned head scores -inf outside its tokens by design: a batch with it runs (12 identical prompts), each row
    drawing what its single run with seed + row draws, greedy the target's own text, proposals from the pruned
    tokens only."""
    from specviz.drafts.early_exit import early_exit

    target, keep = SHARP_LLAMA, [3, 5, 9, 11, 20, 30, 34, 62]
    draft, prompt = early_exit(target, 1, vocab=keep), PROMPTS[1]
    cfg = DecodeConfig(k=3, temperature=temperature, max_new_tokens=12)
    traces = speculative_generate_batch(target, draft, [prompt] * 12, cfg)
    for row in (0, 8, 11):
        single = speculative_generate(target, draft, prompt, DecodeConfig(**{**cfg.to_dict(), "seed": row}))
        assert strip(traces[row]) == strip(single)
    assert {t for trace in traces for r in trace.rounds for t in r.drafted} <= set(keep)
    if temperature == 0:
        assert {tuple(t.new_tokens) for t in traces} == {tuple(reference_greedy(target, prompt, 12))}


@pytest.mark.slow
def test_time_axis_may_outgrow_the_window_positions_do_not():
    target = tiny_gpt2(seed=4, sharpen=30, window=48)  # 12 + 30 positions fit; the holes make the axis longer
    run = BatchDecoding(target, tiny_gpt2(seed=9, layers=1, sharpen=30), PROMPTS,
                        DecodeConfig(k=4, temperature=0, max_new_tokens=30))
    traces = run.run()
    assert run.target.mask.shape[1] > 48
    assert [t.new_tokens for t in traces] == [reference_greedy(target, ids, 30) for ids in PROMPTS]
