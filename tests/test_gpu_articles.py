"""a07 --gpu-guides --benchmark, a07's one run: sections 9.1 and 9.2, Exercise A.4, and the two
GPU articles, corrected, on the CPU (every machine); tests/test_gpu.py runs them on CUDA."""

import re
import warnings
from types import SimpleNamespace

import pytest
import torch

import the_text
from common import gpu_guide, measure
from common.gpu_guide import LSTMGenerator, memory_and_checkpointing, mixed_precision
from conftest import TUTORIAL_LOSS_LINES, loss_lines, section

HEADINGS = ["GPU how-to and GPU guide: device basics",
            "GPU how-to: DataParallel and DistributedDataParallel",
            "GPU guide: mixed precision",
            "GPU guide: the batch-size snippet, corrected",
            "GPU guide: batch size, memory and gradient checkpointing",
            "GPU guide: four architectures, as published (two defects fixed)"]


@pytest.fixture(scope="module")
def a07(runs):
    """a07 with the articles and the benchmark (sizes 64 and 256) (conftest.RUNS): the one run
    of a07, as a learner runs it, from a folder of its own."""
    result = runs("a07 --gpu-guides")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result


@pytest.fixture(scope="module")
def guides(a07) -> str:
    return a07.stdout


def test_a07_sections_9_1_and_9_2_on_a_cpu(guides):
    text = section(guides, "9.1 Computations on GPU devices")
    assert "On the CPU: tensor([5., 7., 9.])\nTraining device: cpu (no accelerator found).\n" \
        in text
    assert "tensor([5., 7., 9.], device='cuda:0')" in text
    assert loss_lines(section(guides, "9.2 Single-GPU training")) == TUTORIAL_LOSS_LINES
    assert "Training accuracy: 1.0\nTest accuracy: 1.0\n" in section(guides,
                                                                      "9.2 compute_accuracy")


def test_a07_runs_alone_from_another_folder_and_leaves_no_litter(a07):
    assert list(a07.cwd.iterdir()) == []


def test_exercise_a4_table(guides):
    text = section(guides, "9.2 Exercise A.4")
    assert [size for size, ms in re.findall(r"^ +(\d+) \| +(\d+\.\d{3})$", text, re.M)
            if float(ms) > 0] == ["64", "256"]
    assert "No accelerator on this machine, so there is no second column" in text
    assert re.search(r"^The solution's own case, 100x200 @ 200x300: CPU \d+\.\d us$", text, re.M)


def test_the_tutorials_output_comes_first(guides):
    positions = [guides.index(f"=== {h}") for h in HEADINGS]
    assert positions == sorted(positions)
    assert positions[0] > guides.index("=== 9.2 compute_accuracy")


def test_device_basics_on_the_cpu(guides):
    text = section(guides, HEADINGS[0])
    assert "Device:  cpu\nDevice:  cpu\nDevice:  cpu\n" in text
    assert "y.get_device(): -1" in text
    assert "current_device() and get_device_name(0) would name GPU 0 (no CUDA" in text
    assert re.search(r'^x\.to\("cuda:0"\) \(no such GPU\) fails: \S', text, flags=re.M)
    if torch.version.cuda is None:  # a CPU-only build says so; a CUDA build without a GPU
        assert "fails: Torch not compiled with CUDA enabled" in text  # names the driver
    assert "(1, 3, 224, 224) -> (1, 64, 224, 224), back on cpu" in text


def test_data_parallel_output_shape(guides):
    text = section(guides, HEADINGS[1])
    assert "LinearRegression(\n  (linear): Linear(in_features=2, out_features=5, bias=True)\n)" \
        in text
    assert re.search(r"nn\.DataParallel over \d+ GPU\(s\), a batch of 8: output \(8, 5\)", text)
    assert "DistributedDataParallelCPU: a deprecated alias" in text


def test_mixed_precision_bf16_reaches_accuracy_1(guides):
    text = section(guides, HEADINGS[2])
    assert "float32: losses 0.75, 0.65, 0.44, 0.13, 0.03, 0.00; training accuracy 1.0" in text
    assert re.search(r"bfloat16: losses 0\.7\d, [\d., ]+; training accuracy 1\.0", text)
    assert "torch.cuda.amp, which the guide names, is deprecated" in text


def test_the_batch_size_snippet_trains_on_the_device(guides):
    """The guide's snippet, corrected: a real DataLoader line, a model, moved to the device."""
    text = section(guides, HEADINGS[3])
    assert re.search(r"^batch_size = 128: 8 batches for 1000 examples \(the last one 104\), one "
                     r"epoch on cpu; training accuracy 0\.9\d", text, flags=re.M)


def memory_rows(text: str) -> dict[int, tuple[float, float, float]]:
    rows = re.findall(r"^ +(\d+) \| +([\d.]+) \| +([\d.]+) \| +([\d.]+)", text, flags=re.M)
    return {int(batch): tuple(map(float, values)) for batch, *values in rows}


def test_memory_grows_with_batch_and_checkpointing_lowers_it(guides):
    text = section(guides, HEADINGS[4])
    rows = memory_rows(text)
    assert list(rows) == [64, 256, 1024]
    # activations only, as the label says: 4 times the batch, 4 times the bytes (the saved
    # weights, 15.7 MB of the 18.0 that batch 64 counted before, stay out of the columns)
    assert "Measured: the activations autograd\nkeeps for the backward pass" in text
    assert all(3.8 < rows[1024][i] / rows[256][i] < 4.2 for i in range(3))
    assert re.search(r"^Not counted above: the weights autograd keeps beside them \(1[56]\.\d MB "
                     r"plain\), whatever the batch\.$", text, flags=re.M)
    for plain_mb, checkpointed_mb, bf16_mb in rows.values():
        assert checkpointed_mb < plain_mb and bf16_mb < plain_mb
    assert "Gradients with checkpointing equal those without: True" in text


def test_four_architectures_run_on_the_input_their_code_implies(guides):
    text = section(guides, HEADINGS[5])
    assert "ConvNet(num_classes=10): 422,218 parameters; input (4, 3, 28, 28) -> output (4, 10)" \
        in text
    assert "input (7, 4) -> output (4, 5)" in text  # RNNClassifier: (sequence, batch)
    assert "input (4, 7), (2, 4, 64), (2, 4, 64) -> output (4, 1000)" in text  # LSTMGenerator
    assert "input (16, 4), (16, 4) -> output (16, 4, 1000)" in text  # TransformerLM


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_the_traps_a07_names_are_what_the_classes_do(guides):
    """Each line a07 prints under a class, run: CIFAR-10's images fail with the message it
    quotes; batch-first ids give the RNN one answer per position and mix the Transformer's
    sequences, with no error."""
    text = section(guides, HEADINGS[5])
    torch.manual_seed(0)
    with pytest.raises(RuntimeError) as raised:
        gpu_guide.ConvNet(num_classes=10)(torch.randn(4, 3, 32, 32))
    assert f"CIFAR-10's 32 x 32 fail: {raised.value}\n" in text
    assert "(batch, sequence) ids give one answer per position, silently: pass ids.T" in text
    batch_first = torch.randint(0, 1000, (4, 7))
    assert gpu_guide.RNNClassifier(1000, 32, 64, 5)(batch_first).shape == (7, 5)
    assert "(batch, sequence) ids mix a batch's sequences, silently: pass ids.T" in text
    model = gpu_guide.TransformerLM(1000, 64, 4, 2, 16).eval()
    other = batch_first.clone()
    other[0] = (other[0] + 1) % 1000  # only the first of the 4 sequences changed
    with torch.no_grad():
        moved = model(batch_first, batch_first)[1:] - model(other, other)[1:]
    assert moved.abs().max() > 1e-3  # the other three sequences' outputs changed


def published_and_ours(name: str, *args):
    """The article's class (tests/the_text.py) and ours, ours holding the article's weights."""
    torch.manual_seed(0)
    article = getattr(the_text, name)(*args).eval()
    ours = getattr(gpu_guide, name)(*args).eval()
    ours.load_state_dict(article.state_dict())  # strict: the same names and shapes
    return article, ours


@pytest.mark.parametrize(("name", "args", "inputs"), [
    ("ConvNet", (10,), lambda: (torch.randn(4, 3, 28, 28),)),
    ("RNNClassifier", (100, 8, 16, 3), lambda: (torch.randint(0, 100, (7, 4)),)),
    ("LSTMGenerator", (50, 8, 16, 2),
     lambda: (torch.randint(0, 50, (4, 7)), torch.zeros(2, 4, 16), torch.zeros(2, 4, 16))),
])
@torch.no_grad()
def test_our_classes_compute_what_the_articles_compute(name, args, inputs):
    """The three classes without a defect are the article's: with its weights, on the input
    its code implies, the same outputs (the LSTM's states too)."""
    article, ours = published_and_ours(name, *args)
    given = inputs()
    expected, got = article(*given), ours(*given)
    if name == "LSTMGenerator":  # (logits, (hn, cn))
        expected, got = (expected[0], *expected[1]), (got[0], *got[1])
    else:
        expected, got = (expected,), (got,)
    assert [torch.equal(a, b) for a, b in zip(expected, got, strict=True)] == [True] * len(got)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@torch.no_grad()
def test_our_transformer_has_the_articles_parameters_and_is_causal(monkeypatch):
    """The article's TransformerLM, built with a PositionalEncoding (it defines none): ours has
    the same parameters under the same names, and target position t sees no token after t."""
    monkeypatch.setattr(the_text, "PositionalEncoding", gpu_guide.PositionalEncoding,
                        raising=False)
    _, ours = published_and_ours("TransformerLM", 100, 32, 4, 2, 16)
    src, tgt = torch.randint(0, 100, (16, 2)), torch.randint(0, 100, (16, 2))
    later = tgt.clone()
    later[10] = (later[10] + 1) % 100
    before, after = ours(src, tgt), ours(src, later)
    assert torch.allclose(before[:10], after[:10], atol=1e-6)  # t < 10: unchanged
    assert not torch.allclose(before[10:], after[10:])  # t >= 10 sees the change


def test_the_lstm_returns_its_states_for_the_next_step():
    """The article's interface: (logits, (hn, cn)); generation carries the states on, so one
    token at a time, from zero states, gives what the whole sequence gives."""
    torch.manual_seed(0)
    model = LSTMGenerator(50, 8, 16, 2).eval()
    tokens, zeros = torch.randint(0, 50, (4, 7)), torch.zeros(2, 4, 16)
    logits, (hn, cn) = model(tokens, zeros, zeros)
    assert logits.shape == (4, 50) and hn.shape == cn.shape == (2, 4, 16)
    h, c = zeros, zeros
    with torch.no_grad():
        for step in range(7):
            stepwise, (h, c) = model(tokens[:, step:step + 1], h, c)
    assert torch.allclose(stepwise, logits, atol=1e-6)


class Torch25MpsAutocast:
    """torch.autocast as torch 2.5 builds it on MPS: float16 only; for bfloat16 it warns and
    disables itself, so that the run computes in float32."""

    def __init__(self, dtype):
        self._enabled = dtype == torch.float16
        if not self._enabled:
            warnings.warn("In MPS autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nMPS Autocast only supports dtype of torch.float16 "
                          "currently.", stacklevel=2)


def as_on_a_mac(monkeypatch, torch_version: str) -> None:
    """The queries that describe the machine, patched: Apple's MPS present (macOS 14: every
    dtype), no CUDA, and MPS autocast as ``torch_version`` (2.4: none; 2.5: float16 only) has
    it."""
    monkeypatch.setattr(measure, "dtype_problem", lambda dtype, device_type: None)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if hasattr(torch, "accelerator"):  # torch 2.6+
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
        monkeypatch.setattr(torch.accelerator, "current_accelerator",
                            lambda *args: torch.device("mps"))
    # 2.4 has no MPS autocast at all (whatever this torch has); 2.5 one in float16 only
    monkeypatch.setattr(torch.amp, "is_autocast_available",
                        lambda device: torch_version != "2.4" or device != "mps",
                        raising=False)  # torch 2.2 has no such query
    if torch_version != "2.4":
        autocast_as_torch_2_5_on_mps(monkeypatch, "mps")


def autocast_as_torch_2_5_on_mps(monkeypatch, device_type: str) -> None:
    """torch.autocast on ``device_type`` behaves as torch 2.5's on MPS (float16 only)."""
    real = torch.autocast

    def autocast(device_type: str, dtype: torch.dtype, _lacking: str = device_type):
        if device_type == _lacking:
            return Torch25MpsAutocast(dtype)
        return real(device_type=device_type, dtype=dtype)

    monkeypatch.setattr(torch, "autocast", autocast)


@pytest.mark.parametrize(("torch_version", "dtype", "expected"), [
    ("2.4", torch.bfloat16, "torch {version} has no autocast on mps"),
    ("2.5", torch.bfloat16, "bfloat16 autocast on mps with torch {version}: In MPS autocast, "
                            "but the target dtype is not supported. Disabling autocast."),
    ("2.5", torch.float16, None),
])
def test_the_autocast_a_mac_lacks_is_named(torch_version, dtype, expected, monkeypatch):
    """Apple silicon: torch 2.4 has no MPS autocast, 2.5 none in bfloat16 (it warns and trains
    in float32): torch is asked, so that no run is labelled with a precision it did not use."""
    as_on_a_mac(monkeypatch, torch_version)
    expected = expected and expected.format(version=torch.__version__)
    assert measure.amp_problem(dtype, "mps") == expected


def test_guides_leave_out_a_precision_the_device_lacks(monkeypatch, capsys):
    """bfloat16 on a Mac with torch 2.5: the mixed-precision and memory parts each say so in one
    line, and no row or column is labelled bfloat16."""
    as_on_a_mac(monkeypatch, "2.5")
    trained = []
    monkeypatch.setattr(gpu_guide, "train_in_precision",
                        lambda amp, device: trained.append(amp) or ([0.5], 1.0))
    mixed_precision(torch.device("mps"))
    out = capsys.readouterr().out
    assert trained == [None]
    assert ("bfloat16: left out: bfloat16 autocast on mps with torch "
            f"{torch.__version__}: In MPS autocast") in out
    assert "bfloat16: losses" not in out
    # the memory part on the CPU, whose autocast is made to lack bfloat16 as MPS's does
    autocast_as_torch_2_5_on_mps(monkeypatch, "cpu")
    monkeypatch.setattr(measure, "Blocks", lambda real=measure.Blocks: real(width=32, depth=2))
    memory_and_checkpointing(torch.device("cpu"))
    out = capsys.readouterr().out
    assert out.count("left out") == 1
    assert "bf16" not in out
    assert len(memory_rows(out)) == 0  # rows of three columns only
    assert re.search(r"^ +1024 \| +[\d.]+ \| +[\d.]+$", out, flags=re.M)


def mps_without_bfloat16(monkeypatch, message: str) -> None:
    """torch.zeros as on such a Mac: bfloat16 on MPS refused (torch's TORCH_CHECK_TYPE, a
    TypeError), other MPS tensors made on the CPU."""
    real = torch.zeros

    def zeros(*size, dtype=None, device=None, **kwargs):
        if str(device) == "mps":
            if dtype == torch.bfloat16:
                raise TypeError(message)
            device = "cpu"
        return real(*size, dtype=dtype, device=device, **kwargs)

    monkeypatch.setattr(torch, "zeros", zeros)


@pytest.mark.parametrize("message", [
    "BFloat16 is not supported on MPS",  # an Intel Mac's AMD GPU, torch 2.2.2 (pytorch#141864)
    "MPS BFloat16 is only supported on MacOS 14 or newer",  # macOS 13, torch up to 2.8
])
def test_an_mps_without_bfloat16_leaves_its_rows_out_in_one_line(message, monkeypatch, capsys):
    """--benchmark's tensor cores and --gpu-guides' precisions: one line each, no traceback,
    nothing timed or trained in bfloat16."""
    mps_without_bfloat16(monkeypatch, message)
    timed = []
    monkeypatch.setattr(measure, "time_matmul", lambda shape, device, dtype=torch.float32:
                        timed.append(dtype) or 0.001)
    gpu_guide.tensor_cores(256, torch.device("mps"))
    assert f"bfloat16: left out: {message}\n" in capsys.readouterr().out
    assert timed == [torch.float32, torch.float16]
    assert gpu_guide.left_out("bfloat16", torch.device("mps"))
    assert capsys.readouterr().out == f"bfloat16: left out: bfloat16 on mps: {message}\n"


def test_benchmark_shows_the_lower_precisions(guides):
    """bfloat16 on this machine's CPU: timed where it has hardware for it (AVX512-BF16, AMX),
    else left out (a probe decides; the tests below simulate each answer)."""
    text = section(guides, "GPU guide: tensor cores and lower precisions")
    assert re.search(r"^ +float32: +[\d.]+ ms$", text, flags=re.M)
    assert re.search(r"^ +bfloat16: ( *[\d.]+ ms, +[\d.]+x float32's speed|left out: a 256 x 256 "
                     r"product took \d+x float32's time, .*)$", text, flags=re.M)


@pytest.mark.parametrize(("device", "capability", "offered", "note"), [
    ("cuda", (7, 5), ["float16"], "below compute capability 8.0 (this GPU: 7.5; torch "
                                  "emulates bfloat16"),  # Colab's T4
    ("cuda", (8, 0), ["TF32", "bfloat16", "float16"], ""),
    ("cuda", (6, 1), [], "on a GTX 10xx at a fraction of float32's speed"),  # Pascal
    ("mps", None, ["bfloat16", "float16"], "CUDA GPUs only"),
    ("cpu", None, ["bfloat16"], "CUDA GPUs only"),
    # ROCm answers gfx numbers as capabilities (gfx1030: (10, 3), gfx906 and gfx90a: (9, 0))
    ("gfx1030", (10, 3), [], "no matrix cores on gfx1030"),  # an RX 6800 (RDNA2)
    ("gfx906", (9, 0), [], "no matrix cores on gfx906"),  # an MI50
    ("gfx90a:sramecc+:xnack-", (9, 0), ["bfloat16", "float16"], "this GPU: gfx90a"),  # MI210
    ("gfx1100", (11, 0), ["bfloat16", "float16"], "from gfx942 on"),  # an RX 7900 XTX
    ("gfx942:sramecc+:xnack-", (9, 4), ["TF32", "bfloat16", "float16"], ""),  # an MI300X
])
def test_benchmark_offers_only_precisions_with_fast_hardware(device, capability, offered, note,
                                                            monkeypatch):
    """Simulated capabilities: a T4 reports bfloat16 as supported (through emulation), but
    has no tensor cores for it or for TF32, so neither is offered as a speed-up. AMD's GPUs by
    their gfx name (gcnArchName), not by the capability ROCm's torch answers."""
    if device.startswith("gfx"):
        monkeypatch.setattr(torch.version, "hip", "6.4.43484")
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda index=None, gfx=device: SimpleNamespace(gcnArchName=gfx))
        device = "cuda"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    fast, lacking = gpu_guide.lower_precisions(torch.device(device))
    assert [name for name, _, _ in fast] == offered
    assert note in lacking


@pytest.mark.parametrize(("bf16_seconds", "line"), [
    (0.03, "bfloat16: left out: a 256 x 256 product took 30x float32's time, so this CPU has "
           "no bfloat16 hardware (AVX512-BF16, AMX) and 2048 x 2048 would take minutes"),
    (0.0005, "bfloat16:     0.500 ms,   2.0x float32's speed"),
])
def test_benchmark_times_bfloat16_only_on_a_cpu_with_hardware_for_it(bf16_seconds, line,
                                                                     monkeypatch, capsys):
    """A CPU without AVX512-BF16 or AMX (most laptops) converts every element: one 2048 x 2048
    bfloat16 product took 67 s on a 2-core VM, for a line that said 'slow'. A small product
    decides; a CPU with the hardware gets the row."""
    timed = []
    monkeypatch.setattr(measure, "time_matmul",
                        lambda shape, device, dtype=torch.float32: timed.append((shape[0], dtype))
                        or (bf16_seconds if dtype == torch.bfloat16 else 0.001))
    gpu_guide.tensor_cores(2048, torch.device("cpu"))
    assert ((2048, torch.bfloat16) in timed) == (bf16_seconds < 0.002)
    assert (measure.PROBE, torch.bfloat16) in timed
    assert line in capsys.readouterr().out


@pytest.mark.parametrize("cuda", [False, True])
def test_float16_says_why_this_run_has_none(cuda, monkeypatch, capsys):
    """Seen on an H200: --device cpu beside a CUDA GPU printed '(no CUDA GPU here)'."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(gpu_guide, "train_in_precision", lambda amp, device: ([0.5], 1.0))
    mixed_precision(torch.device("cpu"))
    assert (" float16: needs CUDA, with torch.amp.GradScaler, which scales the loss so that "
            "small float16 gradients do not vanish ("
            + ("this run is on cpu)" if cuda else "no CUDA GPU here)")) in capsys.readouterr().out
