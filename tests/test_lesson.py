"""The scripts beside the text: its lines in its order, nothing of ours in its batch loop, and
every marker true. A `# FIXED:` line names, in FIXED_PROOFS, the test that runs the text's own
line where it fails (this machine, or the GPU machine of .ci/gpu-check) and shows the failure;
a `# NEW:` line is one the text itself adds in that section (NEW_LINES)."""

import re
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from common import NeuralNetwork, ToyDataset, compute_accuracy, gpu_guide, processes, toy_data
from conftest import ROOT, copy_of, free_port, run_together

TEXT_LINES_OF_A08 = [  # the tutorial's own lines, in the text's order
    "from torch.distributed import destroy_process_group, init_process_group",
    'if "MASTER_ADDR" not in os.environ:',
    'os.environ["MASTER_ADDR"] = "localhost"',
    'if "MASTER_PORT" not in os.environ:',
    'os.environ["MASTER_PORT"] = "12345"',
    'os.environ["USE_LIBUV"] = "0"',
    "init_process_group(backend=backend, rank=rank, world_size=world_size,",
    "torch.cuda.set_device(",
    "def prepare_dataset():",
    "# factor = 4",
    "# X_train = torch.cat([X_train + torch.randn_like(X_train) * 0.1 for _ in range(factor)])",
    "# y_train = y_train.repeat(factor)",
    "# X_test = torch.cat([X_test + torch.randn_like(X_test) * 0.1 for _ in range(factor)])",
    "# y_test = y_test.repeat(factor)",
    "batch_size=2,",
    "shuffle=False,  # NEW",
    "drop_last=True,",
    "sampler=DistributedSampler(train_ds),",
    "def main(rank, world_size, num_epochs",
    "ddp_setup(rank, world_size",
    "train_loader, test_loader = prepare_dataset()",
    "model = NeuralNetwork(num_inputs=2, num_outputs=2)",
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.5)",
    "model = DDP(model",
    "train_loader.sampler.set_epoch(epoch)",
    "model.train()",
    "for features, labels in train_loader:",
    "loss = F.cross_entropy(logits, labels)",
    "optimizer.zero_grad()",
    "loss.backward()",
    "optimizer.step()",
    "model.eval()",
    "destroy_process_group()  # NEW",
    'if __name__ == "__main__":',
    'if "WORLD_SIZE" in os.environ:',
    'world_size = int(os.environ["WORLD_SIZE"])',
    "world_size = 1",
    'rank = int(os.environ["RANK"])',
    "rank = 0",
    "if rank == 0:",
    'print("PyTorch version:", torch.__version__)',
    'print("CUDA available:", torch.cuda.is_available())',
    'print("Number of GPUs available:", torch.cuda.device_count())',
    "torch.manual_seed(123)",
    "num_epochs = 3",
    "main, rank, world_size, num_epochs",
]


def in_order(source: str, lines: list[str]) -> list[str]:
    """The lines not found in ``source`` after the one before them."""
    missing, at = [], 0
    for line in lines:
        found = source.find(line, at)
        if found == -1:
            missing.append(line)
        at = found + 1 if found != -1 else at
    return missing


def test_a08_carries_the_texts_lines_in_order():
    assert in_order((ROOT / "a08_ddp_torchrun.py").read_text(), TEXT_LINES_OF_A08) == []


SECTION_7 = [  # section 7's statements in the text's order (a05; a07 adds 9.2's NEW lines)
    "torch.manual_seed(123)", "model = NeuralNetwork(num_inputs=2, num_outputs=2)",
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.5)", "num_epochs = 3",
    "for epoch in range(num_epochs):", "model.train()",
    "for batch_idx, (features, labels) in enumerate(train_loader):", "logits = model(features)",
    "loss = F.cross_entropy(logits, labels)  # Loss function", "optimizer.zero_grad()",
    "loss.backward()", "optimizer.step()", "### LOGGING", "model.eval()",
    "# Optional model evaluation"]
SECTION_9_2 = ["model = NeuralNetwork(num_inputs=2, num_outputs=2)",
               'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # NEW',
               "model = model.to(device)  # NEW",
               "for batch_idx, (features, labels) in enumerate(train_loader):",
               "features, labels = features.to(device), labels.to(device)  # NEW",
               "logits = model(features)"]


@pytest.mark.parametrize("script, lines", [("a05_training_loop.py", SECTION_7),
                                           ("a07_gpu_single.py", SECTION_7),
                                           ("a07_gpu_single.py", SECTION_9_2)])
def test_the_training_scripts_carry_their_sections_statements_in_order(script, lines):
    assert in_order((ROOT / script).read_text(), lines) == []


@pytest.mark.parametrize("script", ["a05_training_loop.py", "a07_gpu_single.py",
                                    "a08_ddp_torchrun.py"])
def test_no_line_of_ours_inside_the_texts_batch_loop(script):
    """The companion's features sit around the lesson."""
    source = (ROOT / script).read_text()
    start = source.index("in enumerate(train_loader):" if "a08" not in script
                         else "for features, labels in train_loader:")
    loop = source[start:source.index("model.eval()", start)]
    ours = [line.strip() for line in loop.splitlines()
            if re.search(r"EXTRA|runner\.|processes\.|checkpoints\.|devices\.|args\.", line)]
    assert ours == []


def loop(script: str) -> list[str]:
    """The lines of a script's epoch loop, from its header to the text's closing comment."""
    source = (ROOT / script).read_text()
    start = source.index("    for epoch in range(")
    return source[start:source.index("        # Optional model evaluation\n", start)].splitlines()


def test_the_loops_differ_only_by_their_sections_marked_lines():
    """`diff a05 a07` shows 9.2's line in the loop, `diff a07 a08` 9.3's: each other line is
    the same, comments included."""
    a05 = loop("a05_training_loop.py")
    assert [line for line in loop("a07_gpu_single.py") if not line.endswith("  # NEW")] == a05
    assert [line for line in loop("a08_ddp_torchrun.py") if not MARKER.search(line)
            and line not in a05] == ['                  f" | Batchsize {labels.shape[0]:03d}"']


MARKER = re.compile(r"#\s*(NEW|EXTRA|NOTEBOOK|FIXED):")


def test_one_marker_per_comment():
    for script in sorted(ROOT.glob("a0*.py")):
        for number, line in enumerate(script.read_text().splitlines(), start=1):
            comment = line.split("#", 1)[1] if "#" in line else ""
            assert len(MARKER.findall("#" + comment)) <= 1, f"{script.name}:{number}"




# The text's own lines for what a script marks NEW (9.2 in a07, 9.3 in a08): any other NEW
# line claims a change the text does not make
NEW_LINES = {
    "a07_gpu_single.py": [
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        'device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")',
        "model = model.to(device)", "features, labels = features.to(device), labels.to(device)"],
    "a08_ddp_torchrun.py": [
        "import os", "import platform",
        "from torch.distributed import destroy_process_group, init_process_group",
        "from torch.nn.parallel import DistributedDataParallel as DDP",
        "from torch.utils.data.distributed import DistributedSampler",
        "def ddp_setup(rank, world_size", "shuffle=False,",
        "sampler=DistributedSampler(train_ds),", "def main(rank, world_size, num_epochs",
        "train_loader.sampler.set_epoch(epoch)", "for features, labels in train_loader:",
        'print(f"[{kind}{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"',
        "destroy_process_group()", 'if "WORLD_SIZE" in os.environ:', "if rank == 0:"],
}


def new_lines(script: str):
    """The code of each line marked NEW (a NEW comment standing alone: the line under it)."""
    lines = [line.strip() for line in (ROOT / script).read_text().splitlines()]
    for number, line in enumerate(lines):
        if "# NEW" in line:
            code = line.partition("# NEW")[0].strip()
            yield code or next(c for c in lines[number + 1:] if not c.startswith("#"))


@pytest.mark.parametrize("script", sorted(NEW_LINES))
def test_new_marks_only_the_texts_own_changes(script):
    marked = list(new_lines(script))
    assert len(marked) == len(NEW_LINES[script]), marked
    assert [m for m, text in zip(marked, NEW_LINES[script], strict=True)
            if not m.startswith(text)] == []


GPUS = torch.cuda.device_count()  # asked before the tests hide the machine's GPUs
NO_GPU = (AssertionError, AttributeError, RuntimeError)  # by torch's version and build
needs_a_gpu = pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU")
FIXED_PROOFS = {  # the start of a FIXED comment -> the test that shows the text's line failing
    "the text asks for NCCL everywhere": "test_the_texts_nccl_fails_in_a_process_without_a_gpu",
    "set_device fails without CUDA": "test_the_texts_set_device_fails_for_a_process_without_a_gpu",
    "rank is the global RANK here": "test_the_texts_set_device_of_a_global_rank_fails_on_machine_2",
    "instead, with 5 or more processes": "test_the_texts_data_leaves_a_fifth_process_no_batch",
    "not .to(rank)": "test_the_texts_to_rank_fails_for_a_process_without_a_gpu",
    "not rank": "test_the_texts_to_rank_fails_for_a_process_without_a_gpu",
    "device_ids=[rank] is refused": "test_the_texts_device_ids_are_refused_for_a_model_on_cpus",
    "the global RANK": "test_the_texts_local_rank_gives_two_machines_a_rank_0_each",
    "Linear(64 * 7 * 7": "test_the_guides_convnet_fits_only_28_by_28_images",
    "nn.RNN reads (sequence, batch)": "test_the_guides_rnn_reads_the_batch_as_the_sequence",
    "the article's forward needs h0": "test_the_guides_own_lines_name_what_it_never_defines",
    "used by the article but never": "test_the_guides_own_lines_name_what_it_never_defines",
    "the article's `YourModel()`": "test_the_guides_own_lines_name_what_it_never_defines",
    "the positions are added": "test_the_guides_positions_cannot_be_added_to_token_ids",
    "batch-first layers": "test_the_guides_sequence_first_transformer_wants_a_decoder_input",
    "a causal mask": "test_the_guides_unmasked_layers_let_a_position_see_later_tokens",
    "unmoved, the model": "test_the_guides_unmoved_model_fails_on_the_gpus_batches",
}
MARKED_FILES = [*sorted(ROOT.glob("a0*.py")), ROOT / "common" / "gpu_guide.py",
                ROOT / "common" / "gpu_howto.py"]


def test_every_fixed_line_names_the_test_that_shows_the_text_failing():
    comments = [(path.name, line.split("FIXED: ", 1)[1]) for path in MARKED_FILES
                for line in path.read_text().splitlines() if "FIXED: " in line]
    unproven = [c for c in comments if not any(c[1].startswith(k) for k in FIXED_PROOFS)]
    assert unproven == []
    assert [name for name in FIXED_PROOFS.values() if name not in globals()] == []
    assert {k for k in FIXED_PROOFS if not any(c.startswith(k) for _, c in comments)} == set()


@pytest.fixture
def group():
    """A gloo process group of one process, here."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    processes.leave_group()


@pytest.mark.real_devices
def test_the_texts_nccl_fails_in_a_process_without_a_gpu():
    """A CPU build has no NCCL; a CUDA build's NCCL cannot carry a CPU process's tensors."""
    with pytest.raises((RuntimeError, ValueError), match=r"NCCL built in|device type cpu|no GPUs"):
        dist.init_process_group(backend="nccl", init_method=f"tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)
        try:
            dist.all_reduce(torch.zeros(1))
        finally:
            processes.leave_group()


@pytest.mark.real_devices
def test_the_texts_set_device_fails_for_a_process_without_a_gpu():
    with pytest.raises(NO_GPU):
        torch.cuda.set_device(GPUS)  # no CUDA here, or one process more than there are GPUs


@pytest.mark.gpu
@needs_a_gpu
def test_the_texts_set_device_of_a_global_rank_fails_on_machine_2():
    """Two machines of GPUS GPUs: the first process of the second has the global rank GPUS."""
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.set_device(torch.cuda.device_count())
        torch.zeros(1, device="cuda")


def test_the_texts_data_leaves_a_fifth_process_no_batch():
    """Five processes: the text's loader gives process 4 no full batch, and its accuracy
    divides by zero (the text's try/except then asks for 2 GPUs)."""
    X_train, y_train, _, _ = toy_data()
    train_ds = ToyDataset(X_train, y_train)
    loader = DataLoader(dataset=train_ds, batch_size=2, shuffle=False, drop_last=True,
                        sampler=DistributedSampler(train_ds, num_replicas=5, rank=4))
    assert len(loader) == 0
    with pytest.raises(ValueError, match="yielded no examples"):  # ours, marked EXTRA
        compute_accuracy(NeuralNetwork(2, 2), loader)
    correct, total_examples = 0.0, 0  # what the text's compute_accuracy then holds
    with pytest.raises(ZeroDivisionError):
        (correct / total_examples).item()


@pytest.mark.real_devices
def test_the_texts_to_rank_fails_for_a_process_without_a_gpu():
    """model.to(rank), the batches' .to(rank), compute_accuracy(..., device=rank)."""
    rank = GPUS  # no CUDA here (rank 0), or one process more than there are GPUs
    for move in (lambda: NeuralNetwork(2, 2).to(rank), lambda: torch.zeros(1).to(rank)):
        with pytest.raises(NO_GPU):
            move()


def test_the_texts_device_ids_are_refused_for_a_model_on_cpus(group):
    with pytest.raises(ValueError, match="device_ids and output_device arguments only work"):
        DDP(NeuralNetwork(2, 2), device_ids=[0])


@pytest.mark.stress
def test_the_texts_local_rank_gives_two_machines_a_rank_0_each(tmp_path):
    """The text's __main__ reads LOCAL_RANK first: on two machines (two torchruns here) both
    processes take rank 0, and neither gets past init_process_group."""
    texts = {'    if "RANK" in os.environ:  # FIXED: the global RANK: LOCAL_RANK repeats on every '
             'machine\n        rank = int(os.environ["RANK"])\n':
             '    if "LOCAL_RANK" in os.environ:\n        rank = int(os.environ["LOCAL_RANK"])\n'
             '    elif "RANK" in os.environ:\n        rank = int(os.environ["RANK"])\n'}
    script, port = copy_of("a08_ddp_torchrun.py", tmp_path, texts), free_port()
    results = run_together({node: [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                                   f"--node_rank={node}", "--nproc_per_node=1",
                                   "--master_addr=127.0.0.1", f"--master_port={port}",
                                   str(script), "--timeout", "10"] for node in (0, 1)},
                           lambda node: tmp_path)
    for result in results.values():
        assert "PyTorch version" in result.stdout  # each the text's rank 0
        assert result.returncode != 0 and "Epoch" not in result.stdout


def test_the_guides_convnet_fits_only_28_by_28_images():
    article = torch.nn.Sequential(*list(gpu_guide.ConvNet().features)[:-1],
                                  *gpu_guide.ConvNet().classifier)  # without our pooling
    assert article(torch.randn(1, 3, 28, 28)).shape == (1, 10)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        article(torch.randn(1, 3, 32, 32))


def test_the_guides_rnn_reads_the_batch_as_the_sequence():
    """4 sequences of 7 tokens: the article's nn.RNN(embedding_dim, hidden_dim) gives 7."""
    _, hidden = torch.nn.RNN(8, 16)(torch.randn(4, 7, 8))
    assert hidden[-1].shape == (7, 16)


def test_the_guides_own_lines_name_what_it_never_defines():
    lines = {"out, _ = self.lstm(x, (h0, c0))": "h0",
             "self.pos_encoder = PositionalEncoding(d_model)": "PositionalEncoding",
             "model = YourModel()": "YourModel"}
    for line, name in lines.items():
        with pytest.raises(NameError, match=name):
            exec(line, {"self": SimpleNamespace(lstm=torch.nn.LSTM(16, 16)),
                        "x": torch.zeros(1, 3, 16), "d_model": 16})


def test_the_guides_positions_cannot_be_added_to_token_ids():
    with pytest.raises(RuntimeError, match="size of tensor"):
        gpu_guide.PositionalEncoding(16)(torch.randint(0, 100, (4, 7)))


def test_the_guides_sequence_first_transformer_wants_a_decoder_input():
    with pytest.raises(TypeError, match="tgt"):
        torch.nn.Transformer(16, 2, 1, 1)(torch.randn(4, 7, 16))


def test_the_guides_unmasked_layers_let_a_position_see_later_tokens():
    torch.manual_seed(0)
    layers = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, batch_first=True), 1).eval()
    x = torch.randn(1, 5, 16)
    later = x.clone()
    later[0, 4] += 1  # only the last token differs
    assert not torch.allclose(layers(x)[0, 0], layers(later)[0, 0])


@pytest.mark.gpu
@needs_a_gpu
def test_the_guides_unmoved_model_fails_on_the_gpus_batches():
    with pytest.raises(RuntimeError, match="same device"):
        NeuralNetwork(2, 2)(torch.zeros(2, 2, device="cuda"))
