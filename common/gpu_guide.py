"""The GPU guide that came with the tutorial, runnable: a07 --gpu-guides runs each part under a
heading, on a07's device, and says in one line what cannot run there; a07 --benchmark times its
tensor cores (and, with time_matmul, section 9.1's Exercise A.4).

First the guide's models, with its layers and interfaces, and what was broken as published
fixed (each fix says FIXED and why); then the parts that run and measure them."""

from __future__ import annotations

import contextlib
import math
import statistics
import timeit
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

from common import NeuralNetwork, compute_accuracy, toy_loaders
from common.devices import device_to_show
from common.runner import heading

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class ConvNet(nn.Module):
    """The guide's image classifier: two convolution blocks, then two linear layers. The
    article's layers, grouped here in two nn.Sequential (`features`, `classifier`) so that the
    fix below sits where the image's size is decided; the same 422,218 parameters."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            # FIXED: the first linear layer expects 64 x 7 x 7 inputs, which only 28 x 28
            # images give; pooling to 7 x 7 makes any image size fit (no new parameters) on
            # CPUs and CUDA. Apple's MPS pools only where 7 divides the size reached here
            # (images of 28, 56, ... 224 pixels; pytorch/pytorch#96056)
            nn.AdaptiveAvgPool2d((7, 7)),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class RNNClassifier(nn.Module):
    """The guide's sequence classifier: embedding, RNN, a linear layer on the last state."""

    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        # FIXED: nn.RNN reads (sequence, batch) by default; the data is (batch, sequence)
        self.rnn = nn.RNN(embedding_dim, hidden_dim, batch_first=True)
        self.fc = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        embedded = self.embedding(x)
        _, hidden = self.rnn(embedded)  # hidden: (1, batch, hidden_dim)
        return self.fc(hidden[-1])


class LSTMGenerator(nn.Module):
    """The guide's text generator: embedding, LSTM, a linear layer on the last step."""

    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_dim, vocab_size)

    def init_states(self, batch_size, device):
        # FIXED: the article's forward needs h0 and c0 but never builds them
        shape = (self.num_layers, batch_size, self.hidden_dim)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def forward(self, x, states=None):
        # the article's interface: the next token's logits, and the states (hn, cn) that the
        # next generation step continues from
        h0, c0 = states if states is not None else self.init_states(x.shape[0], x.device)
        out, (hn, cn) = self.lstm(self.embedding(x), (h0, c0))
        return self.fc(out[:, -1, :]), (hn, cn)


class PositionalEncoding(nn.Module):
    """FIXED: used by the article but never defined. The sinusoidal encoding of "Attention Is
    All You Need", added to the embeddings (batch, sequence, d_model)."""

    def __init__(self, d_model, max_len=512):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        scale = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        encoding = torch.zeros(max_len, d_model)
        encoding[:, 0::2] = torch.sin(position * scale)
        encoding[:, 1::2] = torch.cos(position * scale)
        self.register_buffer("encoding", encoding)

    def forward(self, x):
        return x + self.encoding[:x.shape[1]]


class TransformerLM(nn.Module):
    """The guide's language model: embedding, positions, Transformer layers, a linear layer."""

    def __init__(self, vocab_size, d_model, nhead, num_layers, seq_len):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        # FIXED: the positions are added to the embeddings, not to the token ids
        self.pos_encoder = PositionalEncoding(d_model, max_len=seq_len)
        # FIXED: batch-first layers, for (batch, sequence) data; the article's nn.Transformer
        # reads (sequence, batch) and also wants a decoder input a language model does not have
        layer = nn.TransformerEncoderLayer(d_model, nhead, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, num_layers)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        # FIXED: a causal mask, so that position t never sees the tokens it must predict
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        hidden = self.transformer(self.pos_encoder(self.embedding(x)), mask=mask, is_causal=True)
        return self.fc(hidden)  # logits for every position: (batch, sequence, vocab)


def run(device: torch.device) -> None:
    """Every part, on a07's device."""
    mixed_precision(device)
    batch_size_snippet(device)
    with warnings.catch_warnings():  # torch 2.4's checkpoint uses its own deprecated autocast
        warnings.filterwarnings("ignore", message=r".*torch\.cpu\.amp\.autocast",
                                category=FutureWarning)
        memory_and_checkpointing(device)
    four_architectures(device)


def mixed_precision(device: torch.device) -> None:
    heading("GPU guide: mixed precision (section 9.2's model under torch.autocast)")
    results = {"float32": train_in_precision(None, device)}
    if not left_out("bfloat16", device):
        results["bfloat16"] = train_in_precision("bf16", device)
    if device.type == "cuda" and not left_out("float16", device):
        results["float16"] = train_in_precision("fp16", device)
    for name, (losses, accuracy) in results.items():
        print(f"{name:>8}: losses {', '.join(f'{loss:.2f}' for loss in losses)}; "
              f"training accuracy {accuracy}")
    if device.type != "cuda":  # the GPU's absence, or the learner's --device
        where = f"this run is on {device.type}" if torch.cuda.is_available() else "no CUDA GPU here"
        print(f" float16: needs CUDA, with torch.amp.GradScaler, which scales the loss so "
              f"that small float16 gradients do not vanish ({where})")
    print("torch.cuda.amp, which the guide names, is deprecated: use torch.autocast(device_type,"
          " dtype)\nand torch.amp.GradScaler('cuda') (float16 only; bfloat16 needs no scaler).")


def left_out(precision: str, device: torch.device) -> bool:
    """Where this torch cannot compute in ``precision`` on the device (bfloat16 on MPS before
    torch 2.6, say), one line says so and the part leaves it out: no row is ever labelled with a
    precision that torch quietly replaced by float32."""
    problem = amp_problem(getattr(torch, precision), device.type)
    if problem:
        print(f"{precision:>8}: left out: {problem}")
    return problem is not None


def batch_size_snippet(device: torch.device) -> None:
    """The guide's batch-size snippet: a DataLoader of 128 examples a batch, a model, a pass
    over the data on the device."""
    heading("GPU guide: the batch-size snippet, corrected")
    torch.manual_seed(0)
    X = torch.randn(1000, 2)
    dataset = TensorDataset(X, (X[:, 0] > X[:, 1]).long())  # FIXED: data the snippet lacks
    batch_size = 128
    # FIXED: the article's DataLoader line is garbled
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    model = NeuralNetwork(2, 2)  # FIXED: the article's `YourModel` is a placeholder
    model = model.to(device)  # FIXED: the article never moves the model to the device
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for features, labels in train_loader:
        features, labels = features.to(device), labels.to(device)
        loss = nn.functional.cross_entropy(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"batch_size = {batch_size}: {len(train_loader)} batches for {len(dataset)} examples "
          f"(the last one {len(dataset) % batch_size}), one epoch on {device.type}; training "
          f"accuracy {compute_accuracy(model, train_loader, device):.2f}. A larger batch fills "
          f"the GPU better and needs more memory (below).")


def memory_and_checkpointing(device: torch.device) -> None:
    heading("GPU guide: batch size, memory and gradient checkpointing")
    torch.manual_seed(0)
    model = Blocks().to(device)
    cuda = device.type == "cuda"
    bf16 = not left_out("bfloat16", device)
    print("One training step of 8 blocks of Linear(512, 512) + ReLU. Measured: the activations "
          "autograd\nkeeps for the backward pass"
          + (", and the CUDA allocator's peak." if cuda else
             "; on CUDA the allocator's peak is shown too."))
    print(f"{'batch':>6} | {'plain (MB)':>10} | {'checkpointed':>12}"
          + (f" | {'bf16 autocast':>13}" if bf16 else "")
          + (f" | {'CUDA peak, plain':>16}" if cuda else ""))
    for batch in (64, 256, 1024):
        plain, weights, peak = training_step_memory(model, batch, device)
        model.checkpointed = True
        checkpointed, _, _ = training_step_memory(model, batch, device)
        model.checkpointed = False
        line = f"{batch:>6} | {plain / 1e6:>10.1f} | {checkpointed / 1e6:>12.1f}"
        if bf16:
            mixed, _, _ = training_step_memory(model, batch, device, amp="bf16")
            line += f" | {mixed / 1e6:>13.1f}"
        print(line + (f" | {peak / 1e6:>16.1f}" if cuda else ""))
    print(f"Not counted above: the weights autograd keeps beside them ({weights / 1e6:.1f} MB "
          f"plain), whatever the batch.")
    print("Gradients with checkpointing equal those without:",
          checkpointed_gradients_match(model, device))


def four_architectures(device: torch.device) -> None:
    heading("GPU guide: four architectures, corrected")
    torch.manual_seed(0)
    cases = [
        # 56 x 56 images: not the 28 x 28 the article's layer sizes assume, yet pooled to 7 x 7
        # on every device (Apple's MPS pools only to a size that divides the input's)
        ("ConvNet(num_classes=10)", ConvNet(10), torch.randn(4, 3, 56, 56)),
        ("RNNClassifier(1000, 32, 64, 5)", RNNClassifier(1000, 32, 64, 5),
         torch.randint(0, 1000, (4, 7))),
        ("LSTMGenerator(1000, 32, 64, 2)", LSTMGenerator(1000, 32, 64, 2),
         torch.randint(0, 1000, (4, 7))),
        ("TransformerLM(1000, 64, 4, 2, 16)", TransformerLM(1000, 64, 4, 2, 16),
         torch.randint(0, 1000, (4, 16))),
    ]
    for name, model, batch in cases:
        model = model.to(device)
        out = model(batch.to(device))
        out = out[0] if isinstance(out, tuple) else out  # LSTMGenerator: (logits, states)
        out.float().mean().backward()
        parameters = sum(p.numel() for p in model.parameters())
        print(f"{name}: {parameters:,} parameters; input {tuple(batch.shape)} -> output "
              f"{tuple(out.shape)}, forward and backward on {device.type}")


class Blocks(nn.Module):
    """A stack of Linear + ReLU blocks, big enough that its activations dominate memory;
    with ``checkpointed``, each block's activations are recomputed in the backward pass
    instead of kept (torch.utils.checkpoint, use_reentrant=False as torch recommends)."""

    def __init__(self, width: int = 512, depth: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(),
                                                  nn.Linear(width, width), nn.ReLU())
                                    for _ in range(depth))
        self.checkpointed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def from_parameters_only(fn: Any) -> bool:
    """A saved tensor's grad_fn that leads back to parameters alone: a weight's view or cast."""
    if fn is None:
        return False
    if type(fn).__name__ == "AccumulateGrad":
        return True
    return bool(fn.next_functions) and all(from_parameters_only(f) for f, _ in fn.next_functions)


def bytes_saved_for_backward(step: Callable[[], Any]) -> tuple[int, int]:
    """(activations, weights): the bytes of the tensors autograd keeps for the backward pass
    while ``step`` builds its graph (each storage counted once), split into what the batch
    makes (activations: batch size drives them, checkpointing trades them for recomputation)
    and the weights, or their casts and views, kept beside them. The same on every device."""
    storages: dict[int, tuple[int, bool]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        weight = (tensor.is_leaf and tensor.requires_grad) or from_parameters_only(tensor.grad_fn)
        storages[storage.data_ptr()] = (storage.nbytes(), weight)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return (sum(size for size, weight in storages.values() if not weight),
            sum(size for size, weight in storages.values() if weight))


def training_step_memory(model: Blocks, batch_size: int, device: torch.device,
                         amp: str | None = None) -> tuple[int, int, int | None]:
    """One forward and backward pass: (activations saved for backward, weights saved beside
    them, the CUDA allocator's peak bytes or None off CUDA), in bytes."""
    x = torch.randn(batch_size, model.blocks[0][0].in_features, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> None:
        with autocast(device, amp):
            loss = model(x).float().pow(2).mean()
        loss.backward()

    activations, weights = bytes_saved_for_backward(step)
    model.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return activations, weights, peak


def checkpointed_gradients_match(model: Blocks, device: torch.device) -> bool:
    """The gradients with checkpointing equal those without: recomputing gives the same."""
    x = torch.randn(16, model.blocks[0][0].in_features, device=device)
    grads = []
    for checkpointed in (False, True):
        model.checkpointed = checkpointed
        model.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.checkpointed = False
    model.zero_grad(set_to_none=True)
    return all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def train_in_precision(amp: str | None, device: torch.device) -> tuple[list[float], float]:
    """The GPU guide's mixed precision on section 9.2's model, data, loop and constants:
    autocast in ``amp`` (None: float32, as a07), and for float16 the guide's
    ``torch.amp.GradScaler``, which multiplies the loss before backward so that small float16
    gradients do not round to zero, and divides them again before the step. (losses, training
    accuracy)."""
    train_loader, _ = toy_loaders()
    torch.manual_seed(123)
    model = NeuralNetwork(2, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    losses = []
    for _ in range(3):
        model.train()
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            with autocast(device, amp):
                loss = nn.functional.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            (scaler.scale(loss) if scaler else loss).backward()
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            losses.append(loss.item())
    return losses, compute_accuracy(model, train_loader, device)


def amp_problem(dtype: torch.dtype, device_type: str) -> str | None:
    """Why autocast in ``dtype`` cannot run on ``device_type``, or None. Where torch lacks a
    dtype it warns and computes in float32: refused too, not mislabelled."""
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.float16 and device_type == "cpu":
        return "float16 autocast is for GPUs (CUDA, or MPS with torch 2.5+); on the CPU use bf16"
    is_available = getattr(torch.amp, "is_autocast_available", None)  # torch 2.4+
    if is_available is not None and not is_available(device_type):
        return f"torch {torch.__version__} has no autocast on {device_type}"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            enabled = torch.autocast(device_type=device_type, dtype=dtype)._enabled
        except (RuntimeError, AssertionError) as err:
            return f"{name} autocast on {device_type}: {str(err).splitlines()[0]}"
    if not enabled:
        reason = str(warned[0].message).splitlines()[0] if warned else "disabled by torch"
        return f"{name} autocast on {device_type} with torch {torch.__version__}: {reason}"
    return None


def autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """Autocast in ``amp`` ('bf16', 'fp16'), or float32 for None."""
    return torch.autocast(device.type, AMP_DTYPES[amp]) if amp else contextlib.nullcontext()


AMPERE = (8, 0)  # the CUDA capability from which tensor cores compute TF32 and bfloat16


@contextlib.contextmanager
def tf32_matmul(enabled: bool) -> Iterator[None]:
    """float32 matrix products on CUDA's TF32 tensor cores, or not, in the enclosed block:
    ``fp32_precision`` from torch 2.9 (2.9.x warns on reading ``allow_tf32``), before it
    ``allow_tf32``."""
    matmul = torch.backends.cuda.matmul
    name = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"
    previous = getattr(matmul, name)
    setattr(matmul, name, ("tf32" if enabled else "ieee") if name == "fp32_precision" else enabled)
    try:
        yield
    finally:
        setattr(matmul, name, previous)


def lower_precisions(device: torch.device) -> tuple[list[tuple[str, torch.dtype, bool]], str]:
    """(name, dtype, TF32 on) of what this device multiplies fast beyond float32, and a note on
    what it lacks: TF32 and bfloat16 on the tensor cores of CUDA GPUs from Ampere on (older
    ones, Colab's T4 among them, report bfloat16 as supported: torch emulates it, slowly);
    float16 on GPUs; bfloat16 on CPUs and MPS (a CPU has no fast float16 path)."""
    if device.type != "cuda":
        return ([("bfloat16", torch.bfloat16, False)]
                + ([("float16", torch.float16, False)] if device.type != "cpu" else []),
                "TF32 and float16 tensor cores: CUDA GPUs only (not here).")
    capability = torch.cuda.get_device_capability(device)
    if capability >= AMPERE:
        return ([("TF32", torch.float32, True), ("bfloat16", torch.bfloat16, False),
                 ("float16", torch.float16, False)], "")
    return ([("float16", torch.float16, False)],
            f"TF32 and bfloat16: no tensor cores for them below compute capability 8.0 (this "
            f"GPU: {capability[0]}.{capability[1]}; torch emulates bfloat16, slower than "
            f"float32), so not offered.")


PROBE = 256  # a product any CPU computes within a second, in any precision


def cpu_slowdown(dtype: torch.dtype) -> float:
    """How many times float32's time a PROBE x PROBE product in ``dtype`` takes on the CPU: a
    CPU without hardware for it converts every element (one 2048 x 2048 bfloat16 product took
    67 s on a 2-core VM)."""
    cpu = torch.device("cpu")
    return time_matmul((PROBE,) * 3, cpu, dtype=dtype) / time_matmul((PROBE,) * 3, cpu)


def tensor_cores(size: int) -> None:
    """a07 --benchmark: the GPU guide's tensor cores and lower precisions, timed on the
    accelerator (or the CPU): one size x size product in each precision the device computes
    fast, with its speed-up over float32."""
    device = device_to_show(None)  # the accelerator, or the CPU where there is none
    heading(f"GPU guide: tensor cores and lower precisions ({device.type}, {size} x {size})")
    base = time_matmul((size,) * 3, device)
    print(f"{'float32':>9}: {base * 1e3:9.3f} ms")
    fast, lacking = lower_precisions(device)
    for name, dtype, tf32 in fast:
        if device.type == "cpu" and (slower := cpu_slowdown(dtype)) > 2:
            print(f"{name:>9}: left out: a {PROBE} x {PROBE} product took {slower:.0f}x "
                  f"float32's time, so this CPU has no {name} hardware (AVX512-BF16, AMX) and "
                  f"{size} x {size} would take minutes")
            continue
        with tf32_matmul(tf32):
            seconds = time_matmul((size,) * 3, device, dtype=dtype)
        print(f"{name:>9}: {seconds * 1e3:9.3f} ms, {base / seconds:5.1f}x float32's speed")
    if lacking:
        print(lacking)


def time_matmul(shape: tuple[int, int, int], device: torch.device,
                dtype: torch.dtype = torch.float32) -> float:
    """Median seconds of an (m x k) @ (k x n) product, waited for on an accelerator, with
    torch's CPU threads. Python's timeit: torch.utils.benchmark needs setuptools before torch
    2.5, which Python 3.12's virtual environments lack (pytorch/pytorch#127921)."""
    generator = torch.Generator().manual_seed(shape[0])
    a = torch.rand(shape[:2], generator=generator).to(device, dtype)
    b = torch.rand(shape[1:], generator=generator).to(device, dtype)
    (a @ b).sum().item()  # warm-up: the first call pays for kernel selection
    wait = (lambda: None) if device.type == "cpu" else getattr(torch, device.type).synchronize
    timer = timeit.Timer(lambda: (a @ b, wait()))
    number = max(1, timer.autorange()[0] // 4)  # calls in a twentieth of a second
    return statistics.median(timer.repeat(repeat=5, number=number)) / number


