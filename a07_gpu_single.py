"""Sections 9.1 and 9.2 of "PyTorch in One Hour": GPU computations, single-GPU training.

Section 7's loop with 9.2's three changes (NEW): a device, the model and each batch moved to it.

Run: python a07_gpu_single.py [--device auto|cpu|cuda|mps] [--benchmark] [--gpu-guides]
"""

import torch
import torch.nn.functional as F

from common import (
    NeuralNetwork,
    compute_accuracy,
    devices,
    flags,
    gpu_guide,
    gpu_howto,
    measure,
    runner,
    toy_loaders,
)


def main(chosen=None, benchmark=False, sizes=(64, 128, 256, 512, 1024, 2048), gpu_guides=False):
    runner.heading("9.1 Computations on GPU devices")
    section_9_1_tensors_on_device(chosen)

    runner.heading("9.2 Single-GPU training")
    # EXTRA: section 6's loaders, from common (a script imports no other script)
    train_loader, test_loader = toy_loaders()
    torch.manual_seed(123)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # NEW: a GPU
    if device.type == "cpu":  # EXTRA: no CUDA GPU: the text's line for Macs, next
        # NEW: Apple's GPU, on a Mac that has one
        device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    device = chosen or device  # EXTRA: --device, where given, overrides the choice above
    model = model.to(device)  # NEW: the model to the device
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    num_epochs = 3
    for epoch in range(num_epochs):

        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):

            features, labels = features.to(device), labels.to(device)  # NEW: each batch too
            logits = model(features)

            loss = F.cross_entropy(logits, labels)  # Loss function

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            ### LOGGING
            print(f"Epoch: {epoch+1:03d}/{num_epochs:03d}"
                  f" | Batch {batch_idx:03d}/{len(train_loader):03d}"
                  f" | Train/Val Loss: {loss:.2f}")

        model.eval()
        # Optional model evaluation

    # EXTRA: section 7's accuracy, on the device (9.2 prints none), this line and the next two
    runner.heading("9.2 compute_accuracy")
    print("Training accuracy:", compute_accuracy(model, train_loader, device=device))
    print("Test accuracy:", compute_accuracy(model, test_loader, device=device))
    if benchmark:  # EXTRA: Exercise A.4, then the GPU guide's tensor cores, timed
        exercise_a4(sizes, chosen)
        gpu_guide.tensor_cores(max(sizes), devices.device_to_show(chosen))
    if gpu_guides:  # EXTRA: the two GPU articles, on the device chosen above
        gpu_howto.run(device)
        gpu_guide.run(device)


def section_9_1_tensors_on_device(device):
    print("torch.cuda.is_available():", torch.cuda.is_available())
    tensor_1 = torch.tensor([1., 2., 3.])
    tensor_2 = torch.tensor([4., 5., 6.])
    print("On the CPU:", tensor_1 + tensor_2)
    device = devices.show_device(device)  # EXTRA: the accelerator, named; or why none
    if device.type == "cpu":  # EXTRA: the rest needs an accelerator
        return
    tensor_1 = tensor_1.to(device)  # EXTRA: the accelerator found, where the text writes "cuda"
    tensor_2 = tensor_2.to(device)  # EXTRA: likewise
    print(f"On {device.type}:", tensor_1 + tensor_2)
    tensor_1 = tensor_1.to("cpu")
    try:  # EXTRA: the error printed, and the script goes on
        print(tensor_1 + tensor_2)
    except RuntimeError as err:
        print("Adding a CPU tensor to it fails:", str(err).splitlines()[0])



def exercise_a4(sizes, chosen=None):  # EXTRA: Exercise A.4, with --benchmark
    """The book's solution's own case, a table of sizes, and where the accelerator starts to win (on
    --device's; with --device cpu, the CPU alone)."""
    runner.heading("9.2 Exercise A.4: when does the accelerator win?")
    device = devices.device_to_show(chosen)  # --device's, else the accelerator, else the CPU
    devices_here = [torch.device("cpu")] + ([device] if device.type != "cpu" else [])
    timed = ", ".join(f"{device.type.upper()} "
                      f"{measure.time_matmul((100, 200, 300), device) * 1e6:.1f} us"
                      for device in devices_here)
    name = device.type.upper() if device.type != "cpu" else None
    header = f"{'size':>6} | {'CPU (ms)':>10}" + (
        f" | {name + ' (ms)':>10} | {'speed-up':>8}" if name else "")
    print("Exercise A.4 is in the book's Appendix A; its solution, in the book's exercise "
          "solutions\n(and the book's repository, appendix-A/01_main-chapter-code/"
          "exercise-solutions.ipynb),\ntimes 100x200 @ 200x300 with %timeit: CPU 63.8 us, "
          "GPU 13.8 us. It did not wait for the\nGPU, so its GPU figure is mostly the time to "
          "launch the kernel.")
    print(f"The solution's own case, 100x200 @ 200x300: {timed}\nMedian time of one float32 "
          f"(size x size) @ (size x size) product; the CPU uses {torch.get_num_threads()} "
          f"thread(s):")
    print(f"{header}\n{'-' * len(header)}")
    wins_from = None  # the smallest size from which on the accelerator wins at every size
    for size in sizes:
        cpu, *other = (measure.time_matmul((size,) * 3, device) for device in devices_here)
        line = f"{size:>6} | {cpu * 1e3:>10.3f}"
        if other:
            line += f" | {other[0] * 1e3:>10.3f} | {cpu / other[0]:>7.1f}x"
            wins_from = (wins_from or size) if other[0] < cpu else None
        print(line)
    alone = "--device cpu: the CPU alone" if chosen else "No accelerator on this machine"
    print(f"{alone}, so there is no second column to compare with." if name is None else
          f"The {name} wins from size {wins_from} on." if wins_from else
          f"The {name} did not win at any size measured.")

if __name__ == "__main__":
    args = flags.a07(__doc__)  # EXTRA: our options: --device, --benchmark, --gpu-guides, ...
    runner.run(main, args.device, args.benchmark, args.sizes, args.gpu_guides)
