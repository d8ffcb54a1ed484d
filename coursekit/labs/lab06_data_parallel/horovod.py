"""Horovod -> DDP: each step of a Horovod script (NVIDIA DLI's older labs) and the DDP line that does it.

``horovod_table(script)`` finds the line of ``script`` that does each step and gives its number, so the
table shown in lab 06 points at the participant's own script (``lab06_data_parallel/train_ddp.py``). Lines are found
by what they do, read from the script's syntax tree (a call of ``init_process_group``, the model wrapped
in ``DistributedDataParallel`` under any name it was imported as, an ``if`` on the rank being 0, ...), not
by how the solution spells them; a step the script does not do is shown as not found, and a script that
does not parse gives a table that says so: the table never stops the notebook.
"""

from __future__ import annotations

import ast
import html
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coursekit.labs.lab06_data_parallel import SCRIPTS

DDP_SCRIPT = SCRIPTS / "train_ddp.py"  # the solution; participants get lab06_data_parallel/train_ddp.py
LAUNCHERS = re.compile(r"\b(torchrun|srun)\b")
OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "LARS", "LAMB"}
RANK_ZERO = re.compile(r"(rank\w*|get_rank\(\))\s*==\s*0\b|\b0\s*==\s*\w*(rank|get_rank\(\))|not\s+\w*rank\b|"
                       r"is_main|is_master|main_process")


class ScriptTree:
    """A script's syntax tree, with the local names its imports gave to torch's DDP classes."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()
        self.tree = ast.parse(source)
        self.nodes = sorted((n for n in ast.walk(self.tree) if hasattr(n, "lineno")),
                            key=lambda n: (n.lineno, n.col_offset))
        self.aliases: dict[str, set[str]] = {"DistributedDataParallel": {"DistributedDataParallel"},
                                             "DistributedSampler": {"DistributedSampler"}}
        for node in self.nodes:
            if isinstance(node, ast.ImportFrom):
                for name in node.names:
                    if name.name in self.aliases:
                        self.aliases[name.name].add(name.asname or name.name)

    def first(self, matches: Callable[[ast.AST, ScriptTree], bool]) -> int | None:
        """The line of the first node that ``matches``, or None."""
        return next((n.lineno for n in self.nodes if matches(n, self)), None)

    def first_text(self, pattern: re.Pattern[str]) -> int | None:
        """The first line, comments and docstrings included, that ``pattern`` finds."""
        return next((n for n, text in enumerate(self.lines, start=1) if pattern.search(text)), None)


def called(node: ast.AST) -> str:
    """The name a call calls: ``dist.init_process_group(...)`` -> ``init_process_group``; else ""."""
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def calls(*names: str) -> Callable[[ast.AST, ScriptTree], bool]:
    return lambda node, _tree: called(node) in names


def calls_imported(name: str) -> Callable[[ast.AST, ScriptTree], bool]:
    return lambda node, tree: called(node) in tree.aliases[name] | {name}


def _targets(node: ast.AST) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def assigns_rank(node: ast.AST, _tree: ScriptTree) -> bool:
    return any("rank" in name.lower() for name in _targets(node))


def builds_optimizer(node: ast.AST, _tree: ScriptTree) -> bool:
    return isinstance(node, ast.Call) and (called(node) in OPTIMIZERS or "optim." in ast.unparse(node.func))


def scales_by_world_size(node: ast.AST, _tree: ScriptTree) -> bool:
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
            and any("world" in ast.unparse(side).lower() or "get_world_size" in ast.unparse(side)
                    for side in (node.left, node.right)))


def tests_rank_zero(node: ast.AST, _tree: ScriptTree) -> bool:
    return isinstance(node, ast.If) and RANK_ZERO.search(ast.unparse(node.test)) is not None


def saves_unwrapped_model(node: ast.AST, _tree: ScriptTree) -> bool:
    return "save" in called(node).lower() and ".module" in ast.unparse(node)


@dataclass(frozen=True)
class HorovodStep:
    horovod: str  # the Horovod line
    ddp: str  # what DDP does instead, in words or code
    finds: Callable[[ast.AST, ScriptTree], bool] | None  # the node that does it; None: a launch line in the text


HOROVOD_TO_DDP: tuple[HorovodStep, ...] = (
    HorovodStep("horovodrun -np 2 python train.py", "torchrun --nproc_per_node 2 train_ddp.py (or srun --ntasks 2)",
                None),
    HorovodStep("hvd.init()", "read RANK / LOCAL_RANK / WORLD_SIZE (or SLURM_*), then init_process_group",
                calls("init_process_group")),
    HorovodStep("hvd.rank(), hvd.local_rank(), hvd.size()", "rank, local_rank, world_size from the launcher",
                assigns_rank),
    HorovodStep("torch.cuda.set_device(hvd.local_rank())", "the device of the local rank", calls("set_device")),
    HorovodStep("DistributedSampler(num_replicas=hvd.size(), rank=hvd.rank())", "the same, with world_size and rank",
                calls_imported("DistributedSampler")),
    HorovodStep("train_sampler.set_epoch(epoch)", "the same", calls("set_epoch")),
    HorovodStep("hvd.broadcast_parameters(model.state_dict(), root_rank=0)",
                "done by the DDP constructor: rank 0's weights are copied to every rank",
                calls_imported("DistributedDataParallel")),
    HorovodStep("hvd.DistributedOptimizer(optimizer)", "done by DDP: backward averages the gradients (in buckets, "
                "overlapping the backward pass); the optimizer stays plain", calls_imported("DistributedDataParallel")),
    HorovodStep("hvd.broadcast_optimizer_state(optimizer, root_rank=0)",
                "nothing at a fresh start: every rank builds its optimizer from the same weights (when resuming, load "
                "the checkpoint's optimizer state on every rank)", builds_optimizer),
    HorovodStep("lr = base_lr * hvd.size()", "--lr is the global batch's rate; the global batch is "
                "batch × world size (scale the rate yourself if you grow it)", scales_by_world_size),
    HorovodStep("hvd.allreduce(metric) (an average)", "dist.all_reduce of the sums (loss, correct, total), then divide",
                calls("all_reduce")),
    HorovodStep("if hvd.rank() == 0: print(...)", "the same, with rank", tests_rank_zero),
    HorovodStep("if hvd.rank() == 0: save checkpoint", "the same; save model.module (without DDP's wrapper)",
                saves_unwrapped_model),
    HorovodStep("hvd.shutdown()", "dist.destroy_process_group()", calls("destroy_process_group")),
)


@dataclass(frozen=True)
class HorovodRow:
    horovod: str
    ddp: str
    line: int | None  # 1-based line number in the script; None: the script does not do this step
    code: str  # that line, stripped ("" when not found)


@dataclass(frozen=True)
class HorovodTable:
    script: str
    rows: tuple[HorovodRow, ...]
    problem: str = ""  # why no line could be read (the script does not parse), else ""

    def __str__(self) -> str:
        width = max(len(r.horovod) for r in self.rows)
        lines = [f"Horovod -> DDP, lines of {self.script}"] + ([f"  {self.problem}"] if self.problem else [])
        lines += [f"  {r.horovod:<{width}}  line {r.line:>3}: {r.code}   ({r.ddp})" if r.line is not None
                  else f"  {r.horovod:<{width}}  not in this script   ({r.ddp})" for r in self.rows]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><td style='text-align:left'><code>{html.escape(r.horovod)}</code></td>"
                        f"<td style='text-align:left'>{html.escape(r.ddp)}</td><td>{r.line or '—'}</td>"
                        f"<td style='text-align:left'><code>{html.escape(r.code or 'not in this script')}</code></td>"
                        "</tr>" for r in self.rows)
        note = f"<p>{html.escape(self.problem)}</p>" if self.problem else ""
        return (f"{note}<table><thead><tr><th>Horovod</th><th>DDP</th><th>line</th>"
                f"<th>in {html.escape(self.script)}</th></tr></thead><tbody>{cells}</tbody></table>")


def horovod_table(script: str | os.PathLike = DDP_SCRIPT) -> HorovodTable:
    """Each Horovod step with the line of `script` that does it in DDP (the first such line; launch
    commands are found in comments and docstrings too). A step the script does not do has no line."""
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"script={str(script)!r}: no such file; give the path of your DDP script, "
                                "e.g. 'lab06_data_parallel/train_ddp.py'")
    source = path.read_text()
    try:
        tree = ScriptTree(source)
    except SyntaxError as error:
        rows = tuple(HorovodRow(step.horovod, step.ddp, None, "") for step in HOROVOD_TO_DDP)
        return HorovodTable(str(script), rows, f"{path.name} does not parse (line {error.lineno}: {error.msg}): "
                                               "fix it, then run this cell again")
    rows = []
    for step in HOROVOD_TO_DDP:
        line = tree.first_text(LAUNCHERS) if step.finds is None else tree.first(step.finds)
        rows.append(HorovodRow(step.horovod, step.ddp, line, tree.lines[line - 1].strip() if line else ""))
    return HorovodTable(str(script), tuple(rows))
