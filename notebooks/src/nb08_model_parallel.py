"""Lab 08: model parallelism — naive split, pipelines, tensor parallel, ZeRO/FSDP2, activation checkpointing."""

# %% [markdown]
# # Lab 08 — Model parallelism
#
# **Learning goals.** After this lab you can
#
# 1. compute, for a model you can name, the memory its training state needs per GPU under data
#    parallelism, ZeRO-1/2/3, tensor and pipeline parallelism — and say which of them make it fit;
# 2. explain why a model split layer by layer leaves devices idle, and how micro-batches (GPipe, 1F1B)
#    shrink the idle share, the **bubble** (p−1)/(m+p−1);
# 3. describe how tensor parallelism splits an MLP by columns and then by rows, and what it communicates;
# 4. measure the memory per rank of ZeRO-1/2/3 (`ZeroRedundancyOptimizer`, FSDP2 `fully_shard`) and
#    compare it with the formula;
# 5. trade activation memory for recomputation time with activation checkpointing;
# 6. show, on numbers, that every strategy trains the **same model** as one process does.
#
# Every run below is a run of the course's training engine (`python -m coursekit.train --parallel ...`) in a
# job: the strategies are options of the engine, one short file each in `coursekit/train/parallel/`. The
# runs start right below and run while you read sections 1 to 3; section 4 collects them.

# %%
# %matplotlib inline
import coursekit
from coursekit import labs
from coursekit.course import course_dir
from coursekit.labs import lab08_model_parallel as mp
from coursekit.labs.kit import failures, plots

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("08")
s

# %% tags=["nbval-ignore-output"]
site = coursekit.load_site()
print(f"site {site.name!r} ({site.scheduler}): {site.description}")

# %% tags=["exact-settings"]
profile.explain(
    gpu="The lab's runs take about five minutes on two GPUs, one job after the other. They start now, in the "
        "next cell, and section 4 collects them: read sections 1 to 3 meanwhile.",
    cpu="A run here lasts about a second, less than starting Python and torch in each of its processes, so "
        "`one_job=True` puts the runs of one shape (1 or 2 processes) into one job, one after the other. They "
        "start now, in the next cell, and section 4 collects them.")

# %% [markdown]
# Every strategy of section 4 (with serial training, the reference, and serial training with activation
# checkpointing, section 5), then the pipeline sweep of section 2: GPipe for every m of
# `s.bubble["microbatches"]`, 1F1B where m ≥ p. `mp.start_jobs` submits them and returns at once.

# %% tags=["exact-counts"]
weights = course_dir() / "lab08-weights"
bubble_base = s.base.replace(stage_delay_ms=s.bubble["stage_delay_ms"], steps=s.bubble["steps"],
                             batch_size=s.bubble["batch_size"])
runs = [*mp.strategy_runs(s.base, ["serial", *s.strategies, "checkpointed"], s.n_processes, weights_dir=weights,
                          options=s.strategy_options, naive_gpus=1 if profile.is_cpu else s.n_processes),
        *mp.bubble_runs(bubble_base, s.bubble["microbatches"], stages=s.bubble["stages"])]
pending = mp.start_jobs(runs, name=labs.job_name(pseudo, "mp"), one_job=profile.is_cpu, timeout_s=s.timeout_s,
                        **s.job)
print(f"{len(runs)} runs submitted; section 4 collects them")

# %% [markdown]
# ## 1. Why: a model whose training state does not fit one GPU
#
# Training keeps, for every parameter, its weight, its gradient and the optimizer's state. With mixed
# precision and Adam (the Ultra-Scale Playbook's convention): 2 bytes of bf16 weights, 2 of bf16
# gradients and k = 12 bytes of optimizer state (an fp32 master copy of the weight, Adam's m and v) —
# 16 bytes per parameter. A 7-billion-parameter model therefore needs 112 GB before a single
# activation is stored: more than an 80 GB H100. (This section counts as GPU makers do, 1 GB = 10⁹ bytes;
# the measured tables below are in MiB, 2²⁰ bytes.) Data parallelism copies all of it on every GPU; the
# ZeRO stages shard it over the N GPUs of the data-parallel group:
#
# | | per GPU |
# |---|---|
# | DP | 2Ψ + 2Ψ + kΨ |
# | ZeRO-1 (optimizer state sharded) | 2Ψ + 2Ψ + kΨ/N |
# | ZeRO-2 (+ gradients) | 2Ψ + (2 + k)Ψ/N |
# | ZeRO-3 / FSDP (+ weights) | (4 + k)Ψ/N |
#
# `coursekit.train.memory.sharded_memory` computes them (and the fp32 equivalents: 4 + 4 + 8 bytes for
# Adam, k = 4 for SGD with momentum).

# %% tags=["exact-arithmetic"]
seven = mp.seven_billion(7_000_000_000, n=8, optimizer="adamw", precision="bf16", gpu_gb=80)
seven

# %%
plots.stacked_bars([f"{r['strategy']} x{r['n_gpu']}" for r in seven],
                   {"weights": seven.column("weights_gb"), "gradients": seven.column("gradients_gb"),
                    "optimizer state": seven.column("optimizer_gb")},
                   ylabel="GB per GPU", limit=80, limit_label="one 80 GB GPU",
                   title="7B parameters, AdamW, bf16: training state per GPU (formula)")

# %% [markdown] tags=["exercise"]
# **Your turn.** A 70-billion-parameter model, trained with AdamW in bf16 on 80 GB GPUs: keep a fifth of
# each GPU for activations and the CUDA context. How many GPUs does ZeRO-3 need at least (a power of
# two)? And plain data parallelism? Use `smallest_n_that_fits(num_parameters, strategy, gpu_bytes, optimizer=...,
# precision=..., headroom=...)`: `strategy` as the table above names it ("DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"), the
# GPU's memory in bytes (`80e9`), `headroom` the share of each GPU kept free (a fifth: `0.2`). It answers the
# fewest GPUs, a power of two, or None when no number of GPUs is enough. Put your answers in `zero3_gpus` and
# `ddp_gpus`.

# %% tags=["exercise", "exact-arithmetic"]
from coursekit.train.memory import smallest_n_that_fits

### BEGIN SOLUTION
zero3_gpus = smallest_n_that_fits(70_000_000_000, "ZeRO-3", gpu_bytes=80e9, optimizer="adamw", precision="bf16",
                                  headroom=0.2)
ddp_gpus = smallest_n_that_fits(70_000_000_000, "DP", gpu_bytes=80e9, optimizer="adamw", precision="bf16",
                                headroom=0.2)
### END SOLUTION
print(f"ZeRO-3: {zero3_gpus} GPUs; DDP: {ddp_gpus} (a full copy of 1.1 TB never fits one GPU)")

# %% [markdown]
# ## 2. Naive split, then pipelines
#
# The simplest way to hold a model too large for one device is to put its first layers on device 0 and
# the rest on device 1 (`--parallel naive`): the activations travel from one to the next. It works —
# but while device 1 computes, device 0 waits, and the other way round in the backward pass: with p
# devices each is busy 1/p of the time.
#
# A **pipeline** cuts the batch into m micro-batches: while stage 1 works on micro-batch 1, stage 0
# already works on micro-batch 2. What is left idle, the **bubble**, is the filling and draining of the
# pipe: a fraction (p−1)/(m+p−1) of each step, for GPipe (all forwards, then all backwards) and 1F1B
# (one forward, one backward, as soon as possible) alike. They differ in memory: GPipe keeps the
# activations of all m micro-batches until their backward, 1F1B at most p.
#
# The engine measures the bubble on every stage: 1 − (time the stage computed) / (wall time of the
# schedule). The sweep over m runs in section 4, with the lab's other runs.

# %% tags=["exact-settings"]
profile.explain(
    cpu="**On a CPU the stage compute is emulated**: two cores shared by two processes would distort any timing, "
        "so with `--stage-delay-ms X` every stage's forward *sleeps* X ms and its backward 2X ms per batch, X/m and "
        "2X/m per micro-batch (a realistic ratio; the bubble (p−1)/(m+p−1) of GPipe and 1F1B does not depend on it: "
        "each stage idles (p−1) forward-plus-backward times of the (m+p−1) its step lasts) — the schedule, the "
        "send/receive of activations and the measurement are real.",
    gpu="On GPUs the stages compute for real: the bubble is measured on the stages' own work.")

# %% [markdown]
# The bubble is idle time; what you pay for is tokens/s. If a micro-batch cost exactly 1/m of the batch,
# tokens/s would grow as 1 − bubble: ×1.33 from m = 1 to 2 and ×1.6 to 4 for two stages. It grows less, or
# not at all: each micro-batch pays fixed costs (a send and a receive, kernel launches, a smaller matrix
# product that uses the GPU less well), and at large m these can eat the whole gain (the recording of
# section 6: GPipe at m = 8 is slower than at m = 1; there, at two sequences per micro-batch, the bubble
# itself stops falling: 0.25 at m = 4, 0.29 at m = 8, against 0.20 and 0.11 in theory). Section 7 checks
# one thing: that GPipe's tokens/s from m = 1 to the largest m stay below what the bubble alone predicts, by
# more than the run-to-run noise. It does not check that they grow: read the sweep's `tokens_per_s` column
# for that.
#
# What 1F1B saves is memory: the activations a stage keeps waiting for their backward. Counted with
# saved-tensor hooks (what autograd stores for backward) for one micro-batch of this model:

# %% tags=["exact-arithmetic"]
labs.ResultsTable([mp.in_flight_activations(s.base, s.bubble["stages"], m) for m in s.bubble["microbatches"]],
                  title="activations held by one stage at its peak (MiB)")

# %% [markdown]
# ## 3. Tensor parallelism
#
# Tensor parallelism (Megatron-LM) splits every weight matrix instead of the list of layers. In an MLP
# `y = fc2(gelu(fc1(x)))`, `fc1` is split by **columns** (each rank computes some of the hidden units
# from the whole input — no communication), `fc2` by **rows** (each rank multiplies its hidden units
# by its rows of `fc2`, giving a partial sum of the output): one **all-reduce** adds the partial sums.
# Attention is split the same way, whole heads per rank. `--parallel tensor` applies this plan with
# `torch.distributed.tensor.parallel.parallelize_module` (`ColwiseParallel`, `RowwiseParallel`).
# The price: an all-reduce of the activations after each attention and each MLP, forward and
# backward — on the critical path, which is why tensor parallelism stays inside a node. At a course's sizes
# it does not pay even there: in the recording of section 6 (two H100s, width 2048, 8 blocks) tensor
# parallelism trains about three times *slower* than DDP on the same two GPUs, and the all-reduces are only a
# few ms of its step. The rest is the eager overhead of DTensor (every
# operation dispatched on sharded tensors) and an optimizer that cannot use its fused multi-tensor path
# on a mix of DTensors and plain tensors; tensor parallelism pays for matrices many times wider, where
# each GPU's share of a matrix product still fills it:

# %% tags=["exact-arithmetic"]
comm = mp.tp_allreduce_bytes(s.base)
print(f"{comm['allreduces_per_step']} all-reduces per step of {comm['bytes_per_allreduce'] / 2**20:.2f} MiB each: "
      f"{comm['bytes_per_step'] / 2**20:.1f} MiB per step ({s.base.gpt_layers} blocks, batch {s.base.batch_size} "
      f"x {s.base.seq_len} tokens x width {s.base.gpt_dim})")

# %% [markdown]
# ## 4. Every strategy against serial training; the bubble; ZeRO's memory per rank
#
# One run per strategy (submitted at the top of the lab), each saving its final (gathered) weights with
# `--save-weights`; serial training on one process is the reference, and serial training with activation
# checkpointing (section 5) runs beside it. The engine reports, per rank, the bytes of parameters, gradients
# and optimizer state that rank holds (a sharded tensor counts its local shard only): what ZeRO promises.
# After them, the pipeline sweep of section 2.
#
# The runs train with **SGD and momentum**, not AdamW, and this is what lets section 7 check that every
# strategy trains the same model. Adam divides each gradient by its own running size: a strategy that forgot
# to divide a sum over its N ranks (or its m micro-batches) by N (or m) hands Adam a gradient N times too large,
# and Adam moves the weights exactly as far as with the right one — the comparison with serial training
# could not see the bug. SGD moves them N times as far.

# %% tags=["nbval-ignore-output"]
results = pending.results()
failures.report_failures(results, "the lab's runs")
table = mp.strategy_table(results.where(experiment="strategy"))
table.with_columns("strategy", "processes", "gpus", "state", "max_abs_dw", "train_loss", "state_mib_per_rank",
                   "formula_mib_per_rank", "memory_vs_formula", "tokens_per_s")

# %% [markdown]
# The bubble, measured (section 2): every stage's idle share of a step, beside (p−1)/(m+p−1).

# %% tags=["nbval-ignore-output"]
bubbles = mp.bubble_table(results.where(experiment="bubble"), stages=s.bubble["stages"])
bubbles

# %% tags=["nbval-ignore-output"]
figure, ax = plots.new_figure()
for schedule in mp.PIPELINES:
    rows = bubbles.where(schedule=schedule)
    plots.scatter_line(rows, "microbatches", "bubble_measured", ax=ax, logx=True, label=f"{schedule} measured")
plots.scatter_line(bubbles.where(schedule="gpipe"), "microbatches", "bubble_theory", ax=ax, logx=True,
                   label="(p-1)/(m+p-1)")
ax.set_ylabel("bubble (idle share of a step)")
ax.set_title(f"{s.bubble['stages']} stages, measured here")
figure

# %% [markdown]
# ZeRO's memory per rank on N processes (`s.zero_n`, here the section's N = 2): the sharded parts are
# divided by N (halved here, and they shrink as 1/N with more processes), the replicated ones stay.
#
# The formula here is not the table's of section 1. That table uses the bf16 convention (2-byte weights
# and gradients beside fp32 master weights and Adam moments: k = 12); these jobs train under
# `torch.autocast`, which keeps the weights, gradients and optimizer state in fp32 (4 + 4 + 4 bytes per
# parameter with SGD and momentum), so the measurement is compared with that fp32 formula.
#
# One subtlety: FSDP2's ZeRO-2 (`fully_shard(reshard_after_forward=False)`) is not DeepSpeed's. It keeps
# the gathered weights from a block's forward until its backward — during that window it holds what the
# ZeRO-2 formula says — and frees them after the backward. Between steps, where the engine measures, it
# holds ZeRO-3's shares, so its row is compared with the ZeRO-3 formula. It saves the second all-gather
# of the weights in the backward, not memory at rest.

# %% tags=["nbval-ignore-output"]
zero = [table.where(lambda r: r["strategy"] == "ddp" or r["strategy"].startswith("zero"))]
for n in [n for n in s.zero_n if n != s.n_processes]:
    zero.append(mp.run_strategies(s.base, ["zero1", "zero2", "zero3"], n, name=labs.job_name(pseudo, f"zero{n}"),
                                  weights_dir=weights / f"n{n}", one_job=profile.is_cpu, timeout_s=s.timeout_s,
                                  **s.job))
    failures.report_failures(zero[-1], f"ZeRO on {n} processes")
zero = labs.ResultsTable([r for t in zero for r in t], title="ZeRO: training state per rank, measured vs formula")
zero.with_columns("strategy", "n_gpu", "state_mib_per_rank", "formula_mib_per_rank", "memory_vs_formula")

# %% tags=["nbval-ignore-output"]
labels = [f"{r['strategy']} N={r['n_gpu']}" for r in zero]
figure, ax = plots.new_figure()
plots.bars(labels, [v or 0 for v in zero.column("state_mib_per_rank")], ax=ax, ylabel="training state per rank (MiB)",
           annotate="{:.2f}", title="DDP and ZeRO: measured on the largest rank (bars), formula (lines)")
ax.hlines(zero.column("formula_mib_per_rank"), [i - 0.4 for i in range(len(zero))], [i + 0.4 for i in range(len(zero))],
          colors="black", linewidth=2, label="formula")
ax.legend(loc="upper right")
figure

# %% [markdown] tags=["exercise"]
# ### Your turn: shard a model with FSDP2
#
# The engine's `zero3` is a few lines of `coursekit/train/parallel/fsdp.py`: `fully_shard` on each block, then
# on the whole model. Write them yourself in `lab08_model_parallel/train_fsdp.py`, a plain PyTorch script: a small
# model of 4 blocks, AdamW, a few steps. Complete its `TODO`s:
#
# 1. `fully_shard(block)` for each block: every block becomes an FSDP unit, its weights split over the ranks;
# 2. `fully_shard(model)`: the layers outside the blocks (input layer, head) join the whole model's unit;
# 3. the optimizer, built **after** sharding: `fully_shard` replaces the model's parameters by sharded ones;
# 4. the full weights, gathered on every rank with `get_model_state_dict(..., full_state_dict=True)` and
#    saved by rank 0 alone.
#
# Why each block first? `fully_shard(model)` alone also splits every weight in half, but before the model's
# forward it gathers all of them at once: for that moment each rank holds the whole model, as without
# sharding. With one unit per block, a rank gathers one block, computes it and frees it again.
#
# `labs.check_fsdp_script` runs your script on 2 processes and the same training on one, then tells you
# in plain words: are the weights those of one process, which modules became FSDP units, and does each rank
# hold the training state of the ZeRO-3 formula for fp32 AdamW, which the script uses: (4 + 4 + 8)Ψ/N?

# %% tags=["nbval-ignore-output"]
fsdp_report = labs.check_fsdp_script("lab08_model_parallel/train_fsdp.py")
fsdp_report

# %%
print("every check passed" if fsdp_report.ok else "some checks failed (read the report above)")

# %% [markdown] tags=["exercise"]
# ### Your turn: a two-stage pipeline by hand
#
# The engine's `gpipe` sends activations from stage to stage with `torch.distributed`. Do it yourself in
# `lab08_model_parallel/train_pipeline.py`: the same small model of 4 blocks, cut in two. Rank 0 holds the input
# layer and blocks 0 and 1, rank 1 blocks 2 and 3 and the head; each batch is cut into 4 micro-batches, all
# forwards first, then all backwards (GPipe). Complete its `TODO`s:
#
# 1. `keep_stage`: remove the other stage's layers, so that each rank holds its own stage only;
# 2. rank 0 sends the activations of each micro-batch to rank 1 (`dist.send`);
# 3. rank 0 receives their gradient from rank 1 (`dist.recv`) and goes on with the backward pass through its
#    stage;
# 4. rank 1's loss of each micro-batch, divided by the number of micro-batches: training on one process takes
#    the mean over the whole batch;
# 5. rank 1 sends the gradient of the activations it received back to rank 0.
#
# `labs.check_pipeline_script` runs your script on 2 processes and the same training on one, then tells you
# in plain words: are the weights of both stages those of one process (to a thousandth of how far training
# moved them), and does each rank hold its own stage only: weights, gradients and momentum, (4 + 4 + 4) bytes
# for each parameter of its stage?

# %% tags=["nbval-ignore-output"]
pipeline_report = labs.check_pipeline_script("lab08_model_parallel/train_pipeline.py")
pipeline_report

# %%
print("every check passed" if pipeline_report.ok else "some checks failed (read the report above)")

# %% [markdown]
# ## 5. Activation checkpointing
#
# Checkpointing a block keeps only its input for the backward pass and recomputes the rest when the
# gradient arrives: less memory, one more forward of the block. How much less is counted with
# saved-tensor hooks (the bytes autograd stores), on the CPU in fp32 without autocast: the runs train under
# bf16 autocast, and mixed precision changes what is stored and its size, so the ratio on a GPU differs. The
# GPU's own peak memory (`peak_mem_mib` in the table of section 6) falls by less, because checkpointing cannot
# remove the training state, the logits and the loss. The price in time was measured by the engine in
# section 4: the run `checkpointed` (`--activation-checkpointing`) beside the serial one. It recomputes the
# same numbers, so it ends with serial training's weights too.

# %% [markdown] tags=["exercise"]
# ### Predict, then measure
#
# Before you count: with every block checkpointed, autograd keeps only each block's input for the backward.
# By how many times will that cut the activation memory of one forward? Replace the two placeholder lines
# below with your guess, a number, in `my_guess` (or `my_guess = None`, which shows a box to type it in).

# %% tags=["exercise"]
### BEGIN SOLUTION
my_guess = 3
### END SOLUTION
labs.predict("checkpointing_cut", "By how many times will activation checkpointing cut the activation memory?",
             unit="×", value=my_guess)

# %% tags=["nbval-ignore-output"]
checkpointing = mp.checkpointing_table(s.base, [table.one(strategy="serial"), table.one(strategy="checkpointed")])
checkpointing

# %%
labs.reveal("checkpointing_cut", checkpointing[0]["activations_mib"] / checkpointing[1]["activations_mib"])

# %%
speeds = checkpointing.column("tokens_per_s")
profile.explain(
    gpu=f"**The price in time.** Recomputing every block's forward adds about 29 % to this model's FLOPs per step, "
        f"which alone would cost about a fifth of the tokens/s (-22 %); here tokens/s went {speeds[0] or 0:,.0f} "
        f"-> {speeds[1] or 0:,.0f}" + (mp.checkpointing_cost(speeds) or "."))

# %% [markdown]
# ## 6. The table
#
# Strategy × memory per rank × speed × equal to serial, measured here; below it, the table the course's
# benchmark recorded on H100 GPUs, with a model too large for one GPU (`big-ddp` runs out of memory,
# `big-zero3` fits).

# %%
profile.explain(
    cpu="Here these are gloo processes sharing two cores (the one-process runs' job beside the others'): read "
        "the memory and the equality columns, not the speed.",
    gpu=f"**Why is GPipe slower than serial training on one GPU?** (The table below, batch {s.base.batch_size} for "
        "every strategy: GPipe at m = 4 beside serial training.) This model fits one GPU, and there a pipeline "
        "cannot win much. With m = 1 the two stages take turns: the step lasts as long as on one GPU, each GPU "
        "idle half of it, plus the time to send the activations from one GPU to the other and their gradient "
        "back. Micro-batches let the stages overlap — the bubble alone would allow ×1.6 at m = 4 — but each "
        "micro-batch is a smaller matrix product that fills the GPU less, and adds a send, a receive and more "
        "kernel launches. Section 7 measures how much of the promised gain they eat on the bubble sweep of "
        f"section 4, which runs at batch {s.bubble['batch_size']}, not this table's {s.base.batch_size}: its "
        "tokens/s are not comparable with this table's. "
        "The lab did not time these pieces one by one; a profiler trace of one step (lab 05) would show them. "
        "A pipeline is for a model that does not fit one GPU, or for many stages over many nodes, where it "
        "communicates less than the alternatives; here it only shows its price.")

# %% tags=["nbval-ignore-output"]
summary = table.with_columns("strategy", "processes", "gpus", "state_mib_per_rank", "peak_mem_mib", "tokens_per_s",
                             "max_abs_dw", title=f"strategies, measured here, batch {s.base.batch_size}"
                             + (" (peak_mem_mib: the largest rank's; naive: its first GPU's only, cuda:0)"
                                if profile.is_gpu else ""))
summary

# %% tags=["nbval-ignore-output"]
figure, axes = plots.new_figure(ncols=2)
names = table.column("strategy")
plots.bars(names, [v or 0 for v in table.column("state_mib_per_rank")], ax=axes[0], ylabel="training state per rank (MiB)",
           annotate="{:.2f}", title="memory per rank" + (" (naive: one process, both GPUs)" if profile.is_gpu else ""))
plots.bars(names, [v or 0 for v in table.column("tokens_per_s")], ax=axes[1], ylabel="tokens/s",
           title=f"throughput, batch {s.base.batch_size}")
figure

# %% tags=["nbval-ignore-output"]
recording = labs.load_recording("model_parallel_gpu")
recorded = mp.recorded_table(recording) if recording else None
if recorded is not None:
    display(recorded)

# %% [markdown]
# ## 7. The claims, checked on what was just measured

# %%
compared = table.where(lambda r: r["strategy"] != "serial")
dws = {r["strategy"]: r["max_abs_dw"] for r in compared}
moved = mp.weights_moved(table.one(strategy="serial")["config"], largest=True)  # a strategy that never updated is this far off
equal, equal_detail = mp.equal_to_serial(dws, moved, s.tolerance_rel)
gain, gain_detail = mp.pipeline_gain(bubbles)
ratios = {f"{r['strategy']} N={r['n_gpu']}": r["memory_vs_formula"] for r in zero if r["strategy"] != "ddp"}
excess, excess_detail = mp.bubble_excess(bubbles, s.bubble_excess_rel)
no_ckpt, with_ckpt = checkpointing[0], checkpointing[1]
verdicts = [
    labs.check_claim(
        f"every strategy ends with the weights of serial training (SGD: max |dw| <= {s.tolerance_rel:g} × the largest "
        "move serial training made; a strategy that never updated, or a gradient twice too large, is off by 1×)",
        equal, equal_detail),
    labs.check_claim(
        f"ZeRO's training state per rank matches the formula within {100 * s.memory_tolerance:.0f} %",
        all(v is not None and abs(v - 1) <= s.memory_tolerance for v in ratios.values()),
        ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} missing" for k, v in ratios.items())),
    labs.check_claim(
        f"the pipeline bubble falls as micro-batches are added (GPipe and 1F1B; m = "
        f"{', '.join(map(str, s.bubble['microbatches']))} at batch {s.bubble['batch_size']})",
        all(mp.decreasing(bubbles.where(schedule=sc).column("bubble_measured")) for sc in mp.PIPELINES),
        "; ".join(f"{sc}: " + ", ".join(f"{v:.3f}" for v in bubbles.where(schedule=sc).column("bubble_measured"))
                  for sc in mp.PIPELINES)),
    labs.check_claim(
        f"the measured bubble exceeds (p-1)/(m+p-1) by at most {s.bubble_excess_rel:.0%} of it at these m (fixed "
        "costs per micro-batch; a bubble twice the theory fails)", excess, excess_detail),
    labs.check_claim(
        f"GPipe's tokens/s from m = 1 to m = {max(s.bubble['microbatches'])} (batch {s.bubble['batch_size']}) stay "
        f"below what the bubble alone predicts, by more than {mp.GAIN_MARGIN_SPREADS} times the run-to-run spread: "
        "each micro-batch pays fixed costs (whether tokens/s rise at all is not claimed)", gain, gain_detail),
    labs.check_claim(
        "activation checkpointing cuts the activation memory (at least by half)",
        with_ckpt["activations_mib"] <= 0.5 * no_ckpt["activations_mib"],
        f"{no_ckpt['activations_mib']:.2f} MiB -> {with_ckpt['activations_mib']:.2f} MiB; tokens/s "
        f"{no_ckpt['tokens_per_s']:,.0f} -> {with_ckpt['tokens_per_s']:,.0f}"),
]

# %% [markdown]
# ## 8. Exit ticket
#
# Four questions on what *you* measured above: the answers are in your own tables and reports, not in a
# book. Two more carry the lab's ideas to cases it did not run: compute them (`mp.bubble_theory`,
# `smallest_n_that_fits` and `mp.seven_billion` help). The ticket is checked at once, and your score is saved
# for the instructor.

# %%
gpipe_m1 = bubbles.where(schedule="gpipe", microbatches=1)
zero3 = table.where(strategy="zero3")
rank0 = pipeline_report.state_bytes.get(0)
ticket = labs.exit_ticket("08", {
    "bubble_m1": labs.Question("With one micro-batch (m = 1), what share of each step did GPipe's stages sit idle "
                               "(the measured bubble, between 0 and 1)?",
                               gpipe_m1[0]["bubble_measured"] if len(gpipe_m1) else None, abs_tol=0.05),
    "checkpointing_cut": labs.Question("By how many times did activation checkpointing cut the activation memory?",
                                       no_ckpt["activations_mib"] / with_ckpt["activations_mib"], unit="×",
                                       rel_tol=0.1),
    "zero3_state": labs.Question("How many MiB of training state (weights, gradients, optimizer state) did a rank "
                                 "of ZeRO-3 hold in section 4?",
                                 zero3[0]["state_mib_per_rank"] if len(zero3) else None, unit="MiB", rel_tol=0.05),
    "pipeline_rank0": labs.Question("In the check of your pipeline script, how many bytes of weights, gradients "
                                    "and momentum did rank 0 hold?",
                                    sum(rank0[k] for k in mp.STATE_KEYS) if rank0 else None, unit="bytes",
                                    rel_tol=0.01),
    "bubble_p4_m12": labs.Question("A pipeline of p = 4 stages cuts each batch into m = 12 micro-batches (GPipe or "
                                   "1F1B). What share of each step does a stage sit idle, by the formula?",
                                   mp.bubble_theory(4, 12), abs_tol=0.005, computed=True),
    "zero_stage_13b": labs.Question("13 billion parameters, AdamW in bf16 (16 bytes per parameter), on 8 GPUs of 80 GB, "
                                    "a fifth of each GPU kept free for activations: which is the lowest ZeRO stage "
                                    "(1, 2 or 3) whose training state fits? (0: plain data parallelism already fits)",
                                    mp.lowest_fitting_stage(13_000_000_000, 8, gpu_bytes=80e9, headroom=0.2), computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"bubble_m1": ..., "checkpointing_cut": ..., ...}` in place of the two
# placeholder lines: numbers you read above. A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"bubble_m1": gpipe_m1[0]["bubble_measured"] if len(gpipe_m1) else None,
           "checkpointing_cut": no_ckpt["activations_mib"] / with_ckpt["activations_mib"],
           "zero3_state": zero3[0]["state_mib_per_rank"] if len(zero3) else None,
           "pipeline_rank0": sum(rank0[k] for k in mp.STATE_KEYS) if rank0 else None,
           "bubble_p4_m12": (4 - 1) / (12 + 4 - 1),  # 3 / 15 = 0.2
           # per GPU, 64 GB usable: DP 16 x 13 = 208 GB; ZeRO-1 (2 + 2 + 12/8) x 13 = 71.5 GB; ZeRO-2 (2 + 14/8) x 13
           # = 48.75 GB: the lowest that fits is ZeRO-2
           "zero_stage_13b": 2}
### END SOLUTION
graded = ticket.grade(answers)
