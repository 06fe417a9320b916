"""The GPU guide, one of two GPU articles this companion also runs (a third party's, not part of
the tutorial, which names neither), runnable (a07 --gpu-guides, on a07's device; its tensor
cores: a07 --benchmark): first its four models as it writes them, with its two defects FIXED;
then its parts, each under a heading, what we added to them marked EXTRA, saying in one line
what cannot run there."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn as nn
from torch.nn import Transformer
from torch.utils.data import DataLoader, TensorDataset

from common import NeuralNetwork, compute_accuracy, measure, toy_loaders
from common.devices import gfx
from common.gpu_howto import elsewhere
from common.runner import heading


# The article's four classes as it writes them, but for its two defects, each marked below:
# a PositionalEncoding it never defines, and the causal mask its language model lacks
class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super(ConvNet, self).__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=32, kernel_size=3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(in_channels=32, out_channels=64, kernel_size=3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.fc1 = nn.Linear(in_features=64 * 7 * 7, out_features=128)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(in_features=128, out_features=num_classes)

    def forward(self, x):
        out = self.conv1(x)
        out = self.relu1(out)
        out = self.pool1(out)
        out = self.conv2(out)
        out = self.relu2(out)
        out = self.pool2(out)
        out = out.view(out.size(0), -1)
        out = self.fc1(out)
        out = self.relu3(out)
        out = self.fc2(out)
        return out


class RNNClassifier(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes):
        super(RNNClassifier, self).__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.rnn = nn.RNN(embedding_dim, hidden_dim)
        self.fc = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        embedded = self.embedding(x)
        _, hidden = self.rnn(embedded)
        output = self.fc(hidden.squeeze(0))
        return output


class LSTMGenerator(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_layers):
        super(LSTMGenerator, self).__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_dim, vocab_size)

    def forward(self, x, h0, c0):
        embedded = self.embedding(x)
        output, (hn, cn) = self.lstm(embedded, (h0, c0))
        output = self.fc(output[:, -1, :])
        return output, (hn, cn)


class PositionalEncoding(nn.Module):
    """FIXED: used by the article but never defined (NameError): the sinusoidal encoding of
    "Attention Is All You Need", for the (sequence, batch) token ids the article passes it."""

    def __init__(self, d_model, max_len):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        scale = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        encoding = torch.zeros(max_len, 1, d_model)
        encoding[:, 0, 0::2] = torch.sin(position * scale)
        encoding[:, 0, 1::2] = torch.cos(position * scale)
        # a constant, not a weight: outside the state_dict, which stays the article's
        self.register_buffer("encoding", encoding, persistent=False)

    def forward(self, ids):
        return self.encoding[:ids.size(0)]  # (sequence, 1, d_model), added to every sequence


class TransformerLM(nn.Module):
    def __init__(self, vocab_size, d_model, nhead, num_layers, seq_len):
        super(TransformerLM, self).__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, seq_len)
        self.transformer = Transformer(d_model=d_model, nhead=nhead,
                                       num_encoder_layers=num_layers,
                                       num_decoder_layers=num_layers)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt):
        src = self.embedding(src) + self.pos_encoding(src)
        tgt = self.embedding(tgt) + self.pos_encoding(tgt)
        # FIXED: a causal mask, this line and the next: without one (the article passes no
        # tgt_mask), target position t sees the tokens after t, the ones it must predict
        tgt_mask = Transformer.generate_square_subsequent_mask(tgt.size(0), device=tgt.device)
        output = self.transformer(src, tgt, tgt_mask=tgt_mask)
        output = self.fc(output)
        return output


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
        print(f" float16: needs CUDA, with torch.amp.GradScaler, which scales the loss so "
              f"that small float16 gradients do not vanish {elsewhere(device)}")
    print("torch.cuda.amp, which the guide names, is deprecated: use torch.autocast(device_type,"
          " dtype)\nand torch.amp.GradScaler('cuda') (float16 only; bfloat16 needs no scaler).")


def left_out(precision: str, device: torch.device) -> bool:
    """Where this torch cannot compute in ``precision`` on the device, one line says so: no row
    is labelled with a precision torch quietly replaced by float32."""
    problem = measure.amp_problem(getattr(torch, precision), device.type)
    if problem:
        print(f"{precision:>8}: left out: {problem}")
    return problem is not None


def batch_size_snippet(a07_device: torch.device) -> None:
    heading("GPU guide: the batch-size snippet, corrected")
    torch.manual_seed(0)  # EXTRA: this and the next two lines: data, which it lacks
    X = torch.randn(1000, 2)
    dataset = TensorDataset(X, (X[:, 0] > X[:, 1]).long())
    batch_size = 128
    device = a07_device  # EXTRA: a07's device, where it writes torch.device('cuda'): a GPU only
    model = NeuralNetwork(2, 2)  # EXTRA: a model, for the article's placeholder YourModel()
    # EXTRA: a DataLoader, in place of the article's garbled line
    dataloader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    # EXTRA: the model to the device, as the batches below: the snippet trains nothing, our
    # completion of it does
    model = model.to(device)
    # EXTRA: the next seven lines: one epoch of section 9.2's training, which it lacks
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for features, labels in dataloader:
        features, labels = features.to(device), labels.to(device)
        loss = nn.functional.cross_entropy(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"batch_size = {batch_size}: {len(dataloader)} batches for {len(dataset)} examples "
          f"(the last one {len(dataset) % batch_size}), one epoch on {device.type}; training "
          f"accuracy {compute_accuracy(model, dataloader, device):.2f}. A larger batch fills "
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
    heading("GPU guide: four architectures, as published (two defects fixed)")
    torch.manual_seed(0)
    # nn.Transformer's note on nested tensors, as built: harmless (TROUBLESHOOTING.md)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        # each on the input its own code implies (the caller builds the LSTM's states)
        cases = [
            ("ConvNet(num_classes=10)", ConvNet(num_classes=10), (torch.randn(4, 3, 28, 28),),
             "28 x 28 images, as its 64 * 7 * 7 implies; CIFAR-10's 32 x 32 fail: mat1 and mat2 "
             "shapes cannot be multiplied (4x4096 and 3136x128)"),
            ("RNNClassifier(1000, 32, 64, 5)", RNNClassifier(1000, 32, 64, 5),
             (torch.randint(0, 1000, (7, 4)),),
             "(sequence, batch) ids, nn.RNN's layout; a DataLoader's (batch, sequence) ids "
             "give one answer per position, silently: pass ids.T"),
            ("LSTMGenerator(1000, 32, 64, 2)", LSTMGenerator(1000, 32, 64, 2),
             (torch.randint(0, 1000, (4, 7)), torch.zeros(2, 4, 64), torch.zeros(2, 4, 64)),
             "(batch, sequence) ids (its batch_first=True) and zero states h0, c0"),
            ("TransformerLM(1000, 64, 4, 2, 16)", TransformerLM(1000, 64, 4, 2, 16),
             (torch.randint(0, 1000, (16, 4)), torch.randint(0, 1000, (16, 4))),
             "(sequence, batch) ids, src and tgt, nn.Transformer's layout; (batch, sequence) "
             "ids mix a batch's sequences, silently: pass ids.T"),
        ]
    for name, model, inputs, note in cases:
        model = model.to(device)
        with warnings.catch_warnings():  # Windows' CUDA builds: harmless (TROUBLESHOOTING.md)
            warnings.filterwarnings("ignore", message=".*Torch was not compiled with flash")
            out = model(*(tensor.to(device) for tensor in inputs))
        out = out[0] if isinstance(out, tuple) else out  # LSTMGenerator: (logits, states)
        out.float().mean().backward()
        parameters = sum(p.numel() for p in model.parameters())
        shapes = ", ".join(str(tuple(tensor.shape)) for tensor in inputs)
        print(f"{name}: {parameters:,} parameters; input {shapes} -> output "
              f"{tuple(out.shape)}, forward and backward on {device.type}\n  {note}")


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
VOLTA = (7, 0)  # from which tensor cores compute float16 (the GTX 10xx's 6.1 computes it slowly)
# AMD's GPUs (ROCm's torch, where get_device_capability gives gfx numbers, not NVIDIA's): matrix
# cores for float16 and bfloat16 on CDNA (gfx908 on) and on RDNA3 and RDNA4, the GPUs ROCm's
# rocWMMA is built for; TF32 (AMD's XF32) on gfx94x and gfx95x, as torch.cuda.is_tf32_supported
MATRIX_CORES, XF32 = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12"), ("gfx94", "gfx95")


def lower_precisions(device: torch.device) -> tuple[list[tuple[str, torch.dtype, bool]], str]:
    """(name, dtype, TF32 on) of what this device multiplies fast beyond float32, and what it
    lacks (a T4 reports bfloat16 as supported: torch emulates it, slowly)."""
    if device.type != "cuda":
        return ([("bfloat16", torch.bfloat16, False)]
                + ([("float16", torch.float16, False)] if device.type != "cpu" else []),
                "TF32 and float16 tensor cores: CUDA GPUs only (not here).")
    if torch.version.hip:
        arch = gfx(device.index or 0)
        if not arch.startswith(MATRIX_CORES):
            return [], (f"TF32, bfloat16 and float16: no matrix cores on {arch} (rocWMMA's GPUs: "
                        f"CDNA from gfx908, RDNA3, RDNA4), so not offered.")
        halves = [("bfloat16", torch.bfloat16, False), ("float16", torch.float16, False)]
        return ([("TF32", torch.float32, True), *halves], "") if arch.startswith(XF32) else \
            (halves, f"TF32: AMD's GPUs compute it (as XF32) from gfx942 on (this GPU: {arch}), "
                     f"so not offered.")
    capability = torch.cuda.get_device_capability(device)
    if capability >= AMPERE:
        return ([("TF32", torch.float32, True), ("bfloat16", torch.bfloat16, False),
                 ("float16", torch.float16, False)], "")
    if capability < VOLTA:
        return [], (f"TF32, bfloat16 and float16: no tensor cores below compute capability 7.0 "
                    f"(this GPU: {capability[0]}.{capability[1]}); float16 runs on the ordinary "
                    f"cores, on a GTX 10xx at a fraction of float32's speed (a P100: about "
                    f"twice), so not offered.")
    return ([("float16", torch.float16, False)],
            f"TF32 and bfloat16: no tensor cores for them below compute capability 8.0 (this "
            f"GPU: {capability[0]}.{capability[1]}; torch emulates bfloat16, slower than "
            f"float32), so not offered.")


def tensor_cores(size: int, device: torch.device) -> None:
    """a07 --benchmark: a size x size product in each fast precision, against float32, on a07's
    device (--device's, else the accelerator, else the CPU)."""
    heading(f"GPU guide: tensor cores and lower precisions ({device.type}, {size} x {size})")
    print("The GPU guide (the second GPU article this companion runs, a third party's; README: "
          "The GPU\narticles) names tensor cores from Volta on and mixed precision: timed here.")
    base = measure.time_matmul((size,) * 3, device)
    print(f"{'float32':>9}: {base * 1e3:9.3f} ms")
    fast, lacking = lower_precisions(device)
    for name, dtype, tf32 in fast:
        if problem := measure.dtype_problem(dtype, device.type):
            print(f"{name:>9}: left out: {problem}")
            continue
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


