"""Where one training step of a08 spends its time: a benchmark tool, not a test.

Times each phase of every step with a08's data, model and loader: fetching the batch, forward,
backward up to the moment the gradients are ready to be averaged, the wait from then until the
backward pass returns (DDP's all-reduce, and waiting for the slower process), optimizer step.
Under torchrun the model is wrapped in DDP, as in a08; run alone, it is the plain loop.
Under torchrun on one machine, rank 0 also splits the wait in two, from every process's clock:
the gap between the processes' gradients being ready, and the all-reduce once all are.

    python tests/benchmarks/step_profile.py --num-samples 4194304 --batch-size 65536
    torchrun --nproc_per_node=2 tests/benchmarks/step_profile.py --num-samples 4194304 \\
        --batch-size 65536
"""

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common import NeuralNetwork
from common.extras import DDP_ENDING, free_model_and_wait_for_gloo, run
from common.extras.rendezvous import store_for_this_attempt

import a08_ddp_torchrun as a08

WARM_UP_STEPS = 5
PHASES = ("fetch", "forward", "backward", "sync wait", "optimizer", "step")


def profile_steps(model: torch.nn.Module, loader, optimizer, epochs: int
                  ) -> tuple[list[tuple[float, ...]], list[tuple[float, float]]]:
    """Per step: the seconds of each phase, and (gradients ready, backward done) timestamps."""
    ready = [0.0]
    if isinstance(model, DDP):
        def timestamp_then_allreduce(state, bucket):
            ready[0] = time.perf_counter()
            return allreduce_hook(state, bucket)
        model.register_comm_hook(None, timestamp_then_allreduce)
    phases, marks = [], []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        batches = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                features, labels = next(batches)
            except StopIteration:
                break
            t1 = time.perf_counter()
            loss = F.cross_entropy(model(features), labels)
            t2 = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()
            t3 = time.perf_counter()
            optimizer.step()
            t4 = time.perf_counter()
            grads_ready = ready[0] if isinstance(model, DDP) else t3
            phases.append((t1 - t0, t2 - t1, grads_ready - t2, t3 - grads_ready, t4 - t3,
                           t4 - t0))
            marks.append((grads_ready, t3))
    skip = WARM_UP_STEPS if len(phases) > 2 * WARM_UP_STEPS else 0  # short runs: keep all
    return phases[skip:], marks[skip:]


def summary(values: list[float]) -> str:
    values = sorted(v * 1e3 for v in values)
    return (f"mean {statistics.mean(values):.2f}, median {statistics.median(values):.2f}, "
            f"p90 {values[len(values) * 9 // 10]:.2f} ms")


def profile(args, env) -> None:
    """Train and report; the DDP model lives and dies in here."""
    loader = a08.prepare_dataset(args, env.world_size, torch.device("cpu"))[0]
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    if env.launched:
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    phases, marks = profile_steps(model, loader, optimizer, args.epochs)
    run = f"DDP rank {env.rank} of {env.world_size}" if env.launched else "plain"
    means = (f"{name} {statistics.mean(column) * 1e3:.2f}"
             for name, column in zip(PHASES, zip(*phases, strict=True), strict=True))
    print(f"{run}, batch {args.batch_size}, {len(phases)} steps, mean ms: "
               + ", ".join(means))
    all_marks = [None] * env.world_size
    dist.all_gather_object(all_marks, marks)
    if env.launched and env.rank == 0:  # the same clock for every process: one machine
        steps = list(zip(*all_marks, strict=True))
        gap = [max(r[0] for r in s) - min(r[0] for r in s) for s in steps]
        allreduce = [min(r[1] for r in s) - max(r[0] for r in s) for s in steps]
        print(f"  gradients ready, gap between the processes: {summary(gap)}")
        print(f"  all-reduce, from the last process ready to the first done: "
                   f"{summary(allreduce)}")


def main() -> None:
    args, env, _ = a08.extras.parse_a08_flags(a08.__doc__)
    dist.init_process_group("gloo", rank=env.rank, world_size=env.world_size,
                            store=store_for_this_attempt(env, args.timeout))
    profile(args, env)
    free_model_and_wait_for_gloo()  # as a08 does: a DDP model outliving its group may abort
    dist.destroy_process_group()


if __name__ == "__main__":
    run(main, DDP_ENDING)  # after an error, the group is left as a08 leaves it
