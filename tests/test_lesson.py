"""The scripts beside the text: its lines in its order, nothing of ours in its batch loop, and
every marker true. A `# FIXED:` line names, in FIXED_PROOFS, the test that runs the text's own
code (tests/the_text.py) in the text's own setting, where it fails, and asserts the failure,
with our line as its control;
a `# NEW:` line is one the text itself changes in that section (NEW_LINES)."""

import ast
import keyword
import re
import tokenize
from pathlib import Path

import pytest
import torch

import the_text
from common import NeuralNetwork, ToyDataset, gpu_guide
from conftest import ROOT

TEXT_LINES_OF_A08 = [  # section 9.3's own lines, as the text writes them, in its order
    "import torch", "import torch.nn.functional as F", "import os", "import platform",
    "from torch.utils.data.distributed import DistributedSampler",
    "from torch.nn.parallel import DistributedDataParallel as DDP",
    "from torch.distributed import init_process_group, destroy_process_group",
    "def ddp_setup(rank, world_size):",
    'if "MASTER_ADDR" not in os.environ:',
    'os.environ["MASTER_ADDR"] = "localhost"',
    'if "MASTER_PORT" not in os.environ:',
    'os.environ["MASTER_PORT"] = "12345"',
    'if platform.system() == "Windows":',
    'os.environ["USE_LIBUV"] = "0"',
    'init_process_group(backend="gloo", rank=rank, world_size=world_size)',
    'init_process_group(backend="nccl", rank=rank, world_size=world_size)',
    "torch.cuda.set_device(rank)",
    "def prepare_dataset():",
    "X_train = torch.tensor([", "y_train = torch.tensor([0, 0, 0, 1, 1])",
    "X_test = torch.tensor([", "y_test = torch.tensor([0, 1])",
    "# factor = 4",
    "# X_train = torch.cat([X_train + torch.randn_like(X_train) * 0.1 for _ in range(factor)])",
    "# y_train = y_train.repeat(factor)",
    "# X_test = torch.cat([X_test + torch.randn_like(X_test) * 0.1 for _ in range(factor)])",
    "# y_test = y_test.repeat(factor)",
    "train_ds = ToyDataset(X_train, y_train)", "test_ds = ToyDataset(X_test, y_test)",
    "train_loader = DataLoader(", "dataset=train_ds,", "batch_size=2,",
    "shuffle=False,  # NEW", "pin_memory=True,", "drop_last=True,",
    "sampler=DistributedSampler(train_ds)",
    "test_loader = DataLoader(", "dataset=test_ds,", "batch_size=2,", "shuffle=False,",
    "return train_loader, test_loader",
    "def main(rank, world_size, num_epochs):",
    "ddp_setup(rank, world_size)",
    "train_loader, test_loader = prepare_dataset()",
    "model = NeuralNetwork(num_inputs=2, num_outputs=2)",
    "model.to(rank)",
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.5)",
    "model = DDP(model, device_ids=[rank])",
    "for epoch in range(num_epochs):",
    "train_loader.sampler.set_epoch(epoch)",
    "model.train()",
    "for features, labels in train_loader:",
    "features, labels = features.to(rank), labels.to(rank)",
    "logits = model(features)",
    "loss = F.cross_entropy(logits, labels)  # Loss function",
    "optimizer.zero_grad()", "loss.backward()", "optimizer.step()",
    "# LOGGING",
    'print(f"[GPU{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"',
    'f" | Batchsize {labels.shape[0]:03d}"', 'f" | Train/Val Loss: {loss:.2f}")',
    "model.eval()",
    "try:",
    "train_acc = compute_accuracy(model, train_loader, device=rank)",
    'print(f"[GPU{rank}] Training accuracy", train_acc)',
    "test_acc = compute_accuracy(model, test_loader, device=rank)",
    'print(f"[GPU{rank}] Test accuracy", test_acc)',
    "destroy_process_group()  # NEW",
    'if __name__ == "__main__":',
    'if "WORLD_SIZE" in os.environ:', 'world_size = int(os.environ["WORLD_SIZE"])', "else:",
    "world_size = 1",
    'if "LOCAL_RANK" in os.environ:', 'rank = int(os.environ["LOCAL_RANK"])',
    'elif "RANK" in os.environ:',
    'rank = int(os.environ["RANK"])', "rank = 0",
    "if rank == 0:",
    'print("PyTorch version:", torch.__version__)',
    'print("CUDA available:", torch.cuda.is_available())',
    'print("Number of GPUs available:", torch.cuda.device_count())',
    "torch.manual_seed(123)",
    "num_epochs = 3",
    "main(rank, world_size, num_epochs)",
]
A08_WRITES_OTHERWISE = {  # the text's line -> a08's, which carries (or stands under) an EXTRA
    "def ddp_setup(rank, world_size):":
        'def ddp_setup(rank, world_size, timeout=120, device="auto"):',
    'init_process_group(backend="gloo", rank=rank, world_size=world_size)':
        'init_process_group(backend="nccl" if devices.gpu_of_its_own(device) else "gloo",',
    'init_process_group(backend="nccl", rank=rank, world_size=world_size)':
        'init_process_group(backend="nccl" if devices.gpu_of_its_own(device) else "gloo",',
    "torch.cuda.set_device(rank)": 'torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))',
    "pin_memory=True,": 'pin_memory=torch.distributed.get_backend() == "nccl",',
    "def main(rank, world_size, num_epochs):":
        'def main(rank, world_size, num_epochs, snapshot=None, timeout=120, device="auto"):',
    "ddp_setup(rank, world_size)": "ddp_setup(rank, world_size, timeout=timeout, device=device)",
    "model.to(rank)": "model.to(device)",
    "model = DDP(model, device_ids=[rank])": "model = DDP(model)",
    "for epoch in range(num_epochs):": "for epoch in range(first_epoch, num_epochs):",
    "features, labels = features.to(rank), labels.to(rank)":
        "features, labels = features.to(device), labels.to(device)",
    'print(f"[GPU{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"':
        'print(f"[{kind}{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"',
    "try:": "# EXTRA: for the text's try/except ZeroDivisionError",
    "train_acc = compute_accuracy(model, train_loader, device=rank)":
        "train_acc = compute_accuracy(model, train_loader, device=device)",
    'print(f"[GPU{rank}] Training accuracy", train_acc)':
        'print(f"[{kind}{rank}] Training accuracy", train_acc)',
    "test_acc = compute_accuracy(model, test_loader, device=rank)":
        "test_acc = compute_accuracy(model, test_loader, device=device)",
    'print(f"[GPU{rank}] Test accuracy", test_acc)':
        'print(f"[{kind}{rank}] Test accuracy", test_acc)',
    'if "LOCAL_RANK" in os.environ:': 'if "RANK" in os.environ:',
    'rank = int(os.environ["LOCAL_RANK"])': 'if "RANK" in os.environ:',
    'elif "RANK" in os.environ:': 'if "RANK" in os.environ:',
    "main(rank, world_size, num_epochs)":
        "processes.start(main, rank, world_size, num_epochs, spawn=args.spawn,",
}


MARKED_FILES = [*sorted(ROOT.glob("a0*.py")), ROOT / "common" / "__init__.py",
                ROOT / "common" / "gpu_guide.py", ROOT / "common" / "gpu_howto.py"]


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
    """Each as the text writes it, or as a08 writes it otherwise (one line of a08's may stand
    for several of the text's)."""
    ours = [A08_WRITES_OTHERWISE.get(line, line) for line in TEXT_LINES_OF_A08]
    ours = [line for number, line in enumerate(ours) if number == 0 or line != ours[number - 1]]
    assert in_order((ROOT / "a08_ddp_torchrun.py").read_text(encoding="utf-8"), ours) == []


def comment_over(lines: list[str], number: int) -> str:
    """The comment on line ``number`` and on the comment lines right above it."""
    above = number
    while above > 0 and lines[above - 1].strip().startswith("#"):
        above -= 1
    return " ".join(line.partition("#")[2] for line in lines[above:number + 1])


def test_each_line_a08_writes_otherwise_says_why_in_an_extra():
    lines = (ROOT / "a08_ddp_torchrun.py").read_text(encoding="utf-8").splitlines()
    unmarked = [ours for ours in set(A08_WRITES_OTHERWISE.values())
                if "EXTRA: " not in comment_over(lines, next(
                    n for n, line in enumerate(lines) if line.strip().startswith(ours)))]
    assert unmarked == []


def test_every_line_of_a08_with_a_name_the_text_lacks_is_marked():
    """A line that uses a name 9.3's text never does (our modules, options, the device, the
    snapshot's epoch) carries a marker, or stands under a comment that does: the learner tells
    the text's lines from ours at a glance."""
    path = ROOT / "a08_ddp_torchrun.py"
    lines = path.read_text(encoding="utf-8").splitlines()
    texts = set(re.findall(r"[A-Za-z_]\w*", " ".join(TEXT_LINES_OF_A08))) | {
        "Dataset", "DataLoader", "ToyDataset", "NeuralNetwork", "compute_accuracy", "factor",
        "__doc__"}  # the text's classes and function, defined in its script
    names, statement, first = {}, {}, None  # line -> its names; -> its statement's first line
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            line = token.start[0] - 1
            if token.type == tokenize.NEWLINE:
                first = None
            elif token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT,
                                    tokenize.DEDENT, tokenize.ENCODING):
                first = line if first is None else first
                statement[line] = first
            if token.type == tokenize.NAME and not keyword.iskeyword(token.string):
                names.setdefault(line, set()).add(token.string)
    ours = [lines[n].strip() for n, found in sorted(names.items()) if found - texts and not any(
        re.search(r"\b(NEW|EXTRA|FIXED): ", comment_over(lines, line))
        for line in (n, statement[n]))]
    assert ours == []


SECTION_7 = [  # section 7's statements in the text's order (a05; a07 adds 9.2's NEW lines)
    "torch.manual_seed(123)", "model = NeuralNetwork(num_inputs=2, num_outputs=2)",
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.5)", "num_epochs = 3",
    "for epoch in range(num_epochs):", "model.train()",
    "for batch_idx, (features, labels) in enumerate(train_loader):", "logits = model(features)",
    "loss = F.cross_entropy(logits, labels)  # Loss function", "optimizer.zero_grad()",
    "loss.backward()", "optimizer.step()", "### LOGGING", "model.eval()",
    "# Optional model evaluation"]
SECTION_9_1 = ["tensor_1 = torch.tensor([1., 2., 3.])", "tensor_2 = torch.tensor([4., 5., 6.])",
               "print(tensor_1 + tensor_2)", 'tensor_1 = tensor_1.to("cpu")',
               "print(tensor_1 + tensor_2)"]  # a07 labels the first print
SECTION_9_2 = ["model = NeuralNetwork(num_inputs=2, num_outputs=2)",
               'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # NEW',
               "model = model.to(device)  # NEW",
               "for batch_idx, (features, labels) in enumerate(train_loader):",
               "features, labels = features.to(device), labels.to(device)  # NEW",
               "logits = model(features)"]


SECTION_5 = [
    "model = NeuralNetwork(50, 3)", "print(model)",
    "num_params = sum(p.numel() for p in model.parameters() if p.requires_grad)",
    'print("Total number of trainable model parameters:", num_params)',
    "model.layers[0].weight", "model.layers[0].weight.shape)",
    "torch.manual_seed(123)", "model = NeuralNetwork(50, 3)", "model.layers[0].weight",
    "torch.manual_seed(123)", "X = torch.rand((1, 50))", "out = model(X)", ", out)",
    "with torch.no_grad():", "out = model(X)", ", out)",
    "with torch.no_grad():", "out = torch.softmax(model(X), dim=1)", ", out)"]
SECTION_6 = [
    "X_train = torch.tensor([",
    "y_train = torch.tensor([0, 0, 0, 1",  # the text's ends "1])", four labels: FIXED in a04
    "X_test = torch.tensor([", "y_test = torch.tensor([0, 1])",
    "train_ds = ToyDataset(X_train, y_train)", "test_ds = ToyDataset(X_test, y_test)",
    "len(train_ds))", "torch.manual_seed(123)",
    "train_loader = DataLoader(\ndataset=train_ds,\nbatch_size=2,\nshuffle=True,\n"
    "num_workers=0\n)", "test_ds = ToyDataset(X_test, y_test)",
    "test_loader = DataLoader(\ndataset=test_ds,\nbatch_size=2,\nshuffle=False,\n"
    "num_workers=0\n)",
    'for idx, (x, y) in enumerate(train_loader):\nprint(f"Batch {idx+1}:", x, y)',
    "train_loader = DataLoader(\ndataset=train_ds,\nbatch_size=2,\nshuffle=True,\n"
    "num_workers=0,\ndrop_last=True\n)",
    'for idx, (x, y) in enumerate(train_loader):\nprint(f"Batch {idx+1}:", x, y)']
SECTION_8 = ['torch.save(model.state_dict(), "model.pth")', "model = NeuralNetwork(2, 2)",
             'model.load_state_dict(torch.load("model.pth", weights_only=True))']


@pytest.mark.parametrize("script, lines", [("a03_mlp.py", SECTION_5),
                                           ("a04_dataloaders.py", SECTION_6),
                                           ("a06_save_load.py", SECTION_8)])
def test_sections_5_6_and_8_carry_the_texts_statements_in_order(script, lines):
    """As the text writes them, in its order (indentation aside); a label beside a printed
    value is ours."""
    source = "\n".join(line.strip() for line in
                       (ROOT / script).read_text(encoding="utf-8").splitlines())
    assert in_order(source, lines) == []


@pytest.mark.parametrize("script, lines", [("a05_training_loop.py", SECTION_7),
                                           ("a07_gpu_single.py", SECTION_7),
                                           ("a07_gpu_single.py", SECTION_9_2)])
def test_the_training_scripts_carry_their_sections_statements_in_order(script, lines):
    assert in_order((ROOT / script).read_text(encoding="utf-8"), lines) == []


def test_section_9_1_carries_the_texts_tensors():
    """`[1., 2., 3.]` as the text writes it; a07's first print carries a label of ours."""
    source = (ROOT / "a07_gpu_single.py").read_text(encoding="utf-8")
    source = source.replace('print("On the CPU:", ', "print(")
    assert in_order(source, SECTION_9_1) == []


# compute_accuracy as the blog writes it (sections 7 and 9.3): the four lines after the logits
# inside `with torch.no_grad():`
COMPUTE_ACCURACY = """\
        with torch.no_grad():
            logits = model(features)

            predictions = torch.argmax(logits, dim=1)
            compare = labels == predictions
            correct += torch.sum(compare)
            total_examples += len(compare)

    return (correct / total_examples).item()
"""
# The GPU articles' lines, as published, in their order; the how-to's garbled moves and the
# guide's placeholders as the companion writes them out (EXTRA, saying why)
HOWTO_LINES = ["x = torch.tensor([1, 2, 3])", 'print("Device: ", x.device)',
               "x = torch.tensor([1, 2, 3])", "x = x.to(device)  # EXTRA",
               "y = torch.tensor([4, 5, 6], device=device)", 'print("Device: ", y.device)',
               "x = torch.tensor([8, 9, 10])", 'x = x.to("cuda:0")  # EXTRA',
               "tensor = torch.rand((100, 30))", "model = LinearRegression(2, 5)", "print(model)"]
GUIDE_SNIPPET = ["batch_size = 128", "device = a07_device  # EXTRA",
                 "model = NeuralNetwork(2, 2)  # EXTRA",
                 "dataloader = DataLoader(dataset, batch_size=batch_size, shuffle=True)"]


@pytest.mark.parametrize("path, lines", [("common/__init__.py", [COMPUTE_ACCURACY]),
                                         ("common/gpu_howto.py", HOWTO_LINES),
                                         ("common/gpu_guide.py", GUIDE_SNIPPET)])
def test_the_shared_code_and_the_articles_carry_their_lines_in_order(path, lines):
    assert in_order((ROOT / path).read_text(encoding="utf-8"), lines) == []


@pytest.mark.parametrize("script", ["a05_training_loop.py", "a06_save_load.py",
                                    "a07_gpu_single.py"])
def test_what_a_script_adds_to_its_section_says_so(script):
    """Section 6's loaders from common, and (a06, whose section has no functions) each function
    beside main, under an EXTRA."""
    lines = (ROOT / script).read_text(encoding="utf-8").splitlines()
    ours = [n for n, line in enumerate(lines) if line.strip().startswith("train_loader, ") or
            (script == "a06_save_load.py" and line.startswith("def ") and "def main(" not in line)]
    assert ours and [lines[n] for n in ours if "EXTRA: " not in comment_over(lines, n)] == []


@pytest.mark.parametrize("script", ["a05_training_loop.py", "a07_gpu_single.py",
                                    "a08_ddp_torchrun.py"])
def test_no_line_of_ours_inside_the_texts_batch_loop(script):
    """The companion's features sit around the lesson: a line of ours there only stands in a
    line's place that 9.3 writes otherwise (A08_WRITES_OTHERWISE), saying so (EXTRA)."""
    source = (ROOT / script).read_text(encoding="utf-8")
    start = source.index("in enumerate(train_loader):" if "a08" not in script
                         else "for features, labels in train_loader:")
    loop = source[start:source.index("model.eval()", start)]
    in_the_texts_place = tuple(A08_WRITES_OTHERWISE.values()) if "a08" in script else ()
    ours = [line.strip() for line in loop.splitlines() if
            not line.strip().startswith(in_the_texts_place) and
            re.search(r"EXTRA|runner\.|processes\.|checkpoints\.|devices\.|args\.", line)]
    assert ours == []


def loop(script: str) -> list[str]:
    """The lines of a script's epoch loop, from its header to its model.eval()."""
    source = (ROOT / script).read_text(encoding="utf-8")
    start = source.index("    for epoch in range(")
    return source[start:source.index("        model.eval()\n", start)].splitlines()


def test_the_loops_differ_only_by_their_sections_marked_lines():
    """`diff a05 a07` shows 9.2's line in the loop, `diff a07 a08` 9.3's: each other line is
    the same, comments included."""
    a05 = loop("a05_training_loop.py")
    assert unmarked(loop("a07_gpu_single.py")) == a05
    assert [line for line in unmarked(loop("a08_ddp_torchrun.py")) if line not in a05] == \
        ["            # LOGGING", '                  f" | Batchsize {labels.shape[0]:03d}"']


def unmarked(lines: list[str]) -> list[str]:
    """The lines that carry no marker, nor stand under a comment line that carries one."""
    kept, under_a_marker = [], False
    for line in lines:
        if not under_a_marker and not MARKER.search(line):
            kept.append(line)
        under_a_marker = line.strip().startswith("#") and bool(MARKER.search(line))
    return kept


MARKER = re.compile(r"#.*\b(NEW|EXTRA|FIXED)\b")


def test_every_marker_says_what_for_and_new_comes_first():
    """One comment may carry two markers (`# NEW: ...; FIXED: ...`): each once, each followed
    by words, NEW first, so that a search for NEW finds every change the section makes."""
    for path in MARKED_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            comment = line.partition("#")[2]
            found = re.findall(r"\b(NEW|EXTRA|FIXED)\b", comment)
            where = f"{path.name}:{number}: {line.strip()}"
            assert len(found) == len(set(found)), where
            assert "NEW" not in found or found[0] == "NEW", where
            assert not re.search(r"\b(NEW|EXTRA|FIXED)\b(?!: \S)", comment), where


# The text's own lines for what a script marks NEW (9.2 in a07, 9.3 in a08): any other NEW
# line claims a change the text does not make
NEW_LINES = {
    "a07_gpu_single.py": [
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        'device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")',
        "model = model.to(device)", "features, labels = features.to(device), labels.to(device)"],
    "a08_ddp_torchrun.py": [  # the lines a08 writes as the text does (the rest: EXTRA)
        "import os", "import platform",
        "from torch.utils.data.distributed import DistributedSampler",
        "from torch.nn.parallel import DistributedDataParallel as DDP",
        "from torch.distributed import init_process_group, destroy_process_group",
        "def prepare_dataset():", "shuffle=False,", "sampler=DistributedSampler(train_ds)",
        "train_loader, test_loader = prepare_dataset()", "train_loader.sampler.set_epoch(epoch)",
        "for features, labels in train_loader:", "destroy_process_group()",
        'if "WORLD_SIZE" in os.environ:', "if rank == 0:"],
}


def new_lines(script: str):
    """The code of each line marked NEW (a NEW comment standing alone: the line under it)."""
    lines = [line.strip() for line in (ROOT / script).read_text(encoding="utf-8").splitlines()]
    for number, line in enumerate(lines):
        if "# NEW" in line:
            code = line.partition("# NEW")[0].strip()
            yield code or next(c for c in lines[number + 1:] if not c.startswith("#"))


@pytest.mark.parametrize("script", sorted(NEW_LINES))
def test_new_marks_only_the_texts_own_changes(script):
    """Each NEW line starts with the text's line as the text writes it: a line of ours in its
    place carries EXTRA alone, so that NEW always reads "this is the text"."""
    marked = list(new_lines(script))
    assert len(marked) == len(NEW_LINES[script]), marked
    assert [m for m, text in zip(marked, NEW_LINES[script], strict=True)
            if not m.startswith(text)] == []


FIXED_PROOFS = {  # the start of a FIXED comment -> the test that runs the text's code failing
    "five labels, one per example":
        "test_the_blogs_four_labels_lose_an_example_and_break_section_7",
    "used by the article but never": "test_the_articles_transformer_names_an_undefined_class",
    "a causal mask": "test_the_articles_transformer_lets_a_position_see_later_tokens",
}


def test_every_fixed_line_names_the_test_that_runs_the_text_failing():
    """The proofs are below: each builds the text's code from tests/the_text.py, in the text's
    own setting, asserts the failure by type and message (or the wrong result), and runs the
    same assertion on our line as its control."""
    comments = [(path.name, line.split("FIXED: ", 1)[1]) for path in MARKED_FILES
                for line in path.read_text(encoding="utf-8").splitlines() if "FIXED: " in line]
    unproven = [c for c in comments if not any(c[1].startswith(k) for k in FIXED_PROOFS)]
    assert unproven == []
    assert [name for name in FIXED_PROOFS.values() if name not in globals()] == []
    assert {k for k in FIXED_PROOFS if not any(c.startswith(k) for _, c in comments)} == set()


def tensors_of(path: Path) -> dict[str, torch.Tensor]:
    """The file's ``X_train = torch.tensor(...)``-style lines (section 6's data), evaluated."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "torch.tensor"):
            found[ast.unparse(node.targets[0])] = eval(ast.unparse(node.value), {"torch": torch})
    return found


def sections_6_and_7(X_train: torch.Tensor, y_train: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Section 6's ``len(train_ds)``, and section 7's ``torch.sum(predictions == y_train)``
    over the training examples (predictions from a model the text's way)."""
    train_ds = ToyDataset(X_train, y_train)
    torch.manual_seed(123)
    with torch.no_grad():
        predictions = torch.argmax(NeuralNetwork(num_inputs=2, num_outputs=2)(X_train), dim=1)
    return len(train_ds), torch.sum(predictions == y_train)


def test_the_blogs_four_labels_lose_an_example_and_break_section_7():
    """The text says "The result is 5"; with the blog's four labels it is 4, and section 7's
    comparison of five predictions with four labels raises. a04's line is the control."""
    a04 = tensors_of(ROOT / "a04_dataloaders.py")
    for X_train, y_train, as_published in ((the_text.X_train, the_text.y_train, True),
                                           (a04["X_train"], a04["y_train"], False)):
        if as_published:
            with pytest.raises(RuntimeError, match=r"size of tensor a \(5\) must match the size "
                                                   r"of tensor b \(4\)"):
                sections_6_and_7(X_train, y_train)
            assert len(ToyDataset(X_train, y_train)) == 4
        else:
            assert sections_6_and_7(X_train, y_train)[0] == 5


@pytest.mark.parametrize("copy", ["a08_ddp_torchrun.py", "common/__init__.py"])
def test_every_copy_of_section_6s_data_is_a04s(copy):
    """a08's prepare_dataset (9.3 writes the data out again) and common's toy_data, which a05
    and a07 take, hold a04's tensors."""
    a04, other = tensors_of(ROOT / "a04_dataloaders.py"), tensors_of(ROOT / copy)
    assert sorted(a04) == ["X_test", "X_train", "y_test", "y_train"]
    assert {name: other[name].tolist() for name in a04} == \
        {name: tensor.tolist() for name, tensor in a04.items()}


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_the_articles_transformer_names_an_undefined_class():
    with pytest.raises(NameError, match="name 'PositionalEncoding' is not defined"):
        the_text.TransformerLM(100, 16, 2, 1, 7)
    assert isinstance(gpu_guide.TransformerLM(100, 16, 2, 1, 7), torch.nn.Module)


def changed(ids: torch.Tensor, where: tuple) -> torch.Tensor:
    """``ids`` with the token at ``where`` replaced by another."""
    ids = ids.clone()
    ids[where] = (ids[where] + 1) % 100
    return ids


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@torch.no_grad()
def test_the_articles_transformer_lets_a_position_see_later_tokens(monkeypatch):
    """Fed (sequence, batch) ids, as its layers read them, with a PositionalEncoding that adds
    nothing (the article defines none) and no dropout: with no tgt_mask, the output at target
    position 0 changes with the target's last token, the kind it is trained to predict."""
    monkeypatch.setattr(the_text, "PositionalEncoding",
                        lambda d_model, seq_len: lambda ids: 0, raising=False)
    torch.manual_seed(0)
    article = the_text.TransformerLM(100, 16, 2, 1, 7).eval()
    ours = gpu_guide.TransformerLM(100, 16, 2, 1, 7).eval()
    ids = torch.randint(0, 100, (7, 4))
    for model, sees_later_tokens in ((article, True), (ours, False)):
        before, after = model(ids, ids), model(ids, changed(ids, (6, 0)))
        assert torch.allclose(before[0, 0], after[0, 0]) is not sees_later_tokens
