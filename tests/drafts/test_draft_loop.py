"""The one draft loop every q-drafter shares: its step by hand, its stop rule, and every drafter through the
decoder against the target's own greedy, with the stop rule replayed on each recorded round."""
import pytest
import torch

from specviz import DecodeConfig, NGramDrafter, NGramModel, PromptLookupDrafter, Proposal, speculative_generate
from specviz.batch import speculative_generate_batch
from specviz.drafts.drafter import draft_loop, draft_step, lookup_continuation
from specviz.sampling import logits_to_probs, sample
from tests.helpers.models import DEVICE, perturbed, reference_greedy, tiny_llama

F64 = torch.float64


# -- one step, by hand ------------------------------------------------------------------------------
def test_greedy_step_by_hand():
    logits = torch.tensor([0.0, 2.0, 1.0], dtype=F64)
    q1 = 7.38905609893065 / (1 + 7.38905609893065 + 2.718281828459045)  # softmax at the argmax: 0.665
    for stop, go_on in ((0.0, True), (0.6, True), (0.7, False)):
        x, q, more = draft_step(logits, DecodeConfig(temperature=0, draft_stop=stop), 3, None)
        assert (x, more) == (1, go_on) and q[1].item() == pytest.approx(q1)
    x, q, _ = draft_step(logits, DecodeConfig(temperature=0), 4, None)  # the target's vocabulary is larger
    assert q.shape == (4,) and q[3] == 0 and q.sum().item() == pytest.approx(1.0)


def test_sampled_step_draws_once_from_the_processed_q():
    logits = torch.randn(20, generator=torch.Generator().manual_seed(0), dtype=F64)
    cfg = DecodeConfig(temperature=0.7, top_k=5, top_p=0.9)
    x, q, _ = draft_step(logits, cfg, 20, torch.Generator().manual_seed(3))
    expected = logits_to_probs(logits, 0.7, 5, 0.9)
    assert torch.equal(q, expected) and x == int(sample(expected, torch.Generator().manual_seed(3)))
    assert (q > 0).sum() <= 5  # top-k applied to q as to p


def scripted(*rows):
    """next_logits that returns log(rows[i]) at step i and records what it was shown."""
    seen = []

    def next_logits(drafted):
        seen.append(list(drafted))
        return torch.tensor(rows[len(seen) - 1], dtype=F64).log()
    return next_logits, seen


def test_loop_stops_after_the_first_doubtful_token():
    rows = ([0.1, 0.9, 0.0], [0.4, 0.3, 0.3], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0])
    next_logits, seen = scripted(*rows)
    prop = draft_loop(next_logits, 4, DecodeConfig(temperature=0, draft_stop=0.5), 3, None, "cpu")
    assert prop.tokens.tolist() == [1, 0] and seen == [[], [1]]  # q(x_2) = 0.4 < 0.5: stop, ask no more
    torch.testing.assert_close(prop.q, torch.tensor(rows[:2], dtype=F64))
    next_logits, seen = scripted(*rows)
    prop = draft_loop(next_logits, 4, DecodeConfig(temperature=0), 3, None, "cpu")
    assert prop.tokens.tolist() == [1, 0, 2, 0] and seen == [[], [1], [1, 0], [1, 0, 2]]
    assert draft_loop(next_logits, 0, DecodeConfig(), 3, None, "cpu").q is None


def test_proposal_q_on_the_vocabulary():
    x = torch.tensor([2, 0])
    onehot = Proposal(x, None).q_on(4, F64)
    assert onehot.dtype == F64 and onehot.tolist() == [[0, 0, 1, 0], [1, 0, 0, 0]]
    q = torch.full((2, 4), 0.25)
    assert Proposal(x, q).q_on(4, F64) is q  # the drafted-from distributions, as they are
    assert Proposal.of([], [], "cpu").q_on(4).shape == (0, 4)


# -- every drafter through the decoder ------------------------------------------------------------------
SHARP = tiny_llama(seed=3, sharpen=30)
PROMPT = torch.tensor([[1, 5, 9, 3, 7]], device=DEVICE)
torch.manual_seed(0)
CORPUS = SHARP.generate(PROMPT, do_sample=True, max_new_tokens=200)[0].cpu()  # text the target likes
DRAFTERS = {
    "model": lambda: perturbed(SHARP, 0.5),
    "ngram": lambda: NGramDrafter(NGramModel.fit(CORPUS, 64, order=3)),
    "lookup": lambda: PromptLookupDrafter(),
}


def replay_draft_stop(trace, stop, point_mass):
    """Check each recorded round against the stop rule; True if some round stopped early."""
    committed = list(trace.prompt_ids)
    for r in trace.rounds:
        if point_mass:  # q(x) = 1 never stops; a short proposal is the lookup running out of matches
            assert list(r.drafted) == lookup_continuation(committed, r.k, 3, 1)
        else:
            assert all(q >= stop for q in r.q[:-1])  # drafting went on only past confident tokens
            assert len(r.drafted) == r.k or r.q[-1] < stop  # and stopped early only at a doubtful one
        committed += r.emitted
    return any(len(r.drafted) < r.k for r in trace.rounds)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [0.0, 0.45, 0.7])
@pytest.mark.parametrize("drafter", list(DRAFTERS))
def test_greedy_equals_target_greedy_and_draft_stop_replays(drafter, stop):
    cfg = DecodeConfig(k=5, temperature=0, max_new_tokens=40, draft_stop=stop)
    trace = speculative_generate(SHARP, DRAFTERS[drafter](), PROMPT, cfg)
    assert trace.new_tokens == reference_greedy(SHARP, PROMPT, 40)
    stopped = replay_draft_stop(trace, stop, drafter == "lookup")
    if stop and drafter != "lookup":
        assert stopped  # the rule did act (NGramDrafter ignored draft_stop before the shared loop)


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_sampled_drafts_stop_on_the_processed_q(drafter):
    cfg = DecodeConfig(k=5, temperature=0.8, top_k=20, max_new_tokens=40, draft_stop=0.4, seed=2)
    trace = speculative_generate(SHARP, DRAFTERS[drafter](), PROMPT, cfg)
    assert len(trace.new_tokens) == 40 and replay_draft_stop(trace, 0.4, False)


@pytest.mark.slow
def test_ngram_rows_of_a_batch_reproduce_their_single_prompt_traces():
    """A model-free drafter in a batch drafts row by row through the same loop, from row b's generator."""
    drafter = DRAFTERS["ngram"]()
    prompts = [PROMPT.cpu(), torch.tensor([[4, 8, 15, 16]])]
    cfg = DecodeConfig(k=4, max_new_tokens=24, seed=5, draft_stop=0.3)
    traces = speculative_generate_batch(SHARP, drafter, prompts, cfg)
    for b, (ids, trace) in enumerate(zip(prompts, traces)):
        single = speculative_generate(SHARP, drafter, ids, DecodeConfig(**{**cfg.to_dict(), "seed": cfg.seed + b}))
        assert [(r.drafted, r.emitted) for r in trace.rounds] == [(r.drafted, r.emitted) for r in single.rounds]
