"""specviz.reference (the algorithm on one screen) against the decoder: the same tokens for the same seed."""
import pytest
import torch

from specviz import DecodeConfig, Decoding
from specviz.reference import speculative_decode
from tests.helpers.models import DEVICE, perturbed, reference_greedy, tiny_gpt2, tiny_llama

LLAMA = tiny_llama(seed=3, sharpen=30)
GPT2 = tiny_gpt2(seed=4, sharpen=30)
PAIRS = {"llama": (LLAMA, perturbed(LLAMA, 0.5)), "gpt2": (GPT2, perturbed(GPT2, 0.5)),
         "soft": (tiny_llama(seed=7, sharpen=3), tiny_llama(seed=8, sharpen=3))}  # q far from p: many rejections
PROMPT = torch.tensor([[1, 5, 9, 3, 7]], device=DEVICE)
CONFIGS = {
    "greedy": DecodeConfig(k=3, temperature=0, max_new_tokens=30),
    "sampled": DecodeConfig(k=3, max_new_tokens=30, seed=1),
    "nucleus": DecodeConfig(k=4, temperature=0.8, top_k=8, top_p=0.9, max_new_tokens=30, seed=2),
    "draft-stop": DecodeConfig(k=5, max_new_tokens=30, draft_stop=0.3, seed=3),
    "odd-budget": DecodeConfig(k=4, max_new_tokens=7, seed=4),
}


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("pair", list(PAIRS))
def test_reference_emits_what_the_decoder_emits(pair, config):
    target, draft = PAIRS[pair]
    cfg = CONFIGS[config]
    trace = Decoding(target, draft, PROMPT, cfg).run()
    assert speculative_decode(target, draft, PROMPT[0].tolist(), cfg) == trace.new_tokens
    assert len(trace.new_tokens) == cfg.max_new_tokens


@pytest.mark.slow
def test_the_pinned_runs_take_every_branch():
    """Rejections (the residual), full acceptances (the bonus) and early stops all occur in the runs above."""
    traces = [Decoding(*PAIRS[p], PROMPT, cfg).run() for p in PAIRS for cfg in CONFIGS.values() if not cfg.greedy]
    rounds = [r for t in traces for r in t.rounds]
    assert sum(r.rejected for r in rounds) > 20 and sum(r.bonus is not None for r in rounds) > 20
    assert sum(len(r.drafted) < r.k for r in rounds) > 5


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_reference_seeds_agree_and_greedy_is_the_targets_greedy(seed):
    target, draft = PAIRS["soft"]
    prompt = torch.tensor([[3, 1]], device=DEVICE)
    cfg = DecodeConfig(k=2, max_new_tokens=12, seed=seed)
    assert speculative_decode(target, draft, [3, 1], cfg) == Decoding(target, draft, prompt, cfg).run().new_tokens
    greedy = DecodeConfig(k=2, max_new_tokens=12, temperature=0, seed=seed)
    assert speculative_decode(target, draft, [3, 1], greedy) == reference_greedy(target, prompt, 12)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reference_stops_at_eos_like_the_decoder(temperature):
    target, draft = tiny_llama(seed=3, sharpen=30), perturbed(LLAMA, 0.5)
    cfg = DecodeConfig(k=4, max_new_tokens=40, temperature=temperature, seed=6)
    eos = Decoding(target, draft, PROMPT, cfg).run().new_tokens[9]
    target.generation_config.eos_token_id = eos
    trace = Decoding(target, draft, PROMPT, cfg).run()
    assert trace.stop_reason == "eos" and trace.new_tokens[-1] == eos and len(trace.new_tokens) <= 10
    assert speculative_decode(target, draft, PROMPT[0].tolist(), cfg) == trace.new_tokens
