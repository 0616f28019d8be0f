"""scripts/train/gemma_own_text.py and train_gemma_feature_draft.py on a tiny GGUF: the recording holds the
sequence's own features for its own text, the trainer's draft learns (held-out acceptance up), and what it saves
drafts through slim.FeatureDraft, greedy text equal to the target's own."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from specviz.config import DecodeConfig
from specviz.runtime.native import gemma as native_gemma
from specviz.slim import FeatureDraft, autoregressive, speculative
from tests.helpers.tiny_gguf import write_tiny_gemma

pytest.importorskip("gguf")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not native_gemma.available(), reason="the C Gemma-3 pass needs AVX-512 VNNI")]
TRAIN = Path(__file__).resolve().parents[2] / "scripts" / "train"


def script(name):
    spec = importlib.util.spec_from_file_location(name, TRAIN / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recorded_text_trains_a_draft_that_keeps_the_targets_greedy_text(tmp_path, monkeypatch):
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    data = tmp_path / "own"
    script("gemma_own_text").main(["--gguf", str(path), "--out", str(data), "--minutes", "0.03", "--length", "24",
                                   "--threads", "1"])
    shards = sorted(data.glob("*.npz"))
    assert len(shards) >= 12 and json.loads((data / "run.json").read_text())["samples"] == len(shards)
    seq = GemmaSequence.from_gguf(path, threads=1)
    z = np.load(shards[0])
    seq.decode(z["tokens"])
    assert np.allclose(z["features"], seq.features(), atol=2e-3 * np.abs(seq.features()).max())
    greedy = next(np.load(f) for f in shards if int(np.load(f)["mode"]) == 0)  # after its sampled lead, greedy text
    lead = [int(t) for t in greedy["tokens"][: int(greedy["prompt_len"])]]
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=24)
    assert lead + autoregressive(seq, lead, cfg).new_tokens == greedy["tokens"].tolist()
    out = tmp_path / "draft"
    script("train_gemma_feature_draft").main([
        "--gguf", str(path), "--data", str(data), "--out", str(out), "--minutes", "0.15", "--vocab", "10",
        "--intermediate", "128", "--heads", "2", "--window", "16", "--batch", "4", "--held-out", "3",
        "--lr", "3e-3", "--threads", "1", "--mass-rows", "64"])
    log = json.loads((out / "feature-draft.json").read_text())["training"]
    assert log["steps"] > 5 and log["held_out_after"][0]["alpha_t08"] > log["held_out_before"][0]["alpha_t08"]
    cfg, prompt = DecodeConfig(temperature=0.0, max_new_tokens=30, k=3), [2, 9, 5]
    trace = speculative(seq, FeatureDraft(seq, out), prompt, cfg)
    assert trace.new_tokens == autoregressive(seq, prompt, cfg).new_tokens
    more, again = tmp_path / "more", tmp_path / "again"  # a second recording, and a draft that starts from the first
    script("gemma_own_text").main(["--gguf", str(path), "--out", str(more), "--minutes", "0.01", "--threads", "1",
                                   "--seed", "1"])
    script("train_gemma_feature_draft").main([
        "--gguf", str(path), "--data", str(data), str(more), "--out", str(again), "--minutes", "0.02", "--init",
        str(out), "--intermediate", "128", "--heads", "2", "--window", "16", "--batch", "4", "--held-out", "3",
        "--lr", "1e-4", "--threads", "1"])
    log2 = json.loads((again / "feature-draft.json").read_text())["training"]
    first, start = log["held_out_after"][0]["alpha_t08"], log2["held_out_before"][0]["alpha_t08"]
    assert abs(start - first) < 0.02 and len(log2["recorded"]) == 2  # the saved draft's held-out figure, 8-bit
    assert log2["train_samples"] > log["train_samples"] and log2["init"]["command"] == log["command"]


def test_a_batch_of_samples_is_recorded_as_one_at_a_time_would_record_it(tmp_path, monkeypatch):
    """gemma_own_text.py --batch 3 --taps: samples decoded together on GemmaRows; each shard's features and taps are
    what a GemmaSequence gives its tokens alone (the same floats, rounded to float16 as the shards keep them), a
    greedy sample is the target's greedy text after its lead, and every sample has its lead and length."""
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    data = tmp_path / "batch"
    own = script("gemma_own_text")
    own.main(["--gguf", str(path), "--out", str(data), "--minutes", "0.02", "--length", "12", "--lead", "2", "5",
              "--threads", "1", "--batch", "3", "--taps", "1", "3", "--mix", "1", "1", "1"])
    shards = sorted(data.glob("*.npz"))
    assert len(shards) >= 3 and json.loads((data / "run.json").read_text())["samples"] == len(shards)
    greedy = [f for f in shards if int(np.load(f)["mode"]) == 0][:2]
    assert greedy
    for f in shards[:4] + greedy:
        z = np.load(f)
        seq = GemmaSequence.from_gguf(path, threads=1, taps=(1, 3))
        seq.decode(z["tokens"])
        assert np.array_equal(z["features"], seq.features().astype(np.float16))
        mine = own.taps_of(seq, len(z["tokens"]))
        assert np.array_equal(z["taps"], mine["taps"]) and np.array_equal(z["taps_rms"], mine["taps_rms"])
        assert len(z["tokens"]) == int(z["prompt_len"]) + 12 and int(z["prompt_len"]) >= 2 + 2
        if int(z["mode"]) == 0:
            lead = [int(t) for t in z["tokens"][: int(z["prompt_len"])]]
            seq.crop(0)
            again = autoregressive(seq, lead, DecodeConfig(temperature=0.0, max_new_tokens=12)).new_tokens
            assert lead + again == z["tokens"].tolist()
    with pytest.raises(SystemExit, match="--batch"):
        own.main(["--gguf", str(path), "--out", str(data), "--batch", "2", "--draft", str(tmp_path)])


def test_given_text_is_recorded_with_the_features_a_pass_gives_it(tmp_path, monkeypatch):
    """gemma_text_features.py: a MediaWiki dump's prose (markup dropped, links kept as their text) and a plain file's
    paragraphs, cut into samples after BOS, each with the features a pass over it gives."""
    import bz2

    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    text = script("gemma_text_features")
    wiki = tmp_path / "dump.xml.bz2"
    with bz2.open(wiki, "wt", encoding="utf-8") as f:
        f.write("<mediawiki><page><title>T</title><revision><text xml:space=\"preserve\">{{Infobox|a={{b}}}}\n"
                "the [[Cab (car)|cab]] sat by a [[bed]]&lt;ref&gt;{{cite|x}}&lt;/ref&gt; and the ''bat'' is a bad "
                "bet\n== Heading ==\n* a list of the cats\n[[Category:Cabs]]\n</text></revision></page></mediawiki>")
    assert text.paragraphs(wiki, 10) == ["the cab sat by a bed and the bat is a bad bet"]
    fortunes = tmp_path / "fortunes"  # strfile's source: entries apart on lines of %, attributions dropped
    fortunes.write_text("The cab sat\n\tby the bed.\n\t\t-- A. Writer\n%\nshort\n%\nA bad bet is a bet on a bad "
                        "cat,\nsaid the bat.\n%\n")
    assert text.paragraphs(fortunes, 10) == ["The cab sat by the bed.", "A bad bet is a bet on a bad cat, said the bat."]
    plain = tmp_path / "plain.txt"
    plain.write_text("the cab sat. a bad bet. the cat is a bed.\n\nshort\n\nthe bat sat at the bed, a cab at the "
                     "cat.\n")
    data = tmp_path / "given"
    text.main(["--gguf", str(path), "--text", str(wiki), str(plain), "--out", str(data), "--length", "12",
               "--min-chars", "20", "--threads", "1"])
    shards = sorted(data.glob("*.npz"))
    assert len(shards) >= 3 and json.loads((data / "run.json").read_text())["samples"] == len(shards)
    seq = GemmaSequence.from_gguf(path, threads=1)
    for f in shards:
        z = np.load(f)
        assert int(z["mode"]) == text.GIVEN and z["tokens"][0] == 2 and 7 <= len(z["tokens"]) <= 13
        seq.crop(0)
        seq.decode(z["tokens"])
        assert np.allclose(z["features"], seq.features(), atol=2e-3 * np.abs(seq.features()).max())
    with pytest.raises(SystemExit, match="no paragraph"):
        text.main(["--gguf", str(path), "--text", str(plain), "--out", str(data), "--min-chars", "500"])


def test_a_draft_trained_on_the_total_variation_at_t08_gains_acceptance(tmp_path, monkeypatch):
    """--objective tv08 on given text: the held-out acceptance at T = 0.8 rises."""
    from specviz.runtime import gguf as loader

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    plain = tmp_path / "plain.txt"
    rng = np.random.default_rng(0)
    words = ["the", "cab", "sat", "a", "bad", "bet", "cat", "bed", "bat", "tea", "seat", "dab"]
    plain.write_text("\n".join(" ".join(rng.choice(words, size=40)) for _ in range(30)) + "\n")
    data, out = tmp_path / "given", tmp_path / "draft"
    script("gemma_text_features").main(["--gguf", str(path), "--text", str(plain), "--out", str(data), "--length",
                                        "24", "--min-chars", "20", "--threads", "1"])
    script("train_gemma_feature_draft").main([
        "--gguf", str(path), "--data", str(data), "--out", str(out), "--minutes", "0.15", "--vocab", "10",
        "--intermediate", "128", "--heads", "2", "--window", "16", "--batch", "4", "--held-out", "3",
        "--lr", "3e-3", "--threads", "1", "--mass-rows", "64", "--objective", "tv08"])
    log = json.loads((out / "feature-draft.json").read_text())["training"]
    assert log["objective"] == "tv08"
    assert log["steps"] > 5 and log["held_out_after"][0]["alpha_t08"] > log["held_out_before"][0]["alpha_t08"]


def test_prose_prompts_and_a_draft_record_the_targets_own_text_and_features(tmp_path, monkeypatch):
    """gemma_own_text.py --prompts-text --draft: each prompt opens a sentence of the prose given (its first 5-16
    words), the text comes from speculative sampling with the feature draft (greedy samples: the target's own greedy
    text), the features those its verify passes computed (those a pass over the sample gives it)."""
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence
    from tests.helpers.tiny_gguf import write_tiny_feature_draft

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    own = script("gemma_own_text")
    rng = np.random.default_rng(0)
    words = ["the", "cab", "sat", "a", "bad", "bet", "cat", "bed", "bat", "tea", "seat", "dab"]
    lines = [" ".join(rng.choice(words, size=30)) for _ in range(6)]
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join(lines) + "\nshort line\n")
    starts = own.sentence_starts([plain], np.random.default_rng(1))
    assert len(starts) == 6 and all(5 <= len(s.split()) <= 16 and any(t.startswith(s + " ") for t in lines)
                                    for s in starts)
    split = tmp_path / "split.txt"
    split.write_text("The cat sat on a bed by the sea all day long. Then it went away to the west for a while.\n")
    assert [s.split()[0] for s in own.sentence_starts([split], np.random.default_rng(0), words=(5, 5))] == ["The",
                                                                                                           "Then"]
    folder, _ = write_tiny_feature_draft(tmp_path / "fd")
    data = tmp_path / "prose"
    own.main(["--gguf", str(path), "--prompts-text", str(plain), "--out", str(data), "--minutes", "0.03",
              "--length", "20", "--threads", "1", "--draft", str(folder)])
    shards = sorted(data.glob("*.npz"))
    assert len(shards) >= 6
    seq, tok = GemmaSequence.from_gguf(path, threads=1), loader.tokenizer(tmp_path, path.name)
    opened = {tuple(tok(s, add_special_tokens=False).input_ids)  # the script draws them first with its seed (0)
              for s in own.sentence_starts([plain], np.random.default_rng(0))}
    for f in shards:
        z = np.load(f)
        prompt = [int(t) for t in z["tokens"][: int(z["prompt_len"])]]
        assert tuple(prompt[1:]) in opened  # BOS, then a sentence's start, no lead
        seq.crop(0)
        seq.decode(z["tokens"])
        assert np.allclose(z["features"], seq.features(), atol=2e-3 * np.abs(seq.features()).max())
        if int(z["mode"]) == 0:
            cfg = DecodeConfig(temperature=0.0, max_new_tokens=20)
            assert prompt + autoregressive(seq, prompt, cfg).new_tokens == z["tokens"].tolist()


def test_a_prompts_file_gives_whole_lines_as_prompts(tmp_path, monkeypatch):
    """gemma_own_text.py --prompts-file: every shard opens with BOS and one line of the file whole (no lead); the
    file missing or empty, or given beside --prompts-text, is refused in words before any work."""
    from specviz.runtime import gguf as loader

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    own = script("gemma_own_text")
    lines = ["the cab sat by the bed", "a bad bet", "the bat"]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(lines[:2]) + "\n\n" + lines[2] + "\n")
    assert own.prompt_lines(prompts) == lines
    data = tmp_path / "lines"
    own.main(["--gguf", str(path), "--prompts-file", str(prompts), "--out", str(data), "--minutes", "0.01",
              "--length", "6", "--threads", "1"])
    tok = loader.tokenizer(tmp_path, path.name)
    whole = {tuple(tok(s, add_special_tokens=False).input_ids) for s in lines}
    for f in sorted(data.glob("*.npz")):
        z = np.load(f)
        assert tuple(int(t) for t in z["tokens"][1: int(z["prompt_len"])]) in whole
    (tmp_path / "empty.txt").write_text("\n\n")
    for extra, why in ((["--prompts-file", str(tmp_path / "empty.txt")], "no prompt"),
                       (["--prompts-file", str(tmp_path / "none.txt")], "no such file"),
                       (["--prompts-file", str(prompts), "--prompts-text", str(prompts)], "not both")):
        with pytest.raises(SystemExit, match=why):
            own.main(["--gguf", str(path), "--out", str(tmp_path / "x"), *extra])


def test_everyday_prompts_fill_every_blank_and_keep_apart_from_the_chosen_sets():
    """everyday_prompts.py: each frame once for every filling of its blanks, capitalised, no blank left; a prompt
    opening as a benchmark's (its first four words) is found and refused."""
    every = script("everyday_prompts")
    texts = every.prompts()
    sizes = [np.prod([len(every.FILL[k]) for k in every.FILL if "{" + k + "}" in f]) for f in every.FRAMES]
    assert len(texts) == len(set(texts)) == sum(sizes)
    assert all("{" not in t and t[0].isupper() for t in texts) and not every.held_apart(texts)
    assert every.held_apart(["The recipe calls for two eggs", "A recipe"]) == ["The recipe calls for two eggs"]


def test_everyday_prompts_skip_prints_what_came_after_an_earlier_file(capsys):
    """--skip N prints the prompts after the first N and nothing else; the frames only grow at the end, so the 488
    prompts of the first 51 frames (the earlier file) still open the list, in order."""
    every = script("everyday_prompts")
    texts = every.prompts()
    first = sum(np.prod([len(every.FILL[k]) for k in every.FILL if "{" + k + "}" in f]) for f in every.FRAMES[:51])
    assert first == 488 and texts[0] == "To make a vegetable curry, you will need"
    assert texts[487] == "Breaking news: students in the city centre" and every.FRAMES[50].startswith("Breaking")
    every.main(["--skip", "488"])
    assert capsys.readouterr().out.splitlines() == texts[488:] and texts[488] == "The heart is an organ that"


def test_a_recording_with_taps_keeps_each_layers_output_over_its_rms(tmp_path, monkeypatch):
    """--taps: each shard holds the residual stream after those layers at every token, over its RMS in float16, and
    the RMS: times the RMS, what the sequence's own pass over the shard's tokens keeps."""
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    data = tmp_path / "own"
    script("gemma_own_text").main(["--gguf", str(path), "--out", str(data), "--minutes", "0.01", "--length", "16",
                                   "--threads", "1", "--taps", "0", "1"])
    z = np.load(sorted(data.glob("*.npz"))[0])
    seq = GemmaSequence.from_gguf(path, threads=1, taps=(0, 1))
    seq.decode(z["tokens"])
    assert z["taps"].shape == (len(z["tokens"]), 2, seq.d) and z["taps"].dtype == np.float16
    assert np.allclose(np.sqrt((z["taps"].astype(np.float64) ** 2).mean(-1)), 1.0, atol=1e-2)
    again = z["taps"].astype(np.float32) * z["taps_rms"][..., None]
    assert np.allclose(again, seq.tapped(), rtol=2e-3, atol=2e-3 * np.abs(seq.tapped()).max())


def test_a_draft_trained_on_taps_fuses_them_and_keeps_the_targets_greedy_text(tmp_path, monkeypatch):
    """--taps through recording and training: the draft's fuse starts as the features alone and learns from the
    taps; saved, it drafts only for a target that keeps those layers (refused in words otherwise), greedy text the
    target's own; its h on the C stack is the torch head's (fuse included) within 8-bit rounding."""
    import torch

    from specviz.drafts.eagle import FeatureHead, fused, layer_config, unroll_states
    from specviz.runtime import gguf as loader
    from specviz.runtime.gemma_sequence import GemmaSequence
    from specviz.slim.feature_draft import stored

    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gemma(tmp_path / "tiny-gemma3.gguf")
    loader.described(tmp_path, path.name)
    data, out = tmp_path / "own", tmp_path / "draft"
    script("gemma_own_text").main(["--gguf", str(path), "--out", str(data), "--minutes", "0.03", "--length", "24",
                                   "--threads", "1", "--taps", "0", "1"])
    script("train_gemma_feature_draft").main([
        "--gguf", str(path), "--data", str(data), "--out", str(out), "--minutes", "0.15", "--vocab", "10",
        "--intermediate", "128", "--heads", "2", "--window", "16", "--batch", "4", "--held-out", "3",
        "--lr", "3e-3", "--threads", "1", "--mass-rows", "64", "--taps", "0", "1"])
    meta = json.loads((out / "feature-draft.json").read_text())
    assert meta["taps"] == [0, 1] and meta["training"]["steps"] > 5
    from specviz.slim.feature_draft import draft_taps

    assert draft_taps(out) == (0, 1) and draft_taps(out, tmp_path) == (0, 1) and draft_taps(tmp_path) == ()
    with pytest.raises(ValueError, match="must keep them"):
        FeatureDraft(GemmaSequence.from_gguf(path, threads=1), out)
    seq = GemmaSequence.from_gguf(path, threads=1, taps=(0, 1))
    draft = FeatureDraft(seq, out)
    cfg, prompt = DecodeConfig(temperature=0.0, max_new_tokens=30, k=3), [2, 9, 5]
    assert speculative(seq, draft, prompt, cfg).new_tokens == autoregressive(seq, prompt, cfg).new_tokens
    from safetensors.numpy import load_file

    head = FeatureHead(layer_config(seq.d, 2, 128, float(seq.dims.eps)), taps=2)
    state = stored(load_file(str(out / "feature-draft.safetensors")))
    state.pop("d2t")
    head.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    assert not torch.equal(head.fuse.weight[:, : 2 * seq.d], torch.zeros(seq.d, 2 * seq.d))  # it learnt from the taps
    ids = [2, 9, 5, 13, 7, 4]
    seq.crop(0)
    seq.decode(ids)
    taps, f = torch.from_numpy(seq.tapped().copy()), torch.from_numpy(seq.features().copy())
    with torch.no_grad():
        want = unroll_states(head.eval(), torch.from_numpy(seq.embed(np.asarray(ids))[None]),
                             fused(head, f, taps)[None], 1)[0][0].numpy()
    draft.length, draft.ids = 0, []
    before = np.concatenate([np.zeros((1, seq.d), np.float32), draft._fused(0, len(ids) - 1)])
    mine = draft._layer(before, np.asarray(ids))
    assert np.abs(mine - want).max() < 0.05 * np.abs(want).max() and np.corrcoef(mine.ravel(), want.ravel())[0, 1] > 0.99
