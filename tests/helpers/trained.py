"""Trained-draft fixtures (tests/drafts/fixtures/trained, written by the real speculators library and
scripts/fixtures/): the tiny target they were written for, edited copies, and a refusal checked to come first."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.drafts.trained.check import check_trained_draft
from specviz.drafts.trained.load import load_trained

FIXTURES = Path(__file__).resolve().parents[1] / "drafts" / "fixtures" / "trained"


def fixture_target(**change):
    """The tiny target the fixtures were written for, rebuilt from its config with its seed."""
    saved = json.loads((FIXTURES / "target_config.json").read_text())
    torch.manual_seed(saved["seed"])
    return LlamaForCausalLM(LlamaConfig(**{**saved["config"], **change})).eval()


def edited(tmp_path, name="eagle3", tensors=None, config=None) -> Path:
    """A copy of a fixture with its tensors (a function of the name -> tensor dict) or config (of the dict) edited."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    if tensors is not None:
        file = next(folder.glob("*.safetensors"))
        save_file(tensors(load_file(str(file))), str(file))
    if config is not None:
        path = folder / "config.json"
        path.write_text(json.dumps(config(json.loads(path.read_text()))))
    return folder


def refusal(folder, target=None) -> str:
    """The message of the refusal, checked to come before any weight is read or any pass run."""
    target = target or fixture_target()
    with pytest.raises(ValueError) as e:
        check_trained_draft(folder, target)
    with pytest.raises(ValueError):
        load_trained(folder, target)
    return str(e.value)


# speculators' console lines (FormatDictFilter over {"train": metrics, ..., "global_step": n}), two logged steps
CONSOLE = """\
[12:00:01] INFO train/loss_0=1.234, train/full_acc_0=0.800, train/cond_acc_0=0.800, train/full_acc_1=0.480, \
train/cond_acc_1=0.600, epoch=0, lr=1.00e-04, global_step=10
[12:00:02] INFO train/loss_0=1.100, train/full_acc_0=0.700, train/cond_acc_0=0.700, train/full_acc_1=0.420, \
train/cond_acc_1=0.600, epoch=0, lr=1.00e-04, global_step=20
"""
