"""Lab 02: batch size — throughput, memory up to the OOM, accuracy within an epoch budget."""

# %% [markdown]
# # Lab 02 — Batch size
#
# **Learning goals.** After this lab you can
#
# 1. explain why images per second grow with the batch size and then stop growing (saturation);
# 2. find the largest batch that fits in a GPU's memory by running up to the out-of-memory error, and
#    recognise that error from a job's state and log;
# 3. tell throughput from progress: at a fixed number of epochs a larger batch makes fewer optimiser
#    steps, so it may finish sooner yet reach a lower accuracy — what counts is the *time to accuracy*.
#
# One sweep of jobs, one results table, and every plot below is drawn from that table.

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
# The same model, data, learning rate and number of epochs; only the batch size changes. The runs go
# **one at a time** in the CPU profile: jobs sharing a processor would slow each other down and the
# throughput we measure would be that of the crowd. There they are also short, shorter than starting
# Python and torch, so `one_job=True` puts them into a single job that runs them one after the other
# (`python -m coursekit.train.sweep`). On a GPU cluster each run is a job with its own GPU, so they run
# side by side.

# %%
configs = [s.base.replace(batch_size=b) for b in s.batch_sizes]
for config in configs:
    print(labs.engine_command(config))

# %% [markdown] tags=["exercise"]
# ### Predict, then run
#
# The largest batch holds 256 times more images than the smallest. Before you run the sweep: how many
# times more **images per second** will it process? Replace the two placeholder lines below with your
# guess, a number, in `my_guess` (or `my_guess = None`, which shows a box to type it in). Section 2 sets
# it beside the measurement.

# %% tags=["exercise"]
### BEGIN SOLUTION
my_guess = 20
### END SOLUTION
labs.predict("speedup", f"How many times more images per second will batch {max(s.batch_sizes)} process than "
             f"batch {min(s.batch_sizes)}?", unit="×", value=my_guess)

# %% tags=["nbval-ignore-output"]
table = bs.run_sweep(configs, name=labs.job_name(pseudo, "bs"), one_job=profile.is_cpu,
                     **s.job, timeout_s=s.timeout_s, title="batch-size sweep")
bs.add_time_to_accuracy(table, s.target_acc)
table.with_columns("batch_size", "job_id", "state", "images_per_s_median", *labs.energy_columns(table), "train_time_s",
                   "val_acc", "time_to_target_s")

# %% [markdown]
# Speed is one cost, energy another. On a GPU the table shows the joules each image cost during the
# timed steps, and what one epoch of the training set costs at that rate. Does the fastest batch also
# use the least energy per image?

# %%
print(labs.energy_note(table) or "energy per image and per epoch: in the table above")
print("states:", table.column("state"))
failed = failures.report_failures(table, "the batch-size sweep")
table = failures.completed(table)

# %% [markdown]
# ## 2. Throughput saturates
#
# A step has a fixed cost (launching operations, Python, the optimiser update) and a cost per image.
# Small batches pay the fixed cost for few images; as the batch grows the fixed part is shared by more
# images and the processor's parallel units fill up, until it is busy all the time: from then on twice
# the batch takes twice as long, and images/s stop growing. Each point is the median over the run's
# steps (the first one, which pays for allocations, left out); the error bars are their standard
# deviation.

# %%
figure = plots.scatter_line(table.add_column("img_s_std", lambda r: r["summary"].get("images_per_s_std")),
                            "batch_size", "images_per_s_median", logx=True, errors="img_s_std",
                            title=f"throughput against batch size ({profile.name} profile, measured)")
figure

# %%
ordered = table.sorted_by("batch_size")
labs.reveal("speedup", ordered[-1]["images_per_s_median"] / ordered[0]["images_per_s_median"])

# %% [markdown]
# ## 3. Memory grows with the batch — until it does not fit
#
# The weights, gradients and optimizer state do not depend on the batch; the activations kept for the
# backward pass grow in proportion to it. On a GPU the sweep is continued until a job fails with
# *CUDA out of memory*. `labs.is_oom(job)` recognises it the way DLO-JZ's notebooks do, from the job's
# state (`OUT_OF_MEMORY` when Slurm kills it) or from the error in its `.err` log. In the cpu profile
# the figures below were recorded on an H100 by the engine's benchmark: the same saturation of
# images/s, at a much larger scale, and memory growing in proportion to the batch.

# %% tags=["nbval-ignore-output"]
if s.memory_base is not None:  # gpu profile: measure, up to the OOM
    memory = bs.add_peak_memory_gb(labs.run_sweep(
        [s.memory_base.replace(batch_size=b) for b in s.memory_batch_sizes], name=labs.job_name(pseudo, "mem"),
        **s.job, timeout_s=s.timeout_s, title="peak memory"))
    # running out of memory is what this sweep looks for; any other failure is reported
    failures.report_failures(memory.where(lambda r: not r["oom"]), "the memory sweep (other than out of memory)")
    display(memory.with_columns("batch_size", "state", "oom", "peak_mem_gb", "images_per_s"))
    figure = bs.memory_figure(memory, "peak GPU memory against batch size (measured)")
else:  # cpu profile: no GPU here, show the figures recorded on one
    recording = labs.load_recording("gpu_ladder")
    memory = recorded.batch_sweep_table(recording) if recording else None
    figure = None
    if memory is not None:
        display(memory)
        display(plots.scatter_line(memory, "batch_size", "img_s", errors="img_s_std", logx=True,
                                   color=plots.RECORDED_COLOR, title="GPU throughput (recorded, ResNet-50 bf16)"))
        figure = bs.memory_figure(memory, "peak GPU memory against batch size (recorded, ResNet-50 bf16)",
                                  recorded=True)
figure

# %% [markdown]
# ## 4. Accuracy within a fixed epoch budget
#
# Every run saw the training set the same number of times. The small batches made many more optimiser
# steps in those epochs; the large ones made few, each better informed but not better by as much as the
# number of images behind it. Left: validation accuracy after each epoch. Right: how long each run
# trained before it first reached the target accuracy (grey: never, within the budget).

# %%
bs.accuracy_figure(table, s.target_acc)

# %% [markdown] tags=["exercise"]
# ### Exercise — give the large batch the same number of steps
#
# The largest batch made far fewer optimiser steps than *B = 64*. Run it again with as many **steps**
# as the *B = 64* run made (`reference["summary"]["steps"]`; give `s.base.replace(...)` the options
# `batch_size=largest`, `steps=` and `epochs=` large enough to allow them, and submit it with
# `labs.run_sweep` as in section 1), then compare its validation accuracy and its training time with
# the *B = 64* run (at most `s.longer_max_steps` steps: the workshop's GPU budget). Store the new row (with its time to the target accuracy, `bs.add_time_to_accuracy`)
# in `longer`.

# %% tags=["nbval-ignore-output", "exercise"]
reference = table.one(batch_size=64)  # the B = 64 row of the sweep
largest = max(s.batch_sizes)
### BEGIN SOLUTION
steps_done = reference["summary"]["steps"]
steps_done = min(steps_done, s.longer_max_steps)
longer_config = s.base.replace(batch_size=largest, steps=steps_done, epochs=10 * steps_done)
longer = bs.add_time_to_accuracy(labs.run_sweep([longer_config], name=labs.job_name(pseudo, "long"),
                                                **s.job, timeout_s=s.timeout_s), s.target_acc)[0]
### END SOLUTION
print(f"B={largest} for {longer['summary']['steps']} steps: val_acc {longer['val_acc']:.3f} in {longer['train_time_s']:.2f} s; "
      f"B=64: val_acc {reference['val_acc']:.3f} in {reference['train_time_s']:.2f} s")

# %% [markdown] tags=["solution"]
# With as many steps the large batch catches up (or nearly), but it processes many more images to get
# there. Larger batches pay off when the hardware turns them into more images per second *and* the
# optimiser can use them — with a learning rate scaled to the batch, warm-up, or the layer-wise
# optimizers of the large-batch lab.

# %% [markdown]
# ## 5. Exit ticket
#
# Four questions on what *you* measured above: the answers are in your own tables and figures, not in a
# book. The ticket is checked at once, and your score is saved for the instructor.

# %%
smallest, largest = ordered[0], ordered[-1]
fastest = max(ordered, key=lambda r: r["images_per_s_median"])
reached = [r for r in ordered if r["time_to_target_s"] is not None]
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
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"fastest_batch": ..., "speedup": ..., ...}` in place of the two
# placeholder lines: numbers you read above. A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"fastest_batch": fastest["batch_size"],
           "speedup": fastest["images_per_s_median"] / smallest["images_per_s_median"],
           "largest_steps": largest["summary"]["steps"],
           "first_to_target": min(reached, key=lambda r: r["time_to_target_s"])["batch_size"] if reached else None}
### END SOLUTION
graded = ticket.grade(answers)

# %% [markdown]
# ## 6. The claims, checked on this sweep

# %%
ordered = table.sorted_by("batch_size")
# on a CPU, per second of processor time: jobs sharing the processor take turns with these runs and would
# stretch their wall-clock time unevenly; on a GPU, per second of wall-clock time
rate = "images_per_cpu_s_median" if profile.is_cpu else "images_per_s_median"
holds, evidence = labs.saturates(ordered.column("batch_size"), ordered.column(rate))
evidence = f"images per {'processor-' if profile.is_cpu else ''}second (median): {evidence}"
smallest, largest = ordered[0], ordered[-1]
best_acc = max(ordered.column("val_acc"))
STANDIN = "the generated stand-in is learned perfectly by every batch: a smoke test, not evidence about accuracy"
verdicts = [
    labs.check_claim("throughput (images/s) grows with the batch size and saturates", holds, evidence),
    labs.check_claim(
        "at a fixed epoch budget the largest batch reaches a clearly lower accuracy than the best smaller one",
        largest["val_acc"] < best_acc - 0.1,
        f"val_acc {largest['val_acc']:.3f} at batch {largest['batch_size']} vs {best_acc:.3f} at best",
        applies=not labs.on_standin(s.base), why_not=STANDIN),
    labs.check_claim(
        "the fastest run per image is not the fastest to the target accuracy",
        largest["time_to_target_s"] is None
        or largest["time_to_target_s"] > min(t for t in ordered.column("time_to_target_s") if t is not None),
        f"time to {s.target_acc:.0%}: " + ", ".join(
            f"{r['batch_size']}: {'never' if r['time_to_target_s'] is None else format(r['time_to_target_s'], '.2f') + ' s'}"
            for r in ordered),
        applies=not labs.on_standin(s.base), why_not=STANDIN),
    labs.check_claim(
        "the largest batch that fits is found by running into the out-of-memory error",
        memory is not None and any(memory.column("oom")),
        f"OOM at batch {[r['batch_size'] for r in memory if r['oom']] if memory is not None else '-'}",
        applies=profile.is_gpu, why_not="no GPU in this profile (the recorded figures above show it)"),
]

