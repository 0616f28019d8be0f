"""Drafts with another tokenizer: greedy output is the target's own, sampled output has the target's law."""
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specviz import DecodeConfig, speculative_generate
from specviz.drafts.cross import CrossTokenizerDrafter, retokenize
from tests.helpers.models import byte_bpe, reference_greedy, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs


def words(vocab: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=vocab[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@pytest.mark.slow
@pytest.mark.parametrize("prompt", ["ROMEO: But soft", "It is the ea", "Arise, fair s"])  # boundaries mid-word
def test_cross_tokenizer_greedy_equals_the_targets_greedy(prompt):
    target_tok, draft_tok = byte_bpe(400), byte_bpe(300)
    assert target_tok.get_vocab() != draft_tok.get_vocab()
    target = tiny_llama(vocab=len(target_tok), seed=7, sharpen=20)
    draft = tiny_llama(vocab=len(draft_tok), seed=8, sharpen=20)
    ids = target_tok(prompt, return_tensors="pt").input_ids
    drafter = CrossTokenizerDrafter(draft, draft_tok, target_tok)
    trace = speculative_generate(target, drafter, ids, DecodeConfig(k=4, temperature=0, max_new_tokens=30))
    assert trace.new_tokens == reference_greedy(target, ids, 30)
    assert sum(len(r.drafted) for r in trace.rounds) > 0  # it did propose


def test_cross_tokenizer_drafting_is_accepted_when_the_draft_knows_the_text():
    """A draft that is the target behind another tokenizer... of the same words: every proposal is the target's."""
    target_tok = words(["<unk>", "a", "b", "c", "d", "e", "f", "g"])
    draft_tok = words(["<unk>", "g", "f", "e", "d", "c", "b", "a"])  # the same words, other ids
    target = tiny_llama(vocab=8, seed=11, sharpen=30)
    draft = tiny_llama(vocab=8, seed=11, sharpen=30)
    with torch.no_grad():  # the draft's rows permuted to its ids: the same model in another tokenizer
        perm = torch.tensor([0, 7, 6, 5, 4, 3, 2, 1])
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight[perm])
        draft.lm_head.weight.copy_(target.lm_head.weight[perm])
    ids = target_tok("a b c", return_tensors="pt").input_ids
    trace = speculative_generate(target, CrossTokenizerDrafter(draft, draft_tok, target_tok), ids,
                                 DecodeConfig(k=3, temperature=0, max_new_tokens=20))
    assert trace.new_tokens == reference_greedy(target, ids, 20) and trace.summary().acceptance_rate > 0.9


@pytest.mark.law
@pytest.mark.slow
def test_cross_tokenizer_sampling_keeps_the_targets_law():
    target_tok = words(["<unk>", "a", "b", "c", "d", "e", "f", "g"])
    draft_tok = words(["<unk>", "c", "a", "g", "b"])  # shares only some words
    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    draft = tiny_llama(vocab=5, seed=12, sharpen=5)
    prompt = target_tok("a b c", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0)
    drafter = CrossTokenizerDrafter(draft, draft_tok, target_tok)
    traces = seeded_runs(target, drafter, prompt, cfg, 1500)  # one batched run, the drafter shared by its rows
    counts, drafted = first_two_counts(traces, 8), sum(len(t.rounds[0].drafted) for t in traces)
    assert drafted > 500  # proposals were made and verified
    assert chi2_pvalue(counts, exact_first_two(target, prompt, cfg)) > 1e-3


def test_retokenize_keeps_what_follows_the_committed_tokens():
    tok = byte_bpe(400)
    assert tok.decode(retokenize(tok, "It is the", " east")) == " east"
    assert retokenize(tok, "It is the", "") == []


@pytest.mark.law
@pytest.mark.slow
def test_token_intersection_drafts_a_real_q_and_keeps_the_law():
    """The draft's q restricted to the shared tokens is what it samples from: sampled output has the target's law,
    greedy output is the target's own, and no drafted token lies outside the intersection."""
    from specviz.drafts.cross import IntersectionDrafter

    target_tok = words(["<unk>", "a", "b", "c", "d", "e", "f", "g"])
    draft_tok = words(["<unk>", "c", "a", "g", "b", "z"])
    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    draft = tiny_llama(vocab=6, seed=12, sharpen=5)
    drafter = IntersectionDrafter(draft, draft_tok, target_tok)
    shared = {target_tok.get_vocab()[w] for w in ("<unk>", "a", "b", "c", "g")}
    prompt = target_tok("a b c", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0, top_k=6)
    traces = seeded_runs(target, drafter, prompt, cfg, 1500)
    counts, drafted = first_two_counts(traces, 8), [x for t in traces for x in t.rounds[0].drafted]
    assert set(drafted) <= shared and len(drafted) > 1000
    assert chi2_pvalue(counts, exact_first_two(target, prompt, cfg)) > 1e-3
    greedy = speculative_generate(target, drafter, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=20))
    assert greedy.new_tokens == reference_greedy(target, prompt, 20)
    with pytest.raises(ValueError, match=r"share 1 of the target's 8 tokens"):
        IntersectionDrafter(draft, words(["<unk>", "x", "y"]), target_tok, min_overlap=0.5)


# -- both tokenizations in the trace, and their alignment ------------------------------------------------
def test_align_cuts_at_every_boundary_of_both_tokenizations():
    from specviz.drafts.alignment import Segment, align

    assert align(["ab", "c"], ["a", "bc"]) == [Segment("a", 0, 0), Segment("b", 0, 1), Segment("c", 1, 1)]
    # the target's tokens were cut at k: the rest of the draft's text has no target token
    assert align(["ab", "cd"], ["abc"]) == [Segment("ab", 0, 0), Segment("c", 1, 0), Segment("d", 1, None)]
    assert align([], []) == []


def test_incremental_texts_gives_a_split_character_to_the_token_that_completes_it():
    from specviz.drafts.alignment import incremental_texts

    pieces = {1: b"ab", 2: "é".encode()[:1], 3: "é".encode()[1:], 4: b"!"}

    def decode(ids):
        return b"".join(pieces[i] for i in ids).decode("utf-8", errors="replace")

    assert incremental_texts(decode, [1], [2, 3, 4]) == ("", "é", "!")
    assert incremental_texts(decode, [], [1, 2]) == ("ab", "\ufffd")  # the last token keeps its partial character


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["retokenize", "intersection"])
def test_the_trace_keeps_the_drafts_own_tokens_and_round_trips(kind):
    from specviz import Trace
    from specviz.drafts.cross import IntersectionDrafter
    from specviz.views.alignment_view import alignment_html

    target_tok, draft_tok = byte_bpe(400), byte_bpe(300)
    target = tiny_llama(vocab=len(target_tok), seed=7, sharpen=20)
    draft = tiny_llama(vocab=len(draft_tok), seed=8, sharpen=20)
    make = CrossTokenizerDrafter if kind == "retokenize" else IntersectionDrafter
    ids = target_tok("ROMEO: But soft", return_tensors="pt").input_ids
    trace = speculative_generate(target, make(draft, draft_tok, target_tok), ids,
                                 DecodeConfig(k=4, temperature=0, max_new_tokens=16), tokenizer=target_tok)
    views = [r.draft_view for r in trace.rounds if r.drafted]
    assert views and all(v is not None for v in views)
    for r in trace.rounds:
        if r.draft_view is None or not r.draft_view.ids:
            continue
        assert all(i < len(draft_tok) for i in r.draft_view.ids)
        if kind == "intersection":  # the same strings, one draft token per target token
            assert [draft_tok.convert_ids_to_tokens(i) for i in r.draft_view.ids] == \
                target_tok.convert_ids_to_tokens(list(r.drafted))
    back = Trace.from_json(trace.to_json())
    assert [r.draft_view for r in back.rounds] == [r.draft_view for r in trace.rounds]
    i = next(j for j, r in enumerate(trace.rounds) if r.draft_view is not None and r.drafted)
    html = alignment_html(trace.rounds[i], trace.texts().rounds[i])
    assert html.count("<tr>") == 2 and "sv-align-draft" in html


def test_the_alignment_view_escapes_token_text():
    from specviz.records import DraftTokens
    from specviz.texts import RoundTexts
    from specviz.trace import Round
    from specviz.views.alignment_view import alignment_html

    r = Round(index=0, k=1, drafted=(1,), q=(1.0,), p=(0.2,), accept_prob=(0.0,), u=(None,), beta=(0.0,), n_accepted=0,
              emitted=(2,), resampled=2, bonus=None, next_p=0.5, residual_top=(), draft_s=0.0, target_s=0.0, wall_s=0.0,
              draft_view=DraftTokens((7, 8), ("<b>x", "</b>")))
    html = alignment_html(r, RoundTexts(drafted=["<b>x</b>"]))
    assert "<b>x" not in html and "&lt;b&gt;x" in html and 'colspan="2"' in html  # one target token over both drafts


def test_a_trace_with_a_malformed_draft_view_is_refused():
    import json

    from specviz import Trace

    target_tok, draft_tok = byte_bpe(400), byte_bpe(300)
    target = tiny_llama(vocab=len(target_tok), seed=7, sharpen=20)
    ids = target_tok("It is the ea", return_tensors="pt").input_ids
    drafter = CrossTokenizerDrafter(tiny_llama(vocab=len(draft_tok), seed=8), draft_tok, target_tok)
    trace = speculative_generate(target, drafter, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=8))
    data = json.loads(trace.to_json())
    data["rounds"][0]["draft_view"] = {"ids": [1, 2], "texts": ["<img>"]}
    with pytest.raises(ValueError, match="draft_view has unequal ids and texts"):
        Trace.from_json(json.dumps(data))
    data["rounds"][0]["draft_view"] = {"ids": [1], "texts": [5]}
    with pytest.raises(ValueError, match=r"draft_view\.texts must be a list of strings"):
        Trace.from_json(json.dumps(data))


@pytest.mark.slow
def test_cross_drafter_picks_the_exact_rule_per_run_and_binds_to_a_target():
    """Greedy runs re-tokenize (output = the target's greedy); sampled runs draft from the shared-token q (every
    drafted token in the intersection); an unbound drafter refuses to start."""
    from specviz import CrossDrafter
    from specviz.drafts.cross import IntersectionDrafter

    target_tok, draft_tok = byte_bpe(400), byte_bpe(300)
    target = tiny_llama(vocab=len(target_tok), seed=7, sharpen=20)
    draft = tiny_llama(vocab=len(draft_tok), seed=8, sharpen=20)
    ids = target_tok("Arise, fair s", return_tensors="pt").input_ids
    unbound = CrossDrafter(draft, draft_tok)
    with pytest.raises(ValueError, match="bind the target's first"):
        speculative_generate(target, unbound, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=4))
    drafter = unbound.for_target(target_tok)
    assert drafter.for_target(target_tok) is drafter and unbound.target_tok is None
    assert 0.5 < drafter.overlap < 1 and isinstance(drafter.sampled_rule, IntersectionDrafter)
    greedy = speculative_generate(target, drafter, ids, DecodeConfig(k=4, temperature=0, max_new_tokens=24))
    assert greedy.new_tokens == reference_greedy(target, ids, 24)
    shared = {target_tok.get_vocab()[s] for s in set(target_tok.get_vocab()) & set(draft_tok.get_vocab())}
    sampled = speculative_generate(target, drafter, ids, DecodeConfig(k=4, temperature=1.0, max_new_tokens=24, seed=3))
    drafted = [t for r in sampled.rounds for t in r.drafted]
    assert drafted and set(drafted) <= shared
