"""Lab 06 as a participant meets it, on the local two-node Slurm: the stripped copy (no solutions, no outputs)
opened in JupyterLab, the DDP script completed in JupyterLab's editor with a conversion spelled differently
from the solution (other names, other idioms: what a participant who reads the TODOs may write), the
notebook's exercise answered by typing, Run All.

Checks: the copy and its script start without the solution; Run All goes to the end with no error output;
the checker passes the participant's script; ``labs.horovod_table`` points at the participant's own lines;
every claim holds. This is lab 06's run in CI: it replaced the nbval run of the solved notebook on Slurm
(notebooks/conftest.py, RUN_ELSEWHERE), which ran the same cells but not the participant's path.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from lab_page import (
    CELL_TEXTS,
    ERROR_OUTPUTS,
    MS,
    NOTEBOOK_READY,
    NOTEBOOKS,
    OUTPUT_COUNT,
    PLACEHOLDER_CELLS,
    SOURCE_OF,
    completed_script,
    paste_script,
    run_all,
    type_over_placeholder,
)

from coursekit.labs.kit import exercises

pytestmark = pytest.mark.slurm  # also an integration test: its jobs go to the local Slurm

NOTEBOOK = "06_data_parallel.ipynb"
SCRIPT = "lab06_data_parallel/train_ddp.py"
OPEN_TIMEOUT_S = 45
RUN_ALL_TIMEOUT_S = 600  # ~25 job processes, each importing torch (~6 CPU-s), on a busy 2-core machine
NOTEBOOK_ANSWER = f'my_script = "{SCRIPT}"'
# each exercise cell of the notebook, told by a line of its source -> what the participant types there
NOTEBOOK_ANSWERS = {"labs.check_ddp_script(": NOTEBOOK_ANSWER, "labs.predict(": "my_guess = 2",
                    "ticket.grade(": 'answers = {"same_weights": "yes"}'}
# The eight TODOs of train_ddp.py, in order, answered another way than the solution: a local import under
# another name, positional sampler arguments, `not rank`, the reduced sums in a new tensor, torchrun's or
# srun's variables read in a loop (what check_ddp_script and horovod_table must both accept)
SCRIPT_ANSWERS = (
    """for rank_var, local_var, size_var in LAUNCHER_VARIABLES:
    if rank_var in os.environ:
        rank, local_rank, world_size = (int(os.environ[v]) for v in (rank_var, local_var, size_var))
        break
else:
    rank, local_rank, world_size = 0, 0, 1
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or "9500"
os.environ.setdefault("MASTER_PORT", str(PORT_BASE + int(job) % PORT_SPAN))
device = torch.device("cpu")
if torch.cuda.is_available():
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
    torch.cuda.set_device(device)
dist.init_process_group(backend="gloo" if device.type == "cpu" else "nccl", world_size=world_size, rank=rank)""",
    """from torch.nn.parallel import DistributedDataParallel as Replicated
model = Replicated(model) if device.type == "cpu" else Replicated(model, device_ids=[device.index])""",
    """from torch.utils.data.distributed import DistributedSampler as Sharder
train_sampler = Sharder(train_set, world_size, rank, True, args.seed)
val_sampler = Sharder(val_set, world_size, rank, shuffle=False)""",
    """if not rank:
    print(header, flush=True)""",
    "train_sampler.set_epoch(epoch)",
    """totals = torch.tensor([loss_sum, steps, correct, total], dtype=torch.float64, device=device)
dist.all_reduce(totals)
loss_sum, steps, correct, total = totals.tolist()""",
    """if dist.get_rank() == 0:
    print_epoch(epoch, args.epochs, loss_sum / steps, correct / total, images_per_s)""",
    """if not rank:
    save_checkpoint(model.module, args.out, args.epochs, correct / total)
dist.barrier()
dist.destroy_process_group()""",
)
@pytest.fixture
def lab_site() -> str:
    """The kernels' jobs go to the local two-node Slurm (multi-process jobs, the two-node job, sbatch scripts)."""
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.fail(f"no usable local Slurm ({error}): start it with `bash slurm/cluster.sh start`")
    if not any(state.rstrip("*~#") in ("idle", "mixed", "allocated") for state in states):
        pytest.fail(f"the local Slurm has no usable node (sinfo: {states}): `bash slurm/cluster.sh start`")
    return "slurm"


def _complete_the_script(page, lab) -> str:  # noqa: ANN001
    """Open the participant's script in JupyterLab's editor, put the completed version in (as pasted), save."""
    path = lab.root / SCRIPT
    stripped = path.read_text()
    assert exercises.SCRIPT_PLACEHOLDER_RAISE in stripped and "DDP(model" not in stripped, "the copy holds a solution"
    return paste_script(page, lab.notebook_url(SCRIPT), path, completed_script(stripped, SCRIPT_ANSWERS))


def test_participant_copy_of_lab_06_runs_on_slurm_with_a_ddp_script_of_its_own(page, jupyter_lab):
    start = time.monotonic()
    exercises.strip_folder(NOTEBOOKS, jupyter_lab.root)
    script = _complete_the_script(page, jupyter_lab)

    page.goto(jupyter_lab.notebook_url(NOTEBOOK))
    page.wait_for_function(NOTEBOOK_READY, timeout=OPEN_TIMEOUT_S * MS)
    assert page.evaluate(OUTPUT_COUNT) == 0, "the participant copy shows outputs of the solved notebook"
    cells = page.evaluate(PLACEHOLDER_CELLS, exercises.PLACEHOLDER_RAISE)
    assert len(cells) == len(NOTEBOOK_ANSWERS), f"exercise cells: {cells}"
    for index in cells:
        source = page.evaluate(SOURCE_OF, index)
        answer = next(answer for marker, answer in NOTEBOOK_ANSWERS.items() if marker in source)
        type_over_placeholder(page, index, source, answer)
        assert answer in page.evaluate(SOURCE_OF, index)

    run_all(page, RUN_ALL_TIMEOUT_S)
    assert page.evaluate(ERROR_OUTPUTS) == [], "an error or stderr output is shown"
    texts = "\n".join(page.evaluate(CELL_TEXTS))
    assert "every check passed" in texts, texts[-3000:]
    assert "CLAIM HOLDS" in texts and "CLAIM DOES NOT HOLD" not in texts
    assert "#SBATCH" in texts, "the jobs did not go to Slurm (no batch script shown)"
    # the Horovod table points at the participant's lines, spelled their way
    for line in ("train_sampler = Sharder(train_set, world_size, rank, True, args.seed)",
                 "model = Replicated(model) if device.type", "save_checkpoint(model.module, args.out",
                 "dist.init_process_group(backend="):
        assert line in script and re.search(re.escape(line[:40]), texts), f"horovod_table misses {line!r}"
    print(f"lab 06 participant copy on Slurm: {time.monotonic() - start:.0f} s")
