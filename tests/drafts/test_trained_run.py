"""Trained drafts run (specviz.drafts.trained): the EAGLE-3 forward against speculators' own, greedy output equal to
the target's own greedy decode, the sampled law kept, Medusa chains and trees, and the coverage bound."""

import pytest
import torch
from safetensors.torch import load_file

from specviz import DecodeConfig, TreeConfig, speculative_generate
from specviz.drafts.trained.coverage import outside_mass, vocab_coverage
from specviz.drafts.trained.load import TrainedDraft, load_trained
from specviz.sampling import logits_to_probs
from tests.helpers.models import reference_greedy
from tests.helpers.stats import chi2_pvalue, seeded_runs
from tests.helpers.trained import FIXTURES, edited, fixture_target
from tests.helpers.tree_seeds import first_two_of_seeds

PROMPTS = [[1, 2, 3, 4, 5], [9, 9, 30, 2], [60, 7]]


@pytest.mark.parametrize("name", ["eagle3", "eagle3_31"])
def test_the_eagle3_forward_is_speculators_own_at_every_drafting_step(name):
    """speculators' training-time test, step s at row j, drafts from the true states up to j and its own outputs
    after: the chain a drafter builds. Each step's logits, fed the same tokens, match what speculators computed."""
    ref = load_file(str(FIXTURES / f"{name}_reference.safetensors"))
    drafter = load_trained(FIXTURES / name, fixture_target())
    model, ids, taps = drafter.model, ref["input_ids"], ref["taps"]
    steps, length = ref["logits"].shape[:2]
    with torch.no_grad():
        fed, logits = model.fresh().forward(ids, model.fuse(taps), torch.arange(1, length + 1))
        assert torch.allclose(logits[:, model.ids], ref["logits"][0], atol=1e-5)
        for j in range(length - steps + 1):  # the chain drafted after row j
            chain, h = model.fresh(), None
            h, _ = chain.forward(ids[: j + 1], model.fuse(taps[: j + 1]), torch.arange(1, j + 2))
            for s in range(1, steps):  # step s feeds the token s places on (speculators' teacher forcing)
                h, lg = chain.forward(ids[j + s: j + s + 1], h[-1:], torch.tensor([j + 1 + s]))
                assert torch.allclose(lg[0, model.ids], ref["logits"][s, j], atol=1e-5), (s, j)


def as_midlayer(tmp_path):
    """The fixture as SpecForge and the EAGLE authors name it: midlayer.*, a flat config with eagle_config."""
    return edited(tmp_path, tensors=lambda t: {k.replace("layers.0.", "midlayer."): v for k, v in t.items()},
                  config=lambda c: {**c["transformer_layer_config"], "draft_vocab_size": 48,
                                    "norm_before_residual": False,
                                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}})


def without_embedding(tmp_path):
    return edited(tmp_path, tensors=lambda t: {k: v for k, v in t.items() if k != "embed_tokens.weight"})


@pytest.mark.slow
@pytest.mark.parametrize("which", ["eagle3", "eagle3_31", "medusa", "midlayer", "no-embedding"])
def test_greedy_output_is_the_targets_own(which, tmp_path):
    folder = {"midlayer": lambda: as_midlayer(tmp_path), "no-embedding": lambda: without_embedding(tmp_path)}.get(
        which, lambda: FIXTURES / which)()
    target = fixture_target()
    drafter = load_trained(folder)  # bound and checked when the run attaches its target
    assert isinstance(drafter, TrainedDraft)
    for prompt in PROMPTS[:2]:
        ids = torch.tensor([prompt])
        trace = speculative_generate(target, drafter, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=20))
        assert trace.new_tokens == reference_greedy(target, ids, 20)


@pytest.mark.slow
def test_the_midlayer_checkpoint_drafts_what_the_speculators_one_drafts(tmp_path):
    target, prompt = fixture_target(), torch.tensor([PROMPTS[0]])
    cfg = DecodeConfig(k=3, temperature=1.0, max_new_tokens=12, seed=5)
    a = speculative_generate(target, load_trained(FIXTURES / "eagle3", target), prompt, cfg)
    b = speculative_generate(target, load_trained(as_midlayer(tmp_path), target), prompt, cfg)
    assert [r.drafted for r in a.rounds] == [r.drafted for r in b.rounds]


def test_the_targets_embedding_stands_in_for_a_missing_one(tmp_path):
    target = fixture_target()
    drafter = load_trained(without_embedding(tmp_path), target)
    assert drafter.model.embed is target.get_input_embeddings().weight


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("name", ["eagle3", "medusa"])
def test_sampling_keeps_the_targets_law(name):
    """The first token of 700 seeded runs (one draft, then the verify) against p at temperature 2, where these random
    drafts overlap the target enough for their tokens to be accepted often, not only rejected."""
    target, prompt = fixture_target(), torch.tensor([[1, 2, 3, 4]])
    drafter = load_trained(FIXTURES / name, target)
    cfg = DecodeConfig(k=2, max_new_tokens=2, temperature=2.0)  # k is capped at 1: one draft before the last token
    traces = seeded_runs(target, drafter, prompt, cfg, 700)  # seeds 0..699 in one batch, the bound draft row by row
    counts = torch.bincount(torch.tensor([trace.new_tokens[0] for trace in traces]), minlength=64).float()
    accepted = sum(trace.rounds[0].n_accepted for trace in traces)
    assert accepted > 100  # the drafts' own tokens were tested, not only the residual's
    with torch.no_grad():
        p1 = logits_to_probs(target(prompt).logits[0, -1], cfg.temperature, cfg.top_k, cfg.top_p)
    assert chi2_pvalue(counts, p1) > 1e-3


@pytest.mark.slow
def test_medusa_drafts_trees_within_its_heads_and_refuses_deeper_ones():
    target, ids = fixture_target(), torch.tensor([PROMPTS[0]])
    drafter = load_trained(FIXTURES / "medusa", target)
    trace = speculative_generate(target, drafter, ids, DecodeConfig(temperature=0, max_new_tokens=20,
                                                                     tree=TreeConfig(shape=(3, 2))))
    assert trace.new_tokens == reference_greedy(target, ids, 20)
    with pytest.raises(ValueError, match="2 heads: a tree at most 2 deep"):
        speculative_generate(target, drafter, ids, DecodeConfig(temperature=0, max_new_tokens=5,
                                                                tree=TreeConfig(shape=(2, 2, 2))))


def test_coverage_is_the_targets_mass_outside_the_draft_vocabulary():
    target = fixture_target()
    t2d = load_file(str(FIXTURES / "eagle3" / "model.safetensors"))["t2d"]
    with torch.no_grad():
        expected = torch.cat([torch.softmax(target(torch.tensor([p])).logits[0], -1)[:, ~t2d].sum(-1)
                              for p in PROMPTS]).mean()
    assert vocab_coverage(FIXTURES / "eagle3", target, PROMPTS) == pytest.approx(float(expected), abs=1e-6)
    assert 0.1 < float(expected) < 0.4  # a quarter of the ids pruned: a real share of the mass
    assert vocab_coverage(FIXTURES / "medusa", target, PROMPTS) == 0.0


@pytest.mark.slow
def test_no_verified_position_accepts_more_than_the_mass_the_draft_vocabulary_holds():
    """beta = sum min(p, q) <= p(draft vocabulary) at every verified position of a sampled run."""
    target = fixture_target()
    drafter = load_trained(FIXTURES / "eagle3", target)
    ids = drafter.model.ids
    trace = speculative_generate(target, drafter, torch.tensor([PROMPTS[0]]),
                                 DecodeConfig(k=3, temperature=1.0, max_new_tokens=30, seed=2))
    context, checked = list(PROMPTS[0]), 0
    for r in trace.rounds:
        for i, beta in enumerate(r.beta):
            if beta is None:
                continue
            inside = 1.0 - float(outside_mass(target, ids, context + list(r.drafted[:i]))[-1])
            assert beta <= inside + 1e-5
            checked += 1
        context += list(r.emitted)
    assert checked >= 20


def test_a_draft_opened_for_one_target_is_refused_by_another():
    drafter = load_trained(FIXTURES / "eagle3", fixture_target())
    with pytest.raises(ValueError, match="checked against another target"):
        speculative_generate(fixture_target(), drafter, torch.tensor([PROMPTS[0]]), DecodeConfig(max_new_tokens=3))


def test_a_trained_draft_is_refused_before_the_targets_first_pass(tmp_path, monkeypatch):
    folder = edited(tmp_path, tensors=lambda t: {k: v for k, v in t.items() if k != "fc.weight"})
    target = fixture_target()
    passes = []
    monkeypatch.setattr(target.model, "forward", lambda *a, **k: passes.append(1))
    with pytest.raises(ValueError, match="fc.weight is missing"):
        speculative_generate(target, load_trained(folder), torch.tensor([PROMPTS[0]]), DecodeConfig(max_new_tokens=3))
    assert not passes


def test_processed_q_lives_on_the_draft_vocabulary():
    target = fixture_target()
    drafter = load_trained(FIXTURES / "eagle3", target)
    q = logits_to_probs(drafter.model.fresh().forward(torch.tensor([3]), torch.zeros(1, 32),
                                                      torch.tensor([1]))[1][0], 1.0, 0, 1.0)
    outside = torch.ones(64, dtype=torch.bool)
    outside[drafter.model.ids] = False
    assert float(q[outside].sum()) == 0.0 and float(q.sum()) == pytest.approx(1.0)


def test_specviz_load_drafter_opens_a_folder_and_a_local_name(monkeypatch):
    import specviz
    from specviz import models

    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", f"tiny-eagle3={FIXTURES / 'eagle3'},tiny-medusa={FIXTURES / 'medusa'}")
    assert isinstance(specviz.load_drafter(str(FIXTURES / "eagle3")), TrainedDraft)
    drafter = specviz.load_drafter("tiny-medusa")
    assert isinstance(drafter, TrainedDraft) and drafter.name == "tiny-medusa"
    formats = models.local_trained_drafts()
    assert formats["tiny-eagle3"].startswith("EAGLE-3 (speculators format), 3 tapped layers (1, 2, 3), draft "
                                             "vocabulary 48 of 64: 16 tensors")
    assert formats["tiny-medusa"].startswith("Medusa heads (FasterDecoding layout): 6 tensors")
    target, ids = fixture_target(), torch.tensor([PROMPTS[1]])
    trace = speculative_generate(target, drafter, ids, DecodeConfig(k=2, temperature=0, max_new_tokens=12))
    assert trace.new_tokens == reference_greedy(target, ids, 12)
    assert models.trained_folder("lite") is None and models.trained_folder("prompt-lookup") is None


def eagle1_checkpoint(folder, seed=4, **extra):
    """An EAGLE-1 / HASS checkpoint as the EAGLE authors' cnets1.py names it: fc (with bias) over [embedding; feature],
    layers.0 without an input norm; no final norm, no LM head (the target's)."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    h, i = 32, 64
    t = {"fc.weight": 0.2 * torch.randn(h, 2 * h), "fc.bias": 0.1 * torch.randn(h),
         "layers.0.post_attention_layernorm.weight": torch.ones(h)}
    for name, shape in (("q_proj", (h, h)), ("k_proj", (h, h)), ("v_proj", (h, h)), ("o_proj", (h, h))):
        t[f"layers.0.self_attn.{name}.weight"] = 0.2 * torch.randn(shape)
    for name, shape in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
        t[f"layers.0.mlp.{name}.weight"] = 0.2 * torch.randn(shape)
    folder.mkdir(parents=True)
    save_file({**t, **extra}, str(folder / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": h, "intermediate_size": i, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 64, "rms_norm_eps": 1e-6,
              "max_position_embeddings": 256}
    (folder / "config.json").write_text(__import__("json").dumps(config))
    return folder


@pytest.mark.slow
def test_an_eagle1_checkpoint_runs_exact_and_a_stray_input_norm_is_refused(tmp_path):
    from tests.helpers.trained import refusal

    target, ids = fixture_target(), torch.tensor([PROMPTS[0]])
    folder = eagle1_checkpoint(tmp_path / "eagle1")
    drafter = load_trained(folder, target)
    assert drafter.model.embed is target.get_input_embeddings().weight
    trace = speculative_generate(target, drafter, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=16))
    assert trace.new_tokens == reference_greedy(target, ids, 16)
    stray = eagle1_checkpoint(tmp_path / "stray", **{"layers.0.input_layernorm.weight": torch.ones(32)})
    assert "tensor layers.0.input_layernorm.weight [32] is not part of a EAGLE-1 / HASS checkpoint" in refusal(stray)


def test_medusa_choices_run_as_their_token_tree():
    """The fixture's medusa_choices [[0], [0, 0], [1], [0, 1]]: each round drafts those four nodes (the top two tokens
    of head 0, then head 1's top two below the first), and greedy output stays the target's own."""
    from specviz.drafts.trained.load import medusa_tree

    target, ids = fixture_target(), torch.tensor([PROMPTS[0]])
    tree = medusa_tree(FIXTURES / "medusa")
    assert tree.choices == ((0,), (0, 0), (1,), (0, 1)) and tree.nodes == 4 and tree.levels == 2
    drafter = load_trained(FIXTURES / "medusa", target)
    trace = speculative_generate(target, drafter, ids, DecodeConfig(temperature=0, max_new_tokens=20, tree=tree))
    assert trace.new_tokens == reference_greedy(target, ids, 20)
    full = [r for r in trace.rounds if r.tree is not None and len(r.tree.nodes) == 4]
    assert len(full) >= len(trace.rounds) - 2  # all but the last rounds, cut by the tokens left
    assert all([(n.parent, n.depth) for n in r.tree.nodes] == [(-1, 0), (-1, 0), (0, 1), (0, 1)] for r in full)
    with torch.no_grad():  # by hand: the heads on the target's final normed state before the pending token
        f = target.model(ids[:, :-1]).last_hidden_state[0, -1]
        logits = drafter.heads.logits(f)
    first = trace.rounds[0].tree.nodes
    assert [n.token for n in first] == logits[0].topk(2).indices.tolist() + logits[1].topk(2).indices.tolist()


@pytest.mark.slow
def test_a_medusa_choices_tree_keeps_the_targets_law():
    """The first token of 700 seeded sampled runs with the choices tree, against p at temperature 2."""
    from specviz.drafts.trained.load import medusa_tree

    target, prompt = fixture_target(), torch.tensor([[1, 2, 3, 4]])
    drafter, tree = load_trained(FIXTURES / "medusa", target), medusa_tree(FIXTURES / "medusa")
    cfg = DecodeConfig(max_new_tokens=3, temperature=2.0)
    pairs, firsts = first_two_of_seeds(target, drafter, prompt, DecodeConfig(**{**cfg.to_dict(), "tree": tree}), 700)
    counts, accepted = pairs.sum(1), sum(r.n_accepted for r in firsts)  # seeds 0..699: their first tokens
    assert accepted > 20  # the tree's own tokens were tested (37 of 700 here: point masses of ranks 0 and 1)
    with torch.no_grad():
        p1 = logits_to_probs(target(prompt).logits[0, -1], cfg.temperature, cfg.top_k, cfg.top_p)
    assert chi2_pvalue(counts, p1) > 1e-3


def test_a_tree_of_ranks_is_checked_and_survives_the_json():
    import json

    for bad, said in (([[1, 0]], "lack their parent path"), ([[0], [0]], "name a node twice"),
                      ([[0], [-1]], "ranks, each an integer >= 0"), ([], "non-empty list of paths")):
        with pytest.raises(ValueError, match=said):
            TreeConfig(choices=bad)
    with pytest.raises(ValueError, match="a tree of ranks takes each node's rank"):
        TreeConfig(choices=[[0]], children="iid")
    assert TreeConfig.parse("choices:0;1;0.0") == TreeConfig(choices=[[0], [1], [0, 0]])
    assert TreeConfig(choices=[[0], [1], [0, 0]]).label == "choices:0;1;0.0"
    with pytest.raises(ValueError, match="unreadable tree choices"):
        TreeConfig.parse("choices:0;a")
    cfg = DecodeConfig(temperature=0, tree=TreeConfig(choices=[[0], [1], [0, 0]]))
    again = DecodeConfig(**json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.tree.choices == ((0,), (1,), (0, 0))
