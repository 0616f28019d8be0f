"""Hub models without a network: fail-fast offline loading, the web UI's allowlist, the size-bounded
model cache, pair compatibility, and the CUDA loading choices as pure functions."""
import math
import threading
import time

import pytest
import torch
from huggingface_hub import constants

from specviz import models
from specviz.app.store import ModelStore, cache_limit_bytes, param_bytes
from specviz.runtime import hub
from tests.helpers.models import tiny_gpt2, word_tokenizer


@pytest.fixture
def online_mode(monkeypatch):
    """Offline mode off (conftest turns it on) and the reachability cache cleared: the probe decides."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(hub._hub, "at", -math.inf)
    calls = []
    monkeypatch.setattr(hub, "_probe_hub", lambda timeout: calls.append(timeout) or False)
    return calls


@pytest.mark.parametrize("name", [models.preset_targets()[0], "distilbert/distilgpt2"])
def test_unreachable_hub_fails_fast_naming_the_bundled_models(online_mode, monkeypatch, name):
    monkeypatch.setattr(time, "sleep", lambda s: pytest.fail(f"waited {s} s (a retry's back-off) before failing"))
    with pytest.raises(ValueError, match="model hub is unreachable") as err:
        models.load_model(name)
    assert all(m in str(err.value) for m in models.list_models()) and "bundled model" in str(err.value)
    assert len(online_mode) == 1  # probed once


@pytest.mark.slow
def test_a_hanging_probe_is_cut_off_and_the_answer_remembered(monkeypatch, online_mode):
    """The probe answers "reachable" only once released, which happens after the test: a False answer is one
    given while it still hung."""
    calls, release = [], threading.Event()
    monkeypatch.setattr(hub, "_probe_hub", lambda timeout: calls.append(1) or release.wait(60) or True)
    monkeypatch.setattr(hub, "HUB_TIMEOUT_S", 0.3)
    try:
        assert models.hub_reachable() is False and models.hub_reachable() is False
        assert len(calls) == 1  # the second answer is the first one remembered, not a second probe
    finally:
        release.set()


def test_offline_mode_never_probes(monkeypatch):
    monkeypatch.setattr(hub, "_probe_hub", lambda timeout: pytest.fail("probed in offline mode"))
    monkeypatch.setitem(hub._hub, "at", -math.inf)
    assert models.hub_reachable() is False  # conftest sets HF_HUB_OFFLINE=1


def save_model(folder, words, seed=0):
    word_tokenizer(words).save_pretrained(folder)
    tiny_gpt2(vocab=len(words), seed=seed).save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
def test_load_pair_checks_tokenizers_and_never_trusts_remote_code(tmp_path, monkeypatch):
    target = save_model(tmp_path / "t", ["<unk>", "a", "b", "c"])
    good = save_model(tmp_path / "d", ["<unk>", "a", "b", "c"], seed=1)
    bad = save_model(tmp_path / "x", ["<unk>", "b", "a", "c"], seed=2)
    model, draft, tok = models.load_pair(target, good)
    assert tok.convert_ids_to_tokens(1) == "a" and not draft.training and model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == models.param_count(target)
    with pytest.raises(ValueError, match=r"cannot draft for .*differs from the target's on 2 of 4 shared ids"):
        models.check_pair(target, bad)
    from specviz import CrossDrafter  # another tokenizer: it drafts through the target's
    _, cross, _ = models.load_pair(target, bad)
    assert isinstance(cross, CrossDrafter) and cross.overlap == 1.0 and cross.name.endswith("(own tokenizer)")

    from transformers import AutoModelForCausalLM
    seen = []
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda path, **kw: seen.append(kw) or model)
    models.load_model(target)
    assert seen[0]["trust_remote_code"] is False


def fake_store(**kw):
    loaded = []
    store = ModelStore(load_model=lambda n: loaded.append(n) or (torch.nn.Linear(1, 1), None),
                       load_drafter=lambda n: loaded.append(n) or torch.nn.Linear(1, 1), **kw)
    return store, loaded


@pytest.mark.parametrize("policy", ["bundled", "presets", "any"])
def test_allowlist_from_the_environment(monkeypatch, tmp_path, policy):
    monkeypatch.setenv(models.ALLOW_ENV, policy)
    store, loaded = fake_store()
    preset = models.preset_targets()[0]
    assert (preset in store.list_targets()) == (policy != "bundled")
    assert (models.preset_drafts()[0] in store.list_drafters()) == (policy != "bundled")
    if policy == "bundled":
        with pytest.raises(ValueError, match=f"unknown target '{preset}'"):
            store.target(preset)
    else:
        store.target(preset)
    if policy == "any":
        store.draft("someone/some-model")
    else:
        with pytest.raises(ValueError, match="unknown draft 'someone/some-model'"):
            store.draft("someone/some-model")
    for path in (str(tmp_path), "../models/target", "/etc/passwd", "~/x"):  # never a local path from the web
        with pytest.raises(ValueError, match="unknown target"):
            store.target(path)
    assert all(n in {preset, "someone/some-model"} for n in loaded)


def test_unknown_policy_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(models.ALLOW_ENV, "everything")
    with pytest.raises(ValueError, match="SPECVIZ_ALLOW_MODELS='everything': use one of bundled, presets, any"):
        ModelStore()


def test_cache_evicts_least_recently_used_by_parameter_bytes():
    sizes = dict(a=100, b=200, c=300, huge=5000)  # float32 parameters: 4 bytes each
    loads = []
    store = ModelStore(load_model=lambda n: loads.append(n) or (torch.nn.Linear(sizes[n], 1, bias=False), None),
                       list_targets=lambda: list(sizes), limit_bytes=4 * 500)
    for name in ["a", "b", "a", "c"]:  # c pushes out b (a was used more recently)
        store.target(name)
    assert store.cached() == [("target", "a"), ("target", "c")] and loads == ["a", "b", "c"]
    store.target("b")  # reloads b, pushing out a
    assert store.cached() == [("target", "c"), ("target", "b")] and loads[-1] == "b"
    store.target("huge")  # over the limit alone: it stays, everything else goes
    assert store.cached() == [("target", "huge")]
    assert param_bytes(store.target("huge")) == 4 * 5000 and param_bytes("prompt lookup") == 0


def test_an_oversized_model_is_refused_before_any_weight_loads_and_room_is_made_first():
    sizes = dict(a=400, b=400, giant=10**9)  # bytes, as the files' metadata would say
    loads, held = [], []
    store = ModelStore(load_model=lambda n: held.append(list(store.cached())) or loads.append(n) or
                       (torch.nn.Linear(sizes[n] // 4, 1, bias=False), None),
                       list_targets=lambda: list(sizes), limit_bytes=1000, estimate_bytes=lambda n: sizes[n])
    with pytest.raises(ValueError, match=r"'giant' needs about 0\.9 GiB .* allows 0\.0 GiB"):
        store.target("giant")
    assert loads == []  # refused from the metadata alone
    store.target("a")
    store.target("b")  # a (400) + b (400) fit 1000: both stay
    assert store.cached() == [("target", "a"), ("target", "b")]
    sizes["c"] = 500
    store.target("c")  # 800 + 500 > 1000: the oldest goes BEFORE c loads
    assert held[-1] == [("target", "b")] and store.cached() == [("target", "b"), ("target", "c")]


def test_cache_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPECVIZ_MODEL_CACHE_GB", "0.5")
    assert cache_limit_bytes() == 2**29 and ModelStore().limit_bytes == 2**29
    monkeypatch.setenv("SPECVIZ_MODEL_CACHE_GB", "lots")
    with pytest.raises(ValueError, match="SPECVIZ_MODEL_CACHE_GB must be a number of GiB"):
        cache_limit_bytes()


def test_store_pair_drafts_through_the_targets_tokenizer_for_a_draft_with_another():
    from specviz import CrossDrafter

    tokenizers = {"t": word_tokenizer(["<unk>", "a", "b"]), "same": word_tokenizer(["<unk>", "a", "b"]),
                  "other": word_tokenizer(["<unk>", "x", "y", "a"]), "rule": word_tokenizer(["<unk>", "z"])}
    lms = {n: tiny_gpt2(vocab=len(t)) for n, t in tokenizers.items()}
    store = ModelStore(load_model=lambda n: (lms[n], tokenizers[n]),
                       load_drafter=lambda n: lms[n] if n in ("same", "other") else torch.nn.Linear(1, 1),
                       load_tokenizer=tokenizers.__getitem__, list_targets=lambda: ["t"],
                       list_drafters=lambda: ["same", "other", "rule", "prompt-lookup"])
    assert store.pair("t", "same")[1] is tokenizers["t"] and store.pair("t", "same")[2] is lms["same"]
    store.pair("t", "prompt-lookup")  # model-free: nothing to compare
    cross = store.pair("t", "other")[2]
    assert isinstance(cross, CrossDrafter) and cross.model is lms["other"] and cross.target_tok is tokenizers["t"]
    assert cross.overlap == pytest.approx(2 / 3) and cross.name == "other (own tokenizer)"
    with pytest.raises(ValueError, match="'rule' cannot draft for 't': its tokenizer differs .* not a causal LM"):
        store.pair("t", "rule")


def test_cuda_choices():
    assert models.default_dtype("cpu") == torch.float32 and models.default_dtype(None) == torch.float32
    gib = 2**30
    assert models.needs_device_map(7_600_000_000, torch.bfloat16, 16 * gib)  # a 7B target on a 16 GB GPU
    assert not models.needs_device_map(1_500_000_000, torch.bfloat16, 16 * gib)
    assert models.needs_device_map(1_500_000_000, torch.float32, 6 * gib)
    assert not models.needs_device_map(None, torch.bfloat16, 1)  # unknown size: load normally


def test_presets_are_hub_ids_and_drafts_differ_from_targets():
    for target, drafts in [*models.HUB_PRESETS.items(), *models.CROSS_PRESETS.items()]:
        assert models.is_hub_id(target) and drafts and target not in drafts
        assert all(models.is_hub_id(d) for d in drafts)
    for target, drafts in models.CROSS_PRESETS.items():  # cross-family pairs: the target is a preset, not its drafts
        assert target in models.preset_targets() and not set(drafts) & set(models.HUB_PRESETS.get(target, ()))
        assert set(drafts) <= set(models.preset_drafts())
    assert not models.is_hub_id("../etc") and not models.is_hub_id("/abs/path") and not models.is_hub_id("a/b/c")


def test_store_loads_on_its_device(monkeypatch):
    seen = []
    monkeypatch.setattr(models, "load_model", lambda name, device=None, dtype=None: seen.append(device) or
                        (torch.nn.Linear(1, 1), None))
    monkeypatch.setenv("SPECVIZ_DEVICE", "cuda:1")
    store = ModelStore(list_targets=lambda: ["x"])
    store.target("x")
    assert store.device == "cuda:1" and seen == ["cuda:1"]
