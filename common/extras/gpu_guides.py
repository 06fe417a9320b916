"""a07 --gpu-guides: the two GPU articles that came with the tutorial, each part under a
heading that names its article, run on a07's device, with what cannot run there said in one
line. The articles' models are in common/gpu_articles.py; this is the running and measuring."""

from __future__ import annotations

import argparse
import warnings

from common.extras.cli import heading
from common.extras.precision import (
    Blocks,
    amp_problem,
    checkpointed_gradients_match,
    train_in_precision,
    training_step_memory,
)
from common.gpu_articles import (
    ConvNet,
    LinearRegression,
    LSTMGenerator,
    RNNClassifier,
    TransformerLM,
)

import torch
import torch.nn as nn

NO_CUDA = "(no CUDA GPU here)"


def add_gpu_guides_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu-guides", action="store_true",
                        help="after the tutorial's sections, run the two GPU articles' code, "
                             "corrected, on the same device (default: off)")


def run_gpu_articles(device: torch.device, args: argparse.Namespace) -> None:
    """Every part, on a07's device; ``args``: a07's flags (section 9.2's training knobs)."""
    device_basics(device)
    data_parallel(device)
    mixed_precision(device, args)
    with warnings.catch_warnings():  # torch 2.4's checkpoint uses its own deprecated autocast
        warnings.filterwarnings("ignore", message=r".*torch\.cpu\.amp\.autocast",
                                category=FutureWarning)
        memory_and_checkpointing(device)
    four_architectures(device)


def device_basics(device: torch.device) -> None:
    heading("GPU how-to and GPU guide: device basics")
    cuda = torch.cuda.is_available()
    print("torch.cuda.is_available():", cuda)
    print("torch.cuda.device_count():", torch.cuda.device_count())
    if cuda:
        print("torch.cuda.current_device():", torch.cuda.current_device())
        for index in range(torch.cuda.device_count()):
            print(f"torch.cuda.get_device_name({index}):", torch.cuda.get_device_name(index))
    else:
        print(f"torch.cuda.current_device() and get_device_name(0) would name GPU 0 {NO_CUDA}")
    print("device:", device)
    x = torch.tensor([4, 5, 6], device=device)
    print("torch.tensor([4, 5, 6], device=device).device:", x.device)
    print("x.get_device():", x.get_device(), "(-1: the CPU)" if x.device.type == "cpu" else "")
    print("x.to(device):", x.to(device))
    for index in range(torch.cuda.device_count()):
        print(f'x.to("cuda:{index}"):', x.to(f"cuda:{index}"))
    y = torch.rand(100, 30)
    if cuda:
        print("torch.rand(100, 30).cuda().device:", y.cuda().device,
              "| .cpu().device:", y.cuda().cpu().device)
    else:
        print(f"tensor.cuda() would copy it to GPU 0, .cpu() back {NO_CUDA}")
    missing = torch.cuda.device_count()
    try:
        torch.zeros(1).to(f"cuda:{missing}")
    except (RuntimeError, AssertionError) as err:
        print(f'x.to("cuda:{missing}") (no such GPU) fails:', str(err).strip().splitlines()[0])
    image = torch.randn(1, 3, 224, 224).to(device)
    conv = nn.Conv2d(3, 64, kernel_size=3, padding=1).to(device)
    out = conv(image).to("cpu")
    print(f"Conv2d(3, 64, 3, padding=1) on {device.type}: {tuple(image.shape)} -> "
          f"{tuple(out.shape)}, back on {out.device}")


def data_parallel(device: torch.device) -> None:
    heading("GPU how-to: DataParallel and DistributedDataParallel")
    model = LinearRegression(2, 5)
    print(model)
    gpus = torch.cuda.device_count()
    if device.type == "cuda" or not gpus:
        # over the GPUs only where the run is on CUDA: DataParallel needs the model on cuda:0
        model = nn.DataParallel(model.to(device), device_ids=list(range(gpus)) or None)
        ran = f"nn.DataParallel over {gpus} GPU(s)"
    else:  # GPUs here, but this run is on the CPU or MPS (--device)
        print(f"nn.DataParallel would split each batch across this machine's {gpus} GPU(s); "
              f"this run is on {device.type}, so the model runs unwrapped")
        ran = "The model itself"
    out = model(torch.randn(8, 2, device=device))
    print(f"{ran}, a batch of 8: output {tuple(out.shape)}")
    print("With 0 GPUs DataParallel calls the module itself; with 1 it runs on that GPU; with "
          "several\nit splits each batch across them in one process and gathers the outputs "
          "on GPU 0.")
    print("DistributedDataParallel (a08) runs one process per GPU instead, with no single "
          "GPU gathering\neverything and no Python lock shared between GPUs: PyTorch "
          "recommends it over DataParallel.")
    alias = getattr(nn.parallel, "DistributedDataParallelCPU", None)
    print("nn.parallel.DistributedDataParallelCPU:",
          "a deprecated alias of DistributedDataParallel" if alias is not None else "removed",
          "(DDP over a gloo process group, as a08 runs on CPUs, is the current form)")


def mixed_precision(device: torch.device, args: argparse.Namespace) -> None:
    heading("GPU guide: mixed precision (section 9.2's model under torch.autocast)")
    results = {"float32": train_in_precision(None, args, device)}
    if not left_out("bfloat16", device):
        results["bfloat16"] = train_in_precision("bf16", args, device)
    if device.type == "cuda" and not left_out("float16", device):
        results["float16"] = train_in_precision("fp16", args, device)
    for name, (losses, accuracy) in results.items():
        print(f"{name:>8}: losses {', '.join(f'{loss:.2f}' for loss in losses)}; "
              f"training accuracy {accuracy}")
    if device.type != "cuda":
        print(f" float16: needs CUDA, with torch.amp.GradScaler, which scales the loss so "
              f"that small float16 gradients do not vanish {NO_CUDA}")
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


def memory_and_checkpointing(device: torch.device) -> None:
    heading("GPU guide: batch size, memory and gradient checkpointing")
    torch.manual_seed(0)
    model = Blocks().to(device)
    cuda = device.type == "cuda"
    bf16 = not left_out("bfloat16", device)
    print("One training step of 8 blocks of Linear(512, 512) + ReLU. Measured: the bytes "
          "autograd keeps\nfor the backward pass (the activations)"
          + (", and the CUDA allocator's peak." if cuda else
             "; on CUDA the allocator's peak is shown too."))
    print(f"{'batch':>6} | {'plain (MB)':>10} | {'checkpointed':>12}"
          + (f" | {'bf16 autocast':>13}" if bf16 else "")
          + (f" | {'CUDA peak, plain':>16}" if cuda else ""))
    for batch in (64, 256, 1024):
        plain, peak = training_step_memory(model, batch, device)
        model.checkpointed = True
        checkpointed, _ = training_step_memory(model, batch, device)
        model.checkpointed = False
        line = f"{batch:>6} | {plain / 1e6:>10.1f} | {checkpointed / 1e6:>12.1f}"
        if bf16:
            mixed, _ = training_step_memory(model, batch, device, amp="bf16")
            line += f" | {mixed / 1e6:>13.1f}"
        print(line + (f" | {peak / 1e6:>16.1f}" if cuda else ""))
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
        out.float().mean().backward()
        parameters = sum(p.numel() for p in model.parameters())
        print(f"{name}: {parameters:,} parameters; input {tuple(batch.shape)} -> output "
              f"{tuple(out.shape)}, forward and backward on {device.type}")
