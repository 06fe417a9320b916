"""Is each of the tutorial's lines needed? Remove it, or replace it with a plausible wrong one,
one at a time, in a copy of the repository, and run the tests that cover its script: at least
one should fail. Prints a table (caught by which test, or not noticed) and exits 1 where a
mutation that should be caught was not.

    python tests/benchmarks/mutate_tutorial_lines.py            # all, about 25 minutes on 2 cores
    python tests/benchmarks/mutate_tutorial_lines.py --only a08 # the mutations of one script

A mutation marked ``unnoticeable`` changes nothing a CPU can see (a tensor moved to the device
it is already on, train() and eval() on a model with no dropout or batch norm): its reason is
printed beside it, and it does not count as a miss.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]

TESTS = {  # the test files that cover each script
    "common/__init__.py": ["tests/test_common.py", "tests/test_a01_to_a04.py",
                           "tests/test_a05_a06.py"],
    "a05_training_loop.py": ["tests/test_a05_a06.py"],
    "a06_save_load.py": ["tests/test_a05_a06.py", "tests/test_faults.py"],
    "a07_gpu_single.py": ["tests/test_a07_gpu.py", "tests/test_gpu_articles.py"],
    "a08_ddp_torchrun.py": ["tests/test_a08_ddp.py", "tests/test_faults.py"],
}
ON_CPU = "the CPU run cannot see it: "


class Mutation(NamedTuple):
    path: str
    line: str  # the line as it stands (stripped), unique in its file
    replacement: str  # the wrong line, or "pass" to remove it
    unnoticeable: str = ""  # why no test on a CPU can notice it, where none can


MUTATIONS = [
    # section 6: the loaders (common/)
    Mutation("common/__init__.py", "shuffle=True,", "shuffle=False,"),
    Mutation("common/__init__.py", "drop_last=True,", "drop_last=False,"),
    # section 7: the loop and compute_accuracy
    Mutation("a05_training_loop.py", "torch.manual_seed(args.seed)", "pass"),
    Mutation("a05_training_loop.py",
             "optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)",
             "optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)"),
    Mutation("a05_training_loop.py",
             "loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed",
             "loss = F.cross_entropy(torch.softmax(logits, dim=1), labels)"),
    Mutation("a05_training_loop.py",
             "optimizer.zero_grad()  # otherwise gradients accumulate across batches", "pass"),
    Mutation("a05_training_loop.py", "loss.backward()", "pass"),
    Mutation("a05_training_loop.py", "optimizer.step()", "pass"),
    Mutation("a05_training_loop.py", "model.train()", "pass",
             "the model has no dropout or batch norm, so train() and eval() compute the same"),
    Mutation("a05_training_loop.py", "with torch.no_grad():", "with torch.enable_grad():"),
    Mutation("a05_training_loop.py", "torch.set_printoptions(sci_mode=False)  # 0.0009 rather "
             "than 9.0e-04", "pass"),
    Mutation("a05_training_loop.py", "probas = torch.softmax(outputs, dim=1)",
             "probas = torch.softmax(outputs, dim=0)"),
    Mutation("a05_training_loop.py", "predictions = torch.argmax(probas, dim=1)",
             "predictions = torch.argmax(probas, dim=0)"),
    Mutation("common/__init__.py", "predictions = torch.argmax(logits, dim=1)",
             "predictions = torch.argmax(logits, dim=0)"),
    Mutation("common/__init__.py", "correct += torch.sum(compare)", "correct += 1"),
    Mutation("common/__init__.py", "model = model.eval()", "pass",
             "the model has no dropout or batch norm, so train() and eval() compute the same"),
    # section 8: saving and loading
    Mutation("a06_save_load.py", "torch.save(model.state_dict(), tmp_path)",
             "torch.save(model, tmp_path)"),
    Mutation("a06_save_load.py",
             "print(model.load_state_dict(torch.load(path, weights_only=True)))",
             "print(model.load_state_dict(torch.load(path, weights_only=False)))"),
    Mutation("a06_save_load.py",
             "print(model.load_state_dict(torch.load(path, weights_only=True)))",
             "print(model.load_state_dict(torch.load(path, weights_only=True), strict=False))"),
    Mutation("a06_save_load.py",
             "model = NeuralNetwork(2, 2)  # needs to match the saved model's architecture "
             "exactly", "model = NeuralNetwork(2, 3)"),
    # sections 9.1 and 9.2: the device
    Mutation("a07_gpu_single.py", 'print("On the CPU:", tensor_1 + tensor_2)',
             'print("On the CPU:", tensor_1 - tensor_2)'),
    Mutation("a07_gpu_single.py",
             'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # NEW: '
             'the device', 'device = torch.device("cpu")',
             ON_CPU + "it is the CPU either way (tests/test_gpu.py checks it on CUDA)"),
    Mutation("a07_gpu_single.py", "model = model.to(device)  # NEW: the parameters move to the "
             "device", "pass", ON_CPU + "the model is on the CPU already"),
    Mutation("a07_gpu_single.py", "features, labels = features.to(device), labels.to(device)"
             "  # NEW: batch to device", "pass", ON_CPU + "the batches are on the CPU already"),
    Mutation("a07_gpu_single.py", "optimizer.step()", "pass"),
    Mutation("a07_gpu_single.py", "with extras.autocast(device, amp):  # EXTRA: --amp, mixed "
             "precision", "if True:"),
    # section 9.3: DDP
    Mutation("a08_ddp_torchrun.py", "rank, world_size = launch.rank, launch.world_size",
             "rank, world_size = launch.local_rank, launch.world_size"),
    Mutation("a08_ddp_torchrun.py", "if rank == 0:  # NEW: print once, not once per process",
             "if True:"),
    Mutation("a08_ddp_torchrun.py",
             'backend = "nccl" if device.type == "cuda" and platform.system() != "Windows" '
             'else "gloo"', 'backend = "nccl"'),
    Mutation("a08_ddp_torchrun.py", "shuffle=False,  # NEW: False because of DistributedSampler"
             " below", "shuffle=True,"),
    Mutation("a08_ddp_torchrun.py", "drop_last=True,", "drop_last=False,"),
    Mutation("a08_ddp_torchrun.py", "sampler=DistributedSampler(train_ds),", "sampler=None,"),
    Mutation("a08_ddp_torchrun.py", "train_loader.sampler.set_epoch(epoch)  # NEW: a new shuffle"
             " every epoch", "pass"),
    Mutation("a08_ddp_torchrun.py", "torch.manual_seed(args.seed)", "pass"),
    Mutation("a08_ddp_torchrun.py", 'model = DDP(model, device_ids=[device.index] if device.type'
             ' == "cuda" else None)  # NEW', "pass"),
    Mutation("a08_ddp_torchrun.py", "optimizer.zero_grad()  # otherwise gradients accumulate "
             "across batches", "pass"),
    Mutation("a08_ddp_torchrun.py", "optimizer.step()", "pass"),
    Mutation("a08_ddp_torchrun.py", 'pin_memory=device.type == "cuda",  # EXTRA: on CPUs, no '
             'CUDA context on GPU 0 each', "pin_memory=False,"),
    Mutation("a08_ddp_torchrun.py", "torch.cuda.set_device(device)  # NEW: this process's GPU",
             "pass", ON_CPU + "it runs only where the processes train on GPUs"),
    Mutation("a08_ddp_torchrun.py", "features, labels = features.to(device), labels.to(device)"
             "  # NEW: batch to device", "pass", ON_CPU + "the batches are on the CPU already"),
    Mutation("a08_ddp_torchrun.py", 'os.environ["MASTER_ADDR"] = "localhost"', "pass",
             "torchrun and --spawn set MASTER_ADDR, and one plain process meets "
             "through an in-memory store: the default is read by none of them"),
    Mutation("a08_ddp_torchrun.py", "destroy_process_group()  # NEW: leave the process group",
             "pass", "the process exits right after it, which ends the process group as well"),
]


def copy_of_repository(into: Path) -> Path:
    """The tracked and untracked (not ignored) files, as a fresh clone would hold them."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for name in files:
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def apply(mutation: Mutation, text: str) -> str:
    """``text`` with the mutation's line replaced, its indentation kept."""
    pattern = re.compile(rf"^([ \t]*){re.escape(mutation.line)}[ \t]*$", re.MULTILINE)
    found = pattern.findall(text)
    if len(found) != 1:
        sys.exit(f"{mutation.path}: {len(found)} lines read {mutation.line!r} (want one)")
    return pattern.sub(lambda m: m[1] + mutation.replacement, text)


def first_failure(output: str) -> str | None:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return match[1] if match else None


def run_tests(copy: Path, mutation: Mutation) -> tuple[bool, str]:
    """(caught, which test or why not)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                             "-m", "not stress and not gpu", *TESTS[mutation.path]],
                            cwd=copy, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode == 0:
        return False, "all passed"
    return True, first_failure(result.stdout) or f"pytest exited {result.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only mutations of files whose path starts so")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if m.path.startswith(args.only)]
    misses = 0
    with tempfile.TemporaryDirectory() as folder:
        copy = copy_of_repository(Path(folder))
        print("| file | line | changed to | result |\n|---|---|---|---|", flush=True)
        for mutation in chosen:
            original = (copy / mutation.path).read_text()
            (copy / mutation.path).write_text(apply(mutation, original))
            start = time.perf_counter()
            try:
                caught, detail = run_tests(copy, mutation)
            finally:
                (copy / mutation.path).write_text(original)
            if caught:
                verdict = f"caught: {detail}"
            elif mutation.unnoticeable:
                verdict = f"not noticed, as expected: {mutation.unnoticeable}"
            else:
                verdict = "NOT NOTICED"
                misses += 1
            print(f"| {mutation.path} | `{mutation.line}` | `{mutation.replacement}` | {verdict}"
                  f" ({time.perf_counter() - start:.0f} s) |", flush=True)
    print(f"\n{len(chosen)} mutations, {misses} not noticed that should be.")
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()
