"""The GPU how-to, one of two GPU articles this companion also runs (not part of the tutorial,
which names neither), runnable (a07 --gpu-guides): checking for GPUs, devices, moving tensors,
DataParallel. Its published code for the checks was lost and its moving lines are garbled (an
assignment with nothing after `=`): each is written out here as its prose describes it; what
needs CUDA says so in one line."""

import torch
import torch.nn as nn

from common.devices import gpu_missing_from_build
from common.runner import heading


def run(device: torch.device) -> None:
    """Every part, on a07's device."""
    device_basics(device)
    data_parallel(device)


class LinearRegression(nn.Module):
    """The how-to's DataParallel example: one linear layer."""

    def __init__(self, input_size, output_size):
        super(LinearRegression, self).__init__()
        self.linear = nn.Linear(input_size, output_size)

    def forward(self, x):
        return self.linear(x)


def elsewhere(device: torch.device) -> str:
    """Why the GPU lines do not run: no GPU, or a run on another device (--device cpu)."""
    return f"(this run is on {device.type})" if torch.cuda.is_available() else "(no CUDA GPU here)"


def device_basics(device: torch.device) -> None:
    heading("GPU how-to and GPU guide: device basics")
    # EXTRA: the checks, this line to the if/else, written out from the prose (the code was lost)
    cuda = device.type == "cuda"  # a07's device: with --device cpu nothing runs on a GPU
    print("torch.cuda.is_available():", torch.cuda.is_available())
    print("torch.cuda.device_count():", torch.cuda.device_count())
    if cuda:
        print("torch.cuda.current_device():", torch.cuda.current_device())
        for index in range(torch.cuda.device_count()):
            print(f"torch.cuda.get_device_name({index}):", torch.cuda.get_device_name(index))
    else:
        print("torch.cuda.current_device() and get_device_name(0) would name GPU 0",
              elsewhere(device))
    print("device:", device)  # EXTRA: a07's device, where the how-to picks CUDA or the CPU
    x = torch.tensor([1, 2, 3])
    print("Device: ", x.device)
    x = torch.tensor([1, 2, 3])
    x = x.to(device)  # EXTRA: the garbled move, written out
    print("Device: ", x.device)  # EXTRA: the print after the move, as the how-to's others
    y = torch.tensor([4, 5, 6], device=device)
    print("Device: ", y.device)
    # EXTRA: get_device(), which the how-to describes in words: -1 on the CPU, else the index
    print("y.get_device():", y.get_device(), "(-1: the CPU)" if y.device.type == "cpu" else "")
    x = torch.tensor([8, 9, 10])
    if cuda:  # EXTRA: only on a07's CUDA device
        x = x.to("cuda:0")  # EXTRA: the garbled move to a GPU by its index, written out
        print('x.to("cuda:0"):', x)
    tensor = torch.rand((100, 30))
    if cuda:  # EXTRA: .cuda() only where there is CUDA; its .device, which the how-to shows
        print("tensor.cuda().device:", tensor.cuda().device,
              "| .cpu().device:", tensor.cuda().cpu().device)
    else:
        print("tensor.cuda() would copy it to GPU 0, .cpu() back", elsewhere(device))
    missing = torch.cuda.device_count()  # EXTRA: this line to the print: a GPU that is not there
    if cuda or not missing:  # beside GPUs, a run on another device asks them nothing
        try:
            x.to(f"cuda:{missing}")
        except (RuntimeError, AssertionError) as err:
            print(f'x.to("cuda:{missing}") (no such GPU) fails:', str(err).strip().splitlines()[0])
    # EXTRA: the guide's garbled .to('cuda') and .to('cpu') lines, written out on a07's device
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
    # EXTRA: this if/else for the how-to's nn.DataParallel(model, device_ids=[0]): every GPU,
    # on a07's device, and the batch it then leaves out ("move the model and inputs")
    if device.type == "cuda" or not gpus:
        # over the GPUs only where the run is on CUDA: DataParallel needs the model on cuda:0
        usable = [i for i in range(gpus) if not gpu_missing_from_build([i])]  # built for
        model = nn.DataParallel(model.to(device), device_ids=usable or None)
        ran = f"nn.DataParallel over {len(usable)} GPU(s)"
    else:  # GPUs here, but this run is on the CPU or MPS (--device)
        print(f"nn.DataParallel would split each batch across this machine's {gpus} GPU(s); "
              f"this run is on {device.type}, so the model runs unwrapped")
        ran = "The model itself"
    out = model(torch.randn(8, 2, device=device))
    print(f"{ran}, a batch of 8: output {tuple(out.shape)}")
    # EXTRA: what DataParallel does, and the how-to's advice to prefer DDP, as prints
    print("With 0 GPUs DataParallel calls the module itself; with 1 it runs on that GPU; with "
          "several\nit splits each batch across them in one process and gathers the outputs "
          "on GPU 0.")
    print("DistributedDataParallel (a08) runs one process per GPU instead, with no single "
          "GPU gathering\neverything and no Python lock shared between GPUs: PyTorch "
          "recommends it over DataParallel.")
    # EXTRA: the how-to's DistributedDataParallelCPU(model), with no process group, fails: asked
    alias = getattr(nn.parallel, "DistributedDataParallelCPU", None)
    print("nn.parallel.DistributedDataParallelCPU:",
          "a deprecated alias of DistributedDataParallel" if alias is not None else "removed",
          "(DDP over a gloo process group, as a08 runs on CPUs, is the current form)")
