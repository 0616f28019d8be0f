"""Drafts with another tokenizer: greedy output is the target's own, sampled output has the target's law."""
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from specviz import DecodeConfig, speculative_generate
from specviz.cross import CrossTokenizerDrafter, retokenize
from tests.helpers.models import reference_greedy, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two

TEXT = ["ROMEO: But soft, what light through yonder window breaks?", "It is the east, and Juliet is the sun.",
        "Arise, fair sun, and kill the envious moon,", "To be, or not to be, that is the question:"] * 20


def byte_bpe(vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of ``vocab`` tokens trained on TEXT: different vocabularies merge differently."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def words(vocab: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=vocab[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok)


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


def test_cross_tokenizer_sampling_keeps_the_targets_law():
    target_tok = words(["<unk>", "a", "b", "c", "d", "e", "f", "g"])
    draft_tok = words(["<unk>", "c", "a", "g", "b"])  # shares only some words
    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    draft = tiny_llama(vocab=5, seed=12, sharpen=5)
    prompt = target_tok("a b c", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0)
    drafter = CrossTokenizerDrafter(draft, draft_tok, target_tok)
    counts, drafted = torch.zeros(8, 8), 0
    for seed in range(1500):
        trace = speculative_generate(target, drafter, prompt, DecodeConfig(**{**cfg.to_dict(), "seed": seed}))
        t1, t2 = trace.new_tokens[:2]
        counts[t1, t2] += 1
        drafted += len(trace.rounds[0].drafted)
    assert drafted > 500  # proposals were made and verified
    assert chi2_pvalue(counts, exact_first_two(target, prompt, cfg)) > 1e-3


def test_retokenize_keeps_what_follows_the_committed_tokens():
    tok = byte_bpe(400)
    assert tok.decode(retokenize(tok, "It is the", " east")) == " east"
    assert retokenize(tok, "It is the", "") == []


def test_token_intersection_drafts_a_real_q_and_keeps_the_law():
    """The draft's q restricted to the shared tokens is what it samples from: sampled output has the target's law,
    greedy output is the target's own, and no drafted token lies outside the intersection."""
    from specviz.cross import IntersectionDrafter

    target_tok = words(["<unk>", "a", "b", "c", "d", "e", "f", "g"])
    draft_tok = words(["<unk>", "c", "a", "g", "b", "z"])
    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    draft = tiny_llama(vocab=6, seed=12, sharpen=5)
    drafter = IntersectionDrafter(draft, draft_tok, target_tok)
    shared = {target_tok.get_vocab()[w] for w in ("<unk>", "a", "b", "c", "g")}
    prompt = target_tok("a b c", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0, top_k=6)
    counts, drafted = torch.zeros(8, 8), []
    for seed in range(1500):
        trace = speculative_generate(target, drafter, prompt, DecodeConfig(**{**cfg.to_dict(), "seed": seed}))
        t1, t2 = trace.new_tokens[:2]
        counts[t1, t2] += 1
        drafted += list(trace.rounds[0].drafted)
    assert set(drafted) <= shared and len(drafted) > 1000
    assert chi2_pvalue(counts, exact_first_two(target, prompt, cfg)) > 1e-3
    greedy = speculative_generate(target, drafter, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=20))
    assert greedy.new_tokens == reference_greedy(target, prompt, 20)
    with pytest.raises(ValueError, match=r"share 1 of the target's 8 tokens"):
        IntersectionDrafter(draft, words(["<unk>", "x", "y"]), target_tok, min_overlap=0.5)
