"""The decoder against references: the target's own greedy decode, its exact law, a full recompute."""
import time

import pytest
import torch

from specviz import DecodeConfig, Decoding, PromptLookupDrafter, autoregressive_generate, speculative_generate
from tests.helpers.models import perturbed, reference_greedy, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs

SHARP_LLAMA = tiny_llama(seed=3, sharpen=30)
SHARP_GPT2 = tiny_gpt2(seed=4, sharpen=30)
DRAFTS = {
    "perturbed": lambda t: perturbed(t, 0.3),
    "other-arch": lambda t: tiny_gpt2(seed=5, layers=1, sharpen=30) if isinstance(t, type(SHARP_LLAMA)) else
    tiny_llama(seed=5, layers=1, sharpen=30),
    "itself": lambda t: t,
    "prompt-lookup": lambda t: PromptLookupDrafter(),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", [SHARP_LLAMA, SHARP_GPT2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("draft", list(DRAFTS))
@pytest.mark.parametrize("k", [1, 3, 7])
def test_greedy_equals_target_greedy(target, draft, k, prompt):
    cfg = DecodeConfig(k=k, max_new_tokens=40, temperature=0)
    trace = speculative_generate(target, DRAFTS[draft](target), prompt, cfg)
    assert trace.new_tokens == reference_greedy(target, prompt, 40)
    assert [t for r in trace.rounds for t in r.emitted] == trace.new_tokens
    if draft == "itself":
        assert trace.summary().acceptance_rate == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("draft", [None, "perturbed", "prompt-lookup"])
def test_one_token_prompt(draft):
    """A prompt of one token: the prefill is that token alone, and its logits serve the first round."""
    one = torch.tensor([[5]])
    drafter = None if draft is None else DRAFTS[draft](SHARP_LLAMA)
    trace = Decoding(SHARP_LLAMA, drafter, one, DecodeConfig(k=3, max_new_tokens=20, temperature=0)).run()
    assert trace.new_tokens == reference_greedy(SHARP_LLAMA, one, 20)


@pytest.mark.slow
def test_greedy_paths_exercise_partial_acceptance(prompt):
    s = speculative_generate(SHARP_LLAMA, perturbed(SHARP_LLAMA, 0.3), prompt, DecodeConfig(k=4, temperature=0)).summary()
    assert 0.2 < s.acceptance_rate < 0.95, s  # both accepts and rejects happen, so rollback is tested


@pytest.mark.slow
def test_autoregressive_greedy_equals_generate(prompt):
    trace = autoregressive_generate(SHARP_GPT2, prompt, DecodeConfig(max_new_tokens=30, temperature=0))
    assert trace.new_tokens == reference_greedy(SHARP_GPT2, prompt, 30)
    assert all(r.k == 0 and len(r.emitted) == 1 for r in trace.rounds)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [0.3, 0.7])
def test_draft_stop_keeps_greedy_exact_and_stops_where_the_draft_doubts(stop, prompt):
    """draft_stop ends a round's drafting after the first token whose draft probability q(x) < stop
    (transformers' assistant_confidence_threshold); the output stays the target's own greedy."""
    draft = perturbed(SHARP_LLAMA, 0.5)
    trace = speculative_generate(SHARP_LLAMA, draft, prompt, DecodeConfig(k=5, temperature=0, max_new_tokens=40,
                                                                         draft_stop=stop))
    assert trace.new_tokens == reference_greedy(SHARP_LLAMA, prompt, 40)
    for r in trace.rounds:
        assert all(q >= stop for q in r.q[:-1])  # drafting went on only past confident tokens
        assert len(r.drafted) == r.k or r.q[-1] < stop  # and stopped early only at a doubtful one
    assert any(len(r.drafted) < r.k for r in trace.rounds)


# -- losslessness: the law of the first tokens equals the target's exact law ----------------------
V = 8
LOSSLESS_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5)
LOSSLESS_DRAFTS = {"gpt2": tiny_gpt2(vocab=V, seed=12, sharpen=5), "perturbed": perturbed(LOSSLESS_TARGET, 0.5),
                   "lookup": PromptLookupDrafter()}
N_RUNS = 1000



@pytest.mark.law
@pytest.mark.parametrize("k,draft,extra", [
    (1, "gpt2", {}), (2, "perturbed", {}), (2, "perturbed", {"top_k": 5, "top_p": 0.9, "temperature": 0.8}),
    (2, "lookup", {"top_k": 6}), (3, "perturbed", {"draft_stop": 0.1}),
])
@pytest.mark.slow
def test_speculative_sampling_is_lossless(k, draft, extra):
    prompt = torch.tensor([[1, 2, 1, 2, 1]])  # repeats, so prompt lookup proposes something
    cfg = DecodeConfig(k=k, max_new_tokens=k + 1, **extra)
    exact = exact_first_two(LOSSLESS_TARGET, prompt, cfg)
    traces = seeded_runs(LOSSLESS_TARGET, LOSSLESS_DRAFTS[draft], prompt, cfg, N_RUNS)  # seeds 0..N_RUNS-1
    counts = first_two_counts(traces, V)
    rejections = sum(t.rounds[0].rejected for t in traces)
    stopped = sum(len(t.rounds[0].drafted) < k for t in traces)
    assert 10 < rejections < N_RUNS - 10  # both branches (residual and acceptance/bonus) are exercised
    if cfg.draft_stop:
        assert 10 < stopped < N_RUNS - 10  # the draft stopped early in some runs, not in all
    assert chi2_pvalue(counts, exact) > 1e-3


# -- caches ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_caches_equal_full_recompute_after_rejections(prompt):
    target = tiny_llama(seed=3, sharpen=30)
    run = Decoding(target, perturbed(target, 0.5), prompt, DecodeConfig(k=4, max_new_tokens=60))
    rounds = list(run)
    assert sum(r.rejected for r in rounds) >= 3
    for lm in (run.target, run.drafter.lm):
        cached = lm.extend(run.committed, [])[-1]
        assert lm.ids == run.committed and lm.cache.get_seq_length() == len(run.committed)
        with torch.no_grad():
            full = lm.model(torch.tensor([run.committed], device=lm.device)).logits[0, -1]
        torch.testing.assert_close(cached, full)


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["none", "perturbed", "prompt-lookup"])
def test_forward_passes_are_counted_exactly(draft, prompt):
    """The target runs once for the prefill (the whole prompt, whose last logits serve the first round)
    and once per round after that: target_passes and the summary count what really ran."""
    from specviz.trace import target_passes

    target = tiny_llama(seed=3, sharpen=30)
    drafter = {"none": None, "perturbed": perturbed(target, 0.5), "prompt-lookup": PromptLookupDrafter()}[draft]
    sizes = []
    forward = target.forward
    target.forward = lambda input_ids=None, **kw: sizes.append(input_ids.shape[1]) or forward(input_ids=input_ids, **kw)
    trace = Decoding(target, drafter, prompt, DecodeConfig(k=3, max_new_tokens=20, seed=1)).run()
    assert sizes[0] == prompt.shape[1] and len(sizes) == 1 + target_passes(trace.rounds)
    assert trace.summary().target_forwards_per_token == pytest.approx((len(sizes) - 1) / 20)
    if draft == "none":
        assert sizes[1:] == [1] * 19  # the first token came from the prefill: 19 more forwards of one token


# -- determinism, EOS, budget, policies ----------------------------------------------------------
@pytest.mark.slow
def test_same_seed_same_trace(llama, prompt):
    draft = perturbed(llama, 0.5)
    cfg = DecodeConfig(k=3, max_new_tokens=30, seed=7)
    a, b = speculative_generate(llama, draft, prompt, cfg), speculative_generate(llama, draft, prompt, cfg)
    strip = lambda t: [(r.drafted, r.u, r.p, r.q, r.emitted) for r in t.rounds]  # noqa: E731 (timings differ)
    assert strip(a) == strip(b)
    c = speculative_generate(llama, draft, prompt, DecodeConfig(k=3, max_new_tokens=30, seed=8))
    assert strip(c) != strip(a)


@pytest.mark.slow
def test_stops_at_eos_and_keeps_nothing_after(prompt):
    target = tiny_llama(seed=3, sharpen=30)
    ref = reference_greedy(target, prompt, 40)
    eos = ref[9]
    target.generation_config.eos_token_id = eos
    cut = ref[: ref.index(eos) + 1]
    for draft in (target, perturbed(target, 0.3), PromptLookupDrafter()):
        trace = speculative_generate(target, draft, prompt, DecodeConfig(k=4, max_new_tokens=40, temperature=0))
        assert trace.new_tokens == cut and trace.stop_reason == "eos"
    target.generation_config.eos_token_id = None


@pytest.mark.parametrize("n", [0, 1, 2, 5, 13])
def test_max_new_tokens_bound(llama, prompt, n):
    trace = speculative_generate(llama, llama, prompt, DecodeConfig(k=4, max_new_tokens=n))
    assert len(trace.new_tokens) == n
    assert all(r.k <= 4 for r in trace.rounds)


@pytest.mark.slow
def test_history_policy_follows_the_tutorials_rule(prompt):
    t = tiny_llama(seed=3, sharpen=30)
    up = speculative_generate(t, t, prompt, DecodeConfig(k=2, k_policy="history", max_k=6, max_new_tokens=60,
                                                         temperature=0))
    assert [r.k for r in up.rounds][:5] == [2, 3, 4, 5, 6]  # all accepted: +1 a round up to max_k
    trace = speculative_generate(t, perturbed(t, 0.6), prompt, DecodeConfig(k=5, k_policy="history", max_new_tokens=80,
                                                                            temperature=0))
    k, left, recent = 5, 80, []
    for r, nxt in zip(trace.rounds, trace.rounds[1:]):  # replay the rule on the recorded rounds
        left -= len(r.emitted)
        recent = (recent + [r.n_accepted / len(r.drafted)])[-10:]
        mean = sum(recent) / len(recent)
        k = min(k + 1, 10) if mean > 0.8 else (max(k - 1, 1) if mean < 0.5 else k)
        assert nxt.k == min(k, left - 1)
    assert min(r.k for r in trace.rounds[:-1]) < 5  # the rule did move k


@pytest.mark.slow
def test_heuristic_policy_is_transformers_schedule(prompt):
    t = tiny_llama(seed=3, sharpen=30)
    trace = speculative_generate(t, perturbed(t, 0.4), prompt, DecodeConfig(k=3, k_policy="heuristic", max_k=50,
                                                                            max_new_tokens=80, temperature=0))
    left = 80
    for r, nxt in zip(trace.rounds, trace.rounds[1:]):
        left -= len(r.emitted)
        expected = r.k + 2 if r.n_accepted == r.k else max(1, r.k - 1)
        assert nxt.k == min(expected, left - 1)


def test_prompt_lookup_proposes_the_latest_match():
    from specviz.drafts.drafter import lookup_continuation
    ids = [1, 2, 3, 9, 1, 2, 3, 4, 5, 1, 2, 3]
    assert lookup_continuation(ids, 3, 3, 1) == [4, 5, 1]  # latest earlier "1 2 3" is followed by 4 5 1
    assert lookup_continuation([7, 8, 9], 3, 3, 1) == []
    assert lookup_continuation([5, 6, 5], 4, 3, 1) == [6, 5]


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"draft_stop": 1.0}, "draft_stop"), ({"draft_stop": -0.1}, "draft_stop"), ({"draft_stop": "x"}, "draft_stop"),
    ({"k": 0}, "k must be >= 1"), ({"temperature": -1}, "temperature"), ({"top_k": -2}, "top_k"),
    ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"k": 2.5}, "integer"), ({"k_policy": "magic"}, "k_policy"), ({"temperature": float("nan")}, "temperature"),
    ({"k_policy": "history", "k": 20, "max_k": 10}, r"\[min_k, max_k\]"),
])
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DecodeConfig(**kwargs)


def test_bad_prompts_and_windows(llama):
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(llama, llama, torch.empty(1, 0, dtype=torch.long), DecodeConfig())
    with pytest.raises(ValueError, match="shape"):
        speculative_generate(llama, llama, torch.tensor([1, 2, 3]), DecodeConfig())
    too_long = r"200 tokens\) \+ max_new_tokens \(64\) = 264 exceeds the target's context window of 256"
    with pytest.raises(ValueError, match=too_long):
        speculative_generate(llama, llama, torch.ones(1, 200, dtype=torch.long), DecodeConfig())
    small = tiny_gpt2(window=128)
    with pytest.raises(ValueError, match="draft's context window of 128"):
        speculative_generate(llama, small, torch.ones(1, 100, dtype=torch.long), DecodeConfig())
    with pytest.raises(ValueError, match="draft must be"):
        speculative_generate(llama, "gpt2", torch.ones(1, 3, dtype=torch.long), DecodeConfig())


@pytest.mark.slow
@pytest.mark.parametrize("draft_vocab", [60, 72])
def test_padded_vocabularies_work_over_the_shared_range(prompt, draft_vocab):
    target = tiny_llama(seed=3, sharpen=30)
    draft = tiny_llama(vocab=draft_vocab, seed=3, sharpen=30)
    greedy = speculative_generate(target, draft, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=30))
    assert greedy.new_tokens == reference_greedy(target, prompt, 30)
    sampled = speculative_generate(target, draft, prompt, DecodeConfig(k=3, max_new_tokens=30))
    assert all(x < min(64, draft_vocab) for r in sampled.rounds for x in r.drafted)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["greedy", "sample", "nucleus", "adaptive", "confident"])
def test_presets_run_and_greedy_ones_are_exact(name, prompt):
    from dataclasses import replace

    from specviz import PRESETS

    cfg = replace(PRESETS[name], max_new_tokens=20)
    trace = speculative_generate(SHARP_LLAMA, perturbed(SHARP_LLAMA, 0.5), prompt, cfg)
    assert len(trace.new_tokens) == 20
    if cfg.greedy:
        assert trace.new_tokens == reference_greedy(SHARP_LLAMA, prompt, 20)


# -- transformers' cache keyword ----------------------------------------------------------------------
@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_cache_keyword_is_the_current_one_even_behind_a_wrapper(make, prompt):
    """transformers 5 renamed past_key_values= to cache= (the old name warns, and goes in 5.40): the decoders
    pass the new name, also when an instance wrapper that forwards **kwargs (as these tests install) hides it."""
    import inspect
    import warnings

    from specviz.runtime.lm import cache_kwarg

    model = make(seed=3)
    forward = model.forward
    model.forward = lambda input_ids=None, **kw: forward(input_ids=input_ids, **kw)
    expected = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    assert cache_kwarg(model) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        speculative_generate(model, perturbed(model, 0.3), prompt, DecodeConfig(k=2, max_new_tokens=6))


# -- the shared steps and the trace's names ------------------------------------------------------------
def test_commit_cuts_after_eos_by_hand():
    from specviz.decoder import commit
    from specviz.trace import Trace

    trace = Trace.start([1, 2], DecodeConfig(), "t", "d", eos_token_ids=[9])
    committed = [1, 2]
    assert commit(committed, [3, 4], trace) == [3, 4] and committed == [1, 2, 3, 4] and trace.stop_reason == ""
    assert commit(committed, [5, 9, 6], trace) == [5, 9] and committed == [1, 2, 3, 4, 5, 9]
    assert trace.stop_reason == "eos"


def new_trace(target, draft, prompt, batched, **names):
    from specviz.batch import BatchDecoding

    cfg = DecodeConfig(k=2, max_new_tokens=3)
    return BatchDecoding(target, draft, [prompt], cfg, **names).traces[0] if batched else \
        Decoding(target, draft, prompt, cfg, **names).trace


@pytest.mark.parametrize("batched", [False, True])
def test_traces_name_the_models_they_are_given(llama, prompt, batched):
    lookup = PromptLookupDrafter()
    named = new_trace(llama, lookup, prompt, batched, target_name="my-target", draft_name="my-draft")
    assert (named.target_name, named.draft_name, named.mode) == ("my-target", "my-draft", "speculative")
    default = new_trace(llama, lookup, prompt, batched)
    assert (default.target_name, default.draft_name) == ("LlamaForCausalLM", lookup.name)
    plain = new_trace(llama, None, prompt, batched, target_name="my-target", draft_name="ignored")
    assert (plain.target_name, plain.draft_name, plain.mode) == ("my-target", "", "autoregressive")
    assert plain.prompt_ids == prompt[0].tolist() and plain.rounds == [] and plain.config.max_new_tokens == 3


@pytest.mark.slow
@pytest.mark.parametrize("batched", [False, True])
def test_a_slow_consumer_does_not_count_as_decoding_time(llama, prompt, batched, monkeypatch):
    """total_s is the run's own work: a consumer that takes 50 s after every round (a UI redrawing, on a virtual
    clock) leaves it where a consumer that takes nothing puts it, far below the consumer's time."""
    from specviz.batch import BatchDecoding
    from tests.helpers.clock import VirtualClock

    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock)

    cfg = DecodeConfig(k=2, temperature=0, max_new_tokens=12)
    draft = perturbed(llama, 0.3)

    def run(sleep: float) -> float:
        decoding = BatchDecoding(llama, draft, [prompt], cfg) if batched else Decoding(llama, draft, prompt, cfg)
        for _ in decoding:
            clock.spend(sleep)
        trace = decoding.traces[0] if batched else decoding.trace
        return trace.total_s, len(trace.rounds)

    quick, rounds = run(0.0)
    slow, _ = run(50.0)
    assert rounds >= 3 and slow < quick + 5.0  # counting the consumer would add 50 s a round


@pytest.mark.slow
def test_concurrent_runs_sharing_one_drafter_do_not_mix(prompt):
    """Two visitors' runs share the store's drafter object: each run works on its own copy (Drafter.fresh), so
    runs with different settings interleaved round by round give exactly what each gives alone."""
    from specviz import ModelDrafter

    target = tiny_llama(seed=3, sharpen=30)
    shared = ModelDrafter(perturbed(target, 0.8))
    jobs = [(prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=30)),
            (torch.tensor([[9, 8, 7, 6]]), DecodeConfig(k=2, temperature=0.9, top_k=8, max_new_tokens=30, seed=5))]
    alone = [speculative_generate(target, shared, p, cfg) for p, cfg in jobs]
    runs = [Decoding(target, shared, p, cfg) for p, cfg in jobs]
    streams = [iter(r) for r in runs]
    for _ in range(40):  # round by round, alternating
        for s in streams:
            next(s, None)
    for run, solo in zip(runs, alone):
        assert [r.drafted for r in run.trace.rounds] == [r.drafted for r in solo.rounds]
        assert run.trace.new_tokens == solo.new_tokens


@pytest.mark.slow
@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2])
def test_early_exit_drafts_exactly_and_at_full_depth_is_the_target(make, prompt):
    """The target's first L layers draft for it (sharing its weights): greedy output is the target's own, and with
    every layer the draft IS the target, so every draft is accepted."""
    from specviz.drafts.early_exit import early_exit, parse

    target = make(seed=3, layers=3, sharpen=30)
    for layers in (1, 2):
        trace = speculative_generate(target, early_exit(target, layers), prompt, DecodeConfig(k=3, temperature=0,
                                                                                               max_new_tokens=30))
        assert trace.new_tokens == reference_greedy(target, prompt, 30)
    full = speculative_generate(target, early_exit(target, 3), prompt, DecodeConfig(k=3, temperature=0,
                                                                                     max_new_tokens=30))
    assert full.summary().acceptance_rate == 1.0
    assert sum(p.numel() for p in early_exit(target, 1).parameters()) < sum(p.numel() for p in target.parameters())
    assert all(any(p is q for q in target.parameters()) for p in early_exit(target, 2).parameters())  # shared
    assert len(list(target.parameters())) == len(list(make(seed=3, layers=3).parameters()))  # the target intact
    assert parse("target@2") == ("target", 2, False) and parse("target") is None and parse("a@b") is None
    from specviz.labs.compare import draft_size

    assert draft_size(early_exit(target, 2)) == 0 and draft_size(target) > 0  # no extra memory: shared weights
    with pytest.raises(ValueError, match="needs 1 to 3 layers"):
        early_exit(target, 4)
