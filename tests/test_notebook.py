"""TROUBLESHOOTING.md's notebook cells, each one line of code; (stress) run in a real Jupyter
kernel as a local Jupyter or VS Code runs one from a virtual environment: the kernel's own
Python, with no `python` on PATH. A bare `!python` fails there; the entry's cells work. Needs
ipykernel, nbclient and nbformat (.ci/run installs them); skips with the reason without them."""

import re
import shutil

import pytest

from conftest import ROOT, clean_env, links
from test_readme import troubleshooting


def notebook_cells() -> list[str]:
    """The cells of TROUBLESHOOTING.md's notebook entry: its inline code that runs something
    (``%pip``, Python, or ``!``), in order."""
    text = troubleshooting()
    paragraph = text[text.index("### DDP in a notebook cell"):]
    paragraph = paragraph[paragraph.index("\n") + 1:]
    paragraph = paragraph[:paragraph.index("\n\n")]
    spans = re.findall(r"`([^`]+)`", paragraph)
    return [span for span in spans if span.startswith(("%pip", "!", "import ", "a05_"))]


def test_the_readmes_notebook_cells_are_the_ones_the_kernel_runs():
    """The Quick start's Colab and Jupyter line: the entry's first cells, which the stress run
    executes in a real kernel (below)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = readme[readme.index("**In Colab or Jupyter**"):]
    line = line[:line.index("\n\n")]
    cells = [span for span in re.findall(r"`([^`]+)`", line)
             if span.startswith(("%pip", "!", "import "))]
    assert cells == notebook_cells()[:3]


def test_the_notebook_entry_gives_cells_that_use_the_kernels_python():
    cells = notebook_cells()
    assert cells[0] == "%pip install -q ."
    assert cells[1] == "import sys"
    assert all(cell.startswith("!{sys.executable} ") for cell in cells[2:4]), cells
    assert [cell.split()[-1] for cell in cells[2:4]] == ["a05_training_loop.py",
                                                         "a08_ddp_torchrun.py"]
    assert cells[4:] == ["import a05_training_loop", "a05_training_loop.main()"]


@links
@pytest.mark.stress
def test_the_notebook_cells_run_in_a_kernel_without_python_on_path(tmp_path):
    nbclient = pytest.importorskip("nbclient", reason="pip install nbclient ipykernel")
    nbformat = pytest.importorskip("nbformat", reason="pip install nbformat")
    pytest.importorskip("ipykernel", reason="pip install ipykernel")
    # `%pip install -q .` would install into the environment running these tests; its
    # terminal twin, `pip install .`, runs in test_quick_start.py
    cells = [f"%cd {ROOT}", *notebook_cells()[1:], "!python a05_training_loop.py"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    # A PATH on which no `python` or `torchrun` is found, only the `sh` that IPython runs `!`
    # lines with (it looks up $SHELL, else `sh`, on PATH; CI sets no SHELL)
    only_sh = tmp_path / "bin"
    only_sh.mkdir()
    (only_sh / "sh").symlink_to(shutil.which("sh"))
    env = {k: v for k, v in clean_env().items() if k != "SHELL"} | {"PATH": str(only_sh)}
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)
    outputs = ["".join(output.get("text", "") for output in cell.outputs)
               for cell in notebook.cells]
    a05, a08, _, main, bare_python = outputs[2:]
    assert "Test accuracy: 1.0" in a05
    assert "Parameters identical in all 2 processes: True" in a08
    assert "Test accuracy" not in bare_python  # the README's old cell: not found here
    assert "Epoch: 003/003 | Batch 001/002 | Train/Val Loss: 0.00" in main  # the kernel's -f
