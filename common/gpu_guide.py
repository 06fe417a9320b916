"""The GPU guide that came with the tutorial, runnable (a07 --gpu-guides, on a07's device; its
tensor cores: a07 --benchmark): first its models, where the published code fails or computes
something wrong fixed (FIXED, and why), what we added marked EXTRA; then its parts, each under a
heading, saying in one line what cannot run there."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from common import NeuralNetwork, compute_accuracy, measure, toy_loaders
from common.devices import device_to_show
from common.runner import heading


class ConvNet(nn.Module):
    """The guide's image classifier, its layers in two groups (the fix sits between them)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            # FIXED: Linear(64 * 7 * 7, ...) fits only 28 to 31 pixels, and CIFAR-10's 32 x 32
            # fails; pooled to 7 x 7, any size fits (on MPS, multiples of 28: pytorch#96056)
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
        # FIXED: nn.RNN reads (sequence, batch) by default: a DataLoader's (batch, sequence)
        # ids gave one output per position, not per sequence
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

    def forward(self, x, h0=None, c0=None):
        if h0 is None:  # EXTRA: zero states where the caller passes none, to start a sequence
            shape = (self.num_layers, x.shape[0], self.hidden_dim)
            h0, c0 = torch.zeros(shape, device=x.device), torch.zeros(shape, device=x.device)
        out, (hn, cn) = self.lstm(self.embedding(x), (h0, c0))
        # the next token's logits, and the states to continue from
        return self.fc(out[:, -1, :]), (hn, cn)


class PositionalEncoding(nn.Module):
    """FIXED: used by the article but never defined (NameError): the sinusoidal encoding."""

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
        # EXTRA: ours adds the positions to the embeddings it is given (the article's call
        # passes the token ids to a PositionalEncoding it never defines)
        self.pos_encoder = PositionalEncoding(d_model, max_len=seq_len)
        # FIXED: batch_first: the article's sequence-first nn.Transformer, given a DataLoader's
        # (batch, sequence) ids, attends across the batch: one sequence changes another's output
        layer = nn.TransformerEncoderLayer(d_model, nhead, batch_first=True)
        # EXTRA: one stack of layers over the tokens so far, where the article has an encoder
        # and a decoder: a language model's input is its target, shifted by one
        self.transformer = nn.TransformerEncoder(layer, num_layers)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        # FIXED: a causal mask: without one (the article passes no tgt_mask), position t sees
        # the tokens after t, the ones it must predict
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
    """Where this torch cannot compute in ``precision`` on the device, one line says so: no row
    is labelled with a precision torch quietly replaced by float32."""
    problem = measure.amp_problem(getattr(torch, precision), device.type)
    if problem:
        print(f"{precision:>8}: left out: {problem}")
    return problem is not None


def batch_size_snippet(device: torch.device) -> None:
    heading("GPU guide: the batch-size snippet, corrected")
    torch.manual_seed(0)  # EXTRA: this and the next two lines: data, which it lacks
    X = torch.randn(1000, 2)
    dataset = TensorDataset(X, (X[:, 0] > X[:, 1]).long())
    batch_size = 128
    # EXTRA: a DataLoader, in place of the article's garbled line
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    model = NeuralNetwork(2, 2)  # EXTRA: a model, for the article's placeholder YourModel()
    # EXTRA: the model to the device, as the batches below: the snippet trains nothing, our
    # completion of it does
    model = model.to(device)
    # EXTRA: the next seven lines: one epoch of section 9.2's training, which it lacks
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
    model = measure.Blocks().to(device)
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
        plain, weights, peak = measure.training_step_memory(model, batch, device)
        model.checkpointed = True
        checkpointed, _, _ = measure.training_step_memory(model, batch, device)
        model.checkpointed = False
        line = f"{batch:>6} | {plain / 1e6:>10.1f} | {checkpointed / 1e6:>12.1f}"
        if bf16:
            mixed, _, _ = measure.training_step_memory(model, batch, device, amp="bf16")
            line += f" | {mixed / 1e6:>13.1f}"
        print(line + (f" | {peak / 1e6:>16.1f}" if cuda else ""))
    print(f"Not counted above: the weights autograd keeps beside them ({weights / 1e6:.1f} MB "
          f"plain), whatever the batch.")
    print("Gradients with checkpointing equal those without:",
          measure.checkpointed_gradients_match(model, device))


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
        with warnings.catch_warnings():  # Windows' CUDA builds: harmless (TROUBLESHOOTING.md)
            warnings.filterwarnings("ignore", message=".*Torch was not compiled with flash")
            out = model(batch.to(device))
        out = out[0] if isinstance(out, tuple) else out  # LSTMGenerator: (logits, states)
        out.float().mean().backward()
        parameters = sum(p.numel() for p in model.parameters())
        print(f"{name}: {parameters:,} parameters; input {tuple(batch.shape)} -> output "
              f"{tuple(out.shape)}, forward and backward on {device.type}")


def train_in_precision(amp: str | None, device: torch.device) -> tuple[list[float], float]:
    """Section 9.2's training under autocast in ``amp`` (None: float32), with the guide's
    GradScaler for float16 (it scales the loss, then the gradients back): (losses, accuracy)."""
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
            with measure.autocast(device, amp):
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


AMPERE = (8, 0)  # the CUDA capability from which tensor cores compute TF32 and bfloat16


def lower_precisions(device: torch.device) -> tuple[list[tuple[str, torch.dtype, bool]], str]:
    """(name, dtype, TF32 on) of what this device multiplies fast beyond float32, and what it
    lacks (a T4 reports bfloat16 as supported: torch emulates it, slowly)."""
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


def tensor_cores(size: int) -> None:
    """a07 --benchmark: a size x size product in each fast precision, against float32."""
    device = device_to_show(None)  # the accelerator, or the CPU where there is none
    heading(f"GPU guide: tensor cores and lower precisions ({device.type}, {size} x {size})")
    base = measure.time_matmul((size,) * 3, device)
    print(f"{'float32':>9}: {base * 1e3:9.3f} ms")
    fast, lacking = lower_precisions(device)
    for name, dtype, tf32 in fast:
        if device.type == "cpu" and (slower := measure.cpu_slowdown(dtype)) > 2:
            print(f"{name:>9}: left out: a {measure.PROBE} x {measure.PROBE} product took "
                  f"{slower:.0f}x float32's time, so this CPU has no {name} hardware "
                  f"(AVX512-BF16, AMX) and {size} x {size} would take minutes")
            continue
        with measure.tf32_matmul(tf32):
            seconds = measure.time_matmul((size,) * 3, device, dtype=dtype)
        print(f"{name:>9}: {seconds * 1e3:9.3f} ms, {base / seconds:5.1f}x float32's speed")
    if lacking:
        print(lacking)


