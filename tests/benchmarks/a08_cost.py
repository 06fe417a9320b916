"""a08 under torchrun N=2 beside the text's minimal section 9.3 script (gloo on CPUs, nothing
else): interleaved pairs, the median of each and their ratio; then where a08's extra time goes:
importing our modules, and a08 as one process beside the minimal script as one process.

    python tests/benchmarks/a08_cost.py [PAIRS]      (from the clone, in its environment)
"""

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = '''import os
import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from common import NeuralNetwork, ToyDataset, compute_accuracy, toy_data


def main(rank, world_size, num_epochs):
    init_process_group(backend="gloo", rank=rank, world_size=world_size)
    X_train, y_train, X_test, y_test = toy_data()
    train_ds = ToyDataset(X_train, y_train)
    train_loader = DataLoader(dataset=train_ds, batch_size=2, shuffle=False, drop_last=True,
                              sampler=DistributedSampler(train_ds))
    test_loader = DataLoader(dataset=ToyDataset(X_test, y_test), batch_size=2, shuffle=False)
    model = DDP(NeuralNetwork(num_inputs=2, num_outputs=2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(num_epochs):
        train_loader.sampler.set_epoch(epoch)
        model.train()
        for features, labels in train_loader:
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"[CPU{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d} | Loss: {loss:.2f}")
        model.eval()
    print(f"[CPU{rank}] Training accuracy", compute_accuracy(model, train_loader))
    print(f"[CPU{rank}] Test accuracy", compute_accuracy(model, test_loader))
    destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "localhost")  # one process: the text's defaults
    os.environ.setdefault("MASTER_PORT", "12345")
    torch.manual_seed(123)
    main(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), 3)
'''


def wall(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def pairs(first: list[str], second: list[str], cwd: Path, n: int) -> tuple[float, float]:
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(n):
        times[0].append(wall(first, cwd))
        times[1].append(wall(second, cwd))
    return statistics.median(times[0]), statistics.median(times[1])


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    folder = Path(tempfile.mkdtemp())
    (folder / "minimal.py").write_text(MINIMAL)
    shutil.copytree(ROOT / "common", folder / "common")  # a link needs developer mode on Windows
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    text, ours = pairs([*run, "minimal.py"], [*run, str(ROOT / "a08_ddp_torchrun.py")], folder, n)
    print(f"torchrun N=2: the text's minimal script {text:.2f} s, a08 {ours:.2f} s "
          f"({ours / text:.2f}x; medians of {n} interleaved pairs)")
    text, ours = pairs([sys.executable, "minimal.py"],
                       [sys.executable, str(ROOT / "a08_ddp_torchrun.py")], folder, n)
    print(f"one process: the text's minimal script {text:.2f} s, a08 {ours:.2f} s "
          f"({ours - text:+.2f} s)")
    bare, imports = pairs([sys.executable, "-c", "import torch, torch.distributed"],
                          [sys.executable, "-c", "import torch, torch.distributed; from common "
                           "import checkpoints, devices, flags, processes, runner"], ROOT, n)
    print(f"importing a08's modules of ours beyond torch: {imports - bare:+.2f} s")
