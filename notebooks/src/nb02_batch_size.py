"""Lab 02: batch size — throughput, memory up to the OOM, accuracy within an epoch budget."""

# %% [markdown]
# # Lab 02 — Batch size
#
# **Learning goals.** After this lab you can
#
# 1. explain why images per second grow with the batch size, ever more slowly as the processor fills up
#    (bending toward saturation, where they stop growing);
# 2. find the largest batch that fits in a GPU's memory by running up to the out-of-memory error, and
#    recognise that error from a job's state and log;
# 3. tell throughput from progress: at a fixed number of epochs a larger batch makes fewer optimiser
#    steps, so it may finish sooner yet reach a lower accuracy — what counts is the *time to accuracy*.
#
# Every run of a sweep goes into a results table, and every plot below is drawn from one.

# %%
# %matplotlib inline
from coursekit import labs
from coursekit.labs import lab02_batch_size as bs
from coursekit.labs.kit import failures, plots, recorded

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("02")
print(s)

# %% [markdown]
# ## 1. The sweep
#
# The same model, data, learning rate and number of epochs; only the batch size changes. On a cluster each
# run is a job with a GPU of its own, and the runs go side by side. Where they would share one processor
# (a laptop, or one GPU in a single machine) they go **one after the other**, in a single job
# (`one_job=True`, `python -m coursekit.train.sweep`): runs sharing a processor would slow each other down,
# and the throughput we measure would be that of the crowd; one job also starts Python and torch once
# instead of once per run. The cell below submits the sweep and returns at once: read on while it runs.

# %% tags=["nbval-ignore-output"]
configs = [s.base.replace(batch_size=b) for b in s.batch_sizes]
for config in configs:
    print(labs.engine_command(config))
memory_configs = ([s.memory_base.replace(batch_size=b) for b in s.memory_batch_sizes]
                  if s.memory_base is not None else [])  # on a GPU: section 3's memory sweep, submitted now too
groups = [configs, memory_configs] if memory_configs else [configs]
sweep, *more = bs.submit_sweeps(groups, names=[labs.job_name(pseudo, "bs"), labs.job_name(pseudo, "mem")][:len(groups)],
                                one_job=profile.is_cpu or labs.jobs_share_gpus(), **s.job, timeout_s=s.timeout_s)
memory_sweep = more[0] if more else None
print("submitted: job(s)", ", ".join(sorted({str(job.job_id) for one in (sweep, *more) for job in one.jobs})))
profile.explain(
    gpu="The memory sweep of section 3 went with it, so that it runs while you read too. Runs that are timed "
        "must never share a GPU side by side: each would slow the other down, and take memory from it. Where "
        "the jobs would share this machine's GPU, every run is in **one job**: the batch sweep first, then "
        "the memory sweep, one run after the other. On a cluster every run is a job with a GPU of its own, and "
        "the runs go side by side.")

# %% [markdown] tags=["exercise"]
# ### Predict, then run
#
# The largest batch holds many times more images than the smallest (the sizes are printed above). While
# the sweep runs: how many times more **images per second** will the largest process than the smallest? Replace the two placeholder lines below with your
# guess, a number, in `my_guess` (or `my_guess = None`, which shows a box to type it in). Section 2 sets
# it beside the measurement.

# %% tags=["exercise"]
### BEGIN SOLUTION
my_guess = 20
### END SOLUTION
labs.predict("speedup", f"How many times more images per second will batch {max(s.batch_sizes)} process than "
             f"batch {min(s.batch_sizes)}?", unit="×", value=my_guess)

# %% [markdown]
# The next cell waits for the sweep (a bar counts the runs that have ended, and estimates the time left)
# and reads every run into one results table.

# %% tags=["nbval-ignore-output"]
table = sweep.results(timeout_s=s.timeout_s, title="batch-size sweep")
bs.add_time_to_accuracy(table, s.target_acc)
table.with_columns("batch_size", "job_id", "state", "images_per_s_median", *labs.energy_columns(table), "train_time_s",
                   "val_acc", "time_to_target_s")

# %% [markdown]
# `images_per_s_median` is the median rate of the timed steps (section 2 says how); `train_time_s` is the
# training clock (it stops for evaluations), which also counts time that median does not see: the run's first
# steps (warm-up: first allocations and, on a GPU, cuDNN's autotuner trying its kernels for the batch's
# shape), the extra time of steps slower than the median one (for example an epoch's shorter last batch, a
# new shape the autotuner tries once more), and the engine's bookkeeping after each timed step (reading the
# loss, writing the step's record). So a run's images divided by its training time give fewer images per
# second than the median, by a margin that differs from one batch size to the next.
#
# Speed is one cost, energy another. On a GPU the table shows the joules each image cost during the
# timed steps, and what one epoch of the training set costs at that rate. Does the fastest batch also
# use the least energy per image?

# %%
print(labs.energy_note(table) or "energy per image and per epoch: in the table above")
print("states:", table.column("state"))
failed = failures.report_failures(table, "the batch-size sweep")
table = failures.completed(table)

# %% [markdown]
# ## 2. Throughput bends toward saturation
#
# A step has a fixed cost (launching operations, Python, the optimiser update) and a cost per image.
# Small batches pay the fixed cost for few images; as the batch grows the fixed part is shared by more
# images and the processor's parallel units fill up, so each doubling of the batch gains less than the one
# before. Once the processor is busy all the time, twice the batch takes twice as long and images/s stop
# growing: that is saturation. Whether this sweep's largest batches reach it or only bend toward it, the
# slopes checked in section 6 say; section 3 prints the same gains for a model that costs far more per image
# (ResNet-50 at 224 x 224). Each point
# is the median of the rates of the run's measured windows (the first five steps, or the first quarter of a
# short run, which pay for allocations and warm-up, left out); the error bars are their standard deviation.
# Both axes are logarithmic: growth in proportion to the batch is a line of slope 1, slowing growth is the
# line bending, and saturation is the line flat.

# %%
figure = plots.scatter_line(table.add_column("img_s_std", lambda r: r["summary"].get("images_per_s_std")),
                            "batch_size", "images_per_s_median", logx=True, logy=True, errors="img_s_std",
                            title="throughput against batch size (measured)")
figure

# %%
ordered = table.sorted_by("batch_size")
labs.reveal("speedup", ordered[-1]["images_per_s_median"] / ordered[0]["images_per_s_median"])

# %% [markdown]
# ## 3. Memory grows with the batch — until it does not fit
#
# The weights, gradients and optimizer state do not depend on the batch; the activations kept for the
# backward pass grow in proportion to it. On a GPU the sweep is continued until a run fails with
# *CUDA out of memory*. `labs.is_oom(job)` recognises it the way DLO-JZ's notebooks do, from the error in
# its `.err` log (one run of a job that makes several: from the error that run recorded). Slurm does not
# watch GPU memory: such a job ends `FAILED`. Its state `OUT_OF_MEMORY` means the job went over its host
# memory (`--mem`), which the check counts too.
#
# Memory is given in **GiB** (2³⁰ bytes, as PyTorch reports it), everywhere in this lab. GPUs are sold
# in "GB" that are nearly GiB: an "H100 80GB" holds 79.2 GiB (85.0 × 10⁹ bytes), an H200 "141 GB" about
# 140 GiB. The figure has log axes on both sides: memory that grows in proportion to the batch is a line of
# slope 1 (dotted), bent only by the part that does not depend on the batch. That part is more than the
# weights, gradients and optimizer state (0.3 GiB for ResNet-50 with SGD and momentum): cuDNN's workspaces,
# which its autotuner picks per convolution, take most of it (lab 03 measures them).

# %% tags=["exact-settings"]
profile.explain(
    gpu="The memory sweep submitted in section 1 trains ResNet-50 in fp32 on 224 × 224 images for a few steps "
        "each, at every batch size of the settings, until one runs out of memory. The cell below waits for its "
        "runs (a bar counts them, and estimates the time left) and reads their peaks.",
    cpu="There is no GPU here, so the figures below were recorded on an H100 by the engine's benchmark "
        "(ResNet-50, bf16, 224 × 224 images): images/s that grow ever more slowly, at a much larger scale, and "
        "memory growing in proportion to the batch up to the out-of-memory error.")

# %% tags=["nbval-ignore-output"]
if memory_sweep is not None:  # a GPU: measured up to the OOM, submitted in section 1
    memory = bs.add_peak_memory_gib(memory_sweep.results(timeout_s=s.timeout_s, title="peak memory"))
    # running out of memory is what this sweep looks for; any other failure is reported
    failures.report_failures(memory.where(lambda r: not r["oom"]), "the memory sweep (other than out of memory)")
    display(memory.with_columns("batch_size", "state", "oom", "peak_mem_gib", "images_per_s"))
    figure = bs.memory_figure(memory, "peak GPU memory against batch size (measured)")
else:  # no GPU here: the figures recorded on one
    recording = labs.load_recording("gpu_ladder")
    memory = recorded.batch_sweep_table(recording) if recording else None
    figure = None
    if memory is not None:
        memory.add_column("peak_mem_gib", lambda r: r["peak_mem_gb"])  # the benchmark's "gb" are GiB (2**30 bytes)
        display(memory.with_columns("batch_size", "img_s", "img_s_std", "peak_mem_gib", "oom"))
        display(plots.scatter_line(memory, "batch_size", "img_s", errors="img_s_std", logx=True, logy=True,
                                   color=plots.RECORDED_COLOR, title="GPU throughput (recorded, ResNet-50 bf16)"))
        figure = bs.memory_figure(memory, "peak GPU memory against batch size (recorded, ResNet-50 bf16)",
                                  recorded=True)
print(bs.rate_gains(memory, "images_per_s" if memory_sweep is not None else "img_s"))
figure

# %% [markdown]
# ## 4. Accuracy within a fixed epoch budget
#
# Every run saw the training set the same number of times. The small batches made many more optimiser
# steps in those epochs; the large ones made few, each better informed but not better by as much as the
# number of images behind it. Left: validation accuracy after each epoch. Right: how long each run
# trained before it first reached the target accuracy (grey, marked "never": its whole training time, and no
# reach). Each batch size is one run, with one seed: small orderings among the large batches (which of two
# ends higher) are within what another seed could change. After the first epoch the large batches have made
# few steps (printed above the figure), so they may still be near chance there.

# %% tags=["exact-counts"]
print("optimiser steps in the first epoch: " + ", ".join(
    f"batch {r['batch_size']}: {r['epochs'][0]['step']:,}" for r in ordered if r["epochs"]))
bs.accuracy_figure(table, s.target_acc)

# %% [markdown] tags=["exercise"]
# ### Exercise — give the large batch the same number of steps
#
# The largest batch made far fewer optimiser steps than the reference batch `s.reference_batch`. Run it
# again with as many **steps** as the reference run made (`reference["summary"]["steps"]`, at most
# `s.longer_max_steps`: the workshop's GPU budget; give `s.base.replace(...)` the options
# `batch_size=largest`, `steps=` and `epochs=` large enough to allow them, and submit it with
# `labs.run_sweep`), then compare its validation accuracy and its training time with the reference run.
# Store the new row (with its time to the target accuracy, `bs.add_time_to_accuracy`) in `longer`.

# %% tags=["nbval-ignore-output", "exercise"]
reference = table.one(batch_size=s.reference_batch)  # the reference row of the sweep
largest = max(s.batch_sizes)
### BEGIN SOLUTION
steps_done = reference["summary"]["steps"]
steps_done = min(steps_done, s.longer_max_steps)
longer_config = s.base.replace(batch_size=largest, steps=steps_done, epochs=10 * steps_done)
longer = bs.add_time_to_accuracy(labs.run_sweep([longer_config], name=labs.job_name(pseudo, "long"),
                                                **s.job, timeout_s=s.timeout_s), s.target_acc)[0]
### END SOLUTION
print(bs.longer_verdict(longer, reference, s.acc_tie, s.target_acc))

# %% [markdown]
# Read the line above before the paragraph below: which of the two runs would you rather pay for, by
# accuracy, by GPU time, by images processed?

# %% [markdown] tags=["solution"]
# More steps let the large batch recover most of its gap, and each of its steps processes many images at
# the high images/s of section 2: whether it wins in **wall time** depends on how many steps it needs
# (the line above says how it went here). What it always costs is **images**: many more per unit of
# progress, so per epoch of data it learns less. Larger batches pay off when the hardware turns them into
# more images per second *and* the optimiser can use them — with a learning rate scaled to the batch,
# warm-up, or the layer-wise optimizers of the large-batch lab (07).

# %% [markdown]
# ## 5. Exit ticket
#
# Four questions on what *you* measured above, and one you compute from it: the answers are in your own
# tables and figures, not in a book. The ticket is checked at once, and your score is saved for the
# instructor.

# %%
smallest, largest = ordered[0], ordered[-1]
fastest = max(ordered, key=lambda r: r["images_per_s_median"])
reached = [r for r in ordered if r["time_to_target_s"] is not None]
OTHER_GPU_GIB = 40  # a GPU with 40 GiB for tensors: not the one the figures above come from
fits_other = bs.largest_batch_in(memory, OTHER_GPU_GIB)
ticket = labs.exit_ticket("02", {
    "fastest_batch": labs.Question("Which batch size processed the most images per second?", fastest["batch_size"]),
    "speedup": labs.Question(f"How many times more images per second than batch {smallest['batch_size']} did it "
                             "process?", fastest["images_per_s_median"] / smallest["images_per_s_median"],
                             unit="×", rel_tol=0.1),
    "largest_steps": labs.Question(f"How many optimiser steps did batch {largest['batch_size']} make in the sweep?",
                                   largest["summary"]["steps"]),
    "first_to_target": labs.Question(
        f"Which batch size reached {s.target_acc:.0%} validation accuracy after the least training time?",
        min(reached, key=lambda r: r["time_to_target_s"])["batch_size"] if reached else None),
    "batch_on_40": labs.Question(
        f"Transfer: memory grows on a straight line with the batch. Through the peaks of the two largest batches "
        f"that fit in section 3, what is the largest batch of that model that fits in {OTHER_GPU_GIB} GiB?",
        fits_other, rel_tol=0.05, computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"fastest_batch": ..., "speedup": ..., ...}` in place of the two
# placeholder lines: numbers you read above, and for the last one a number you compute (fixed part and
# GiB per image from the two points, then the batch). A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"fastest_batch": fastest["batch_size"],
           "speedup": fastest["images_per_s_median"] / smallest["images_per_s_median"],
           "largest_steps": largest["summary"]["steps"],
           "first_to_target": min(reached, key=lambda r: r["time_to_target_s"])["batch_size"] if reached else None}
fitting = sorted((r for r in memory or [] if not r["oom"] and r["peak_mem_gib"]), key=lambda r: r["batch_size"])
if len(fitting) >= 2:
    (b1, m1), (b2, m2) = ((r["batch_size"], r["peak_mem_gib"]) for r in fitting[-2:])
    per_image = (m2 - m1) / (b2 - b1)  # GiB per image
    answers["batch_on_40"] = int((OTHER_GPU_GIB - (m1 - per_image * b1)) // per_image)
### END SOLUTION
graded = ticket.grade(answers)

# %% [markdown]
# ## 6. The claims, checked on this sweep

# %%
# on a CPU, per second of processor time: jobs sharing the processor take turns with these runs and would
# stretch their wall-clock time unevenly; on a GPU, per second of wall-clock time
verdicts = bs.check_claims(table, memory if s.memory_base is not None else None,
                           rate="images_per_cpu_s_median" if profile.is_cpu else "images_per_s_median",
                           target_acc=s.target_acc, acc_gap_min=s.acc_gap_min, slope_drop_min=s.slope_drop_min,
                           gpu=profile.is_gpu, standin=labs.on_standin(s.base))
