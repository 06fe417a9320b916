"""What learners reported in the trackers, where the project's own code (or the edit the text
invites) meets it: it behaves as TROUBLESHOOTING.md's entry, headed by the message, says."""

import os
import runpy
import warnings

import pytest
import torch

from common import devices, gpu_guide, gpu_howto, measure
from conftest import ROOT, copy_of, run_main
from test_readme import troubleshooting


def entry(message: str) -> str:
    """The TROUBLESHOOTING.md entry whose heading holds ``message``."""
    text = troubleshooting()
    heading = next(line for line in text.splitlines() if line.startswith("### ")
                   and message in line)
    return text[text.index(heading):].split("\n### ")[0]


def warned(call, *args) -> str:
    """Every warning ``call(*args)`` raised, one message a line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(*args)
    return "\n".join(str(w.message) for w in caught)


def test_the_guides_checkpointing_passes_use_reentrant():
    """Left out, torch warns and takes the reentrant variant, whose blocks fed the data get no
    gradients."""
    assert "use_reentrant=False" in entry("the use_reentrant parameter should be passed")
    torch.manual_seed(0)
    matches = []  # (torch 2.4's checkpoint also warns of its own autocast: not this test's)
    assert "use_reentrant" not in warned(lambda: matches.append(
        measure.checkpointed_gradients_match(measure.Blocks(), torch.device("cpu"))))
    assert matches == [True]


def test_a07_keeps_the_transformers_nested_tensor_note_off_the_screen(capsys):
    """The article's sequence-first nn.Transformer warns when built, harmlessly; a07 --gpu-guides
    builds it without showing the warning, and the entry says why it may be ignored."""
    assert "Harmless" in entry("enable_nested_tensor is True")
    with pytest.warns(UserWarning, match="enable_nested_tensor is True, but self.use_nested"):
        gpu_guide.TransformerLM(100, 16, 2, 1, 7)
    assert "enable_nested_tensor" not in warned(gpu_guide.four_architectures,
                                                torch.device("cpu"))
    assert "TransformerLM(1000, 64, 4, 2, 16): " in capsys.readouterr().out


def test_section_4_without_retain_graph_keeps_its_traceback(tmp_path, capsys):
    """The learner's edit: a02's first gradient without retain_graph=True, then backward."""
    assert "retain_graph=True" in entry("Trying to backward through the graph a second time")
    edited = copy_of("a02_autograd.py", tmp_path, {", retain_graph=True)": ")"})
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
        run_main(str(edited), [], capsys)


def test_a_torch_without_torch_accelerator(monkeypatch):
    """torch before 2.6 (an Intel Mac's 2.2.2, the tutorial's 2.4): the device is found by
    asking CUDA and MPS."""
    assert "2.6" in entry("module 'torch' has no attribute 'accelerator'")
    monkeypatch.delattr(torch, "accelerator", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.accelerator() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.accelerator() is None


def test_more_workers_than_cores_is_a_warning_and_the_same_batches(tmp_path, monkeypatch,
                                                                    capsys):
    """Section 6 invites raising num_workers: a04's loaders with 4 on a machine of 2 cores warn,
    and print the batches they print with 0."""
    assert "num_workers=0" in entry("This DataLoader will create 4 worker processes")
    text = runpy.run_path(str(ROOT / "a04_dataloaders.py"))
    edited = runpy.run_path(str(copy_of("a04_dataloaders.py", tmp_path, {
        "shuffle=True,\n        num_workers=0\n": "shuffle=True,\n        num_workers=4\n"})))
    text["section_6"]()
    with_none = capsys.readouterr().out
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.warns(UserWarning, match="Our suggested max number of worker in current system "
                                         "is 2"):
        edited["section_6"]()
    assert capsys.readouterr().out == with_none


def test_the_guides_mixed_precision_on_a_cpu_never_disables_itself(capsys):
    """The article's torch.autocast('cuda') and GradScaler on a CPU or a Mac switch themselves
    off with a warning and train in float32; a07's use the device they train on, and say in
    one line that float16 needs CUDA."""
    assert "torch.autocast(device.type" in entry("but CUDA is not available. Disabling")
    assert "Disabling" not in warned(gpu_guide.mixed_precision, torch.device("cpu"))
    assert " float16: needs CUDA, with torch.amp.GradScaler" in capsys.readouterr().out


def test_the_guides_transformer_hides_windows_missing_flash_attention(monkeypatch, capsys):
    """Windows' CUDA builds warn once from the attention kernel (simulated here): harmless,
    another kernel computes it; a07 --gpu-guides goes on without showing it."""
    assert "Harmless" in entry("1Torch was not compiled with flash attention")
    attention = torch.nn.functional.scaled_dot_product_attention

    def as_on_windows(*args, **kwargs):
        warnings.warn("1Torch was not compiled with flash attention. (Triggered internally at "
                      "C:\\actions-runner\\...\\sdp_utils.cpp:555.)", UserWarning, stacklevel=2)
        return attention(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", as_on_windows)
    assert "flash attention" not in warned(gpu_guide.four_architectures, torch.device("cpu"))
    assert "TransformerLM(1000, 64, 4, 2, 16): " in capsys.readouterr().out


def test_the_howtos_data_parallel_wraps_a_model_already_moved(monkeypatch, capsys):
    """Wrapped while still on the CPU, DataParallel refuses the first batch ('module must have
    its parameters and buffers on device cuda:0'); the how-to's model moves first. A device
    other than the CPU stands in for cuda:0: meta, which every torch has."""
    assert "nn.DataParallel(model.to(" in entry("module must have its parameters and buffers")
    wrapped = []

    class DataParallel(torch.nn.Module):  # records where the model is when it is wrapped
        def __init__(self, module, device_ids=None):
            super().__init__()
            self.module = module
            wrapped.append({p.device for p in module.parameters()})

        def forward(self, x):
            return self.module(x)

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.nn, "DataParallel", DataParallel)
    gpu_howto.data_parallel(torch.device("meta"))
    assert wrapped == [{torch.device("meta")}]
    assert "a batch of 8: output (8, 5)" in capsys.readouterr().out


def test_a01_and_a07_on_the_cpu_never_ask_for_an_intel_gpu(monkeypatch, capsys):
    """Asked whether there is an XPU, torch's XPU build ends Python on some Windows machines
    (0xC0000005, pytorch#157775): a01, and a07 with --device cpu, never ask torch.xpu or
    torch.accelerator (which asks it), as the entry says."""
    def crash(*args, **kwargs):
        raise AssertionError("asked for an accelerator")
    for module in filter(None, (getattr(torch, "xpu", None), getattr(torch, "accelerator", None))):
        for name in ("is_available", "device_count", "current_accelerator"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, crash)
    assert "a07 with `--device cpu`" in entry("0xC0000005")
    assert run_main("a01_tensors.py", [], capsys)[0] == 0
    code, out, err = run_main("a07_gpu_single.py", ["--device", "cpu"], capsys)
    assert code == 0 and "Training device: cpu (--device cpu).\n" in out, err
    if hasattr(torch, "accelerator"):  # torch 2.6+: auto asks through it, as the entry says
        with pytest.raises(AssertionError, match="asked for an accelerator"):
            run_main("a07_gpu_single.py", [], capsys)


def test_the_guides_autocast_is_given_the_devices_type(monkeypatch):
    """torch.autocast wants the device's type ('cuda'), not the device ('cuda:0', which torch
    2.2 refuses; speechbrain#2881): the guide's mixed precision passes device.type."""
    assert "torch.autocast(device.type" in entry("unsupported autocast device_type 'cuda:0'")
    given, autocast = [], torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda device_type, *args, **kwargs: (
        given.append(device_type), autocast(device_type, *args, **kwargs))[1])
    with measure.autocast(torch.device("cpu", 0), "bf16"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert given == ["cpu"]
