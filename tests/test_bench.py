"""The benchmark runs every method on the same work (no timing assertions: timings are printed, not tested)."""
from conftest import perturbed, tiny_llama

from specviz import DecodeConfig, PromptLookupDrafter
from specviz.bench import report, run_bench


def test_every_method_generates_the_same_number_of_tokens(prompt):
    target = tiny_llama(seed=3, sharpen=30)
    for draft in (perturbed(target, 0.3), PromptLookupDrafter()):
        tallies = run_bench(target, draft, [prompt, prompt[:, :2]], DecodeConfig(k=3, temperature=0, max_new_tokens=10),
                            repeats=1)
        assert set(tallies) == {"ours-ar", "ours-spec", "ours-norecord", "hf-plain", "hf-assisted"}
        assert {t.tokens for t in tallies.values()} == {20}
        text = report(tallies)
        assert "speedup of ours-spec over ours-ar" in text and "recording overhead" in text
