"""Lab 05: data loading and the profiler."""

# %% [markdown]
# # Lab 05 — Data loading and the profiler
#
# **Learning goals.** After this lab you can
#
# 1. name the DataLoader settings that decide whether the accelerator waits for data — worker
#    processes, `pin_memory`, `prefetch_factor`, `persistent_workers` — and the copy option
#    `non_blocking`;
# 2. measure, per configuration, the share of each step spent waiting for data;
# 3. compare decoding JPEGs on CPU workers with decoding them on the GPU (nvjpeg);
# 4. record a `torch.profiler` trace of a few steps, read its summary (top operators, time in the data
#    loader, GPU idle time) and open it in Perfetto.
#
# The engine splits the time of every step into **data time** (from the end of the previous step until
# the batch is on the device: waiting for the loader, the copy) and **compute time** (forward, backward,
# optimizer). Its step records carry both, `data_time_s` and `compute_time_s`.

# %%
# %matplotlib inline
from pathlib import Path

from coursekit import labs
from coursekit.labs import lab05_data_loading as loading
from coursekit.labs.kit import failures, plots, recorded

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("05")
print(s)

# %% [markdown]
# ## 1. A folder of JPEGs
#
# Real datasets are files that must be read and decoded before every epoch. The engine's generator
# writes a synthetic ImageNet-like folder (`train/` and `val/`, one sub-folder per class); the
# loader reads it with torchvision's `ImageFolder`: open, decode (PIL), random crop, flip, convert to a
# tensor, normalise — all on the CPU, for every image.

# %% tags=["exact-counts"]
root = loading.prepare_jpeg_tree(s.jpeg_classes, s.jpeg_images_per_class, s.jpeg_size, workers=s.jpeg_workers)
images = sorted(root.glob("train/*/*.jpg"))
print(f"{len(images)} training JPEGs of {s.jpeg_size[0]}x{s.jpeg_size[1]} in {len(list(root.glob('train/*')))} classes")

# %% [markdown]
# ## 2. Loader settings, one job each
#
# * `workers`: processes that prepare batches in parallel with training (0: the training process does it
#   itself, between steps);
# * `prefetch_factor`: batches each worker prepares ahead;
# * `persistent_workers`: keep the workers alive between epochs instead of starting them again;
# * `pin_memory`: put batches in page-locked host memory, from which the GPU copies faster and
#   asynchronously;
# * `non_blocking`: the training process does not wait for the copy to the GPU. The copy is queued behind
#   the GPU's pending work, and the process goes on (the next batch, the next kernels). Overlapping the copy
#   with the GPU's computing needs a second CUDA stream.
#
# The last two matter only with a GPU. The runs go one at a time, so that they do not compete for the
# cores, followed by the profiled run of section 3 (`loading.submit_sweeps`: one sweep per experiment).
# They share one job (`one_job=True`: `python -m coursekit.train.sweep` runs them one after the other),
# which starts Python and torch once instead of once per run, and which the cell below submits at once:
# you read on while it runs, and section "The measurements" collects the results.

# %% tags=["exact-settings"]
base = s.base.replace(data_dir=str(root))
configs = [base.replace(**options) for options in s.loaders]
labels = [loading.loader_label(options) for options in s.loaders]
for label, config in zip(labels, configs, strict=True):
    print(f"{label:<40} {labs.engine_command(config).replace(str(root), '<jpeg folder>')}")

# %% tags=["nbval-ignore-output"]
profiled = base.replace(workers=0, profile=True, profile_steps=s.profile_steps, epochs=1)  # section 3
sweep, prof_sweep = loading.submit_sweeps([configs, [profiled]], one_at_a_time=True, one_job=True,
                                          names=[labs.job_name(pseudo, "load"), labs.job_name(pseudo, "prof")],
                                          **s.job, timeout_s=s.timeout_s)
print(f"{len(configs)} loader runs and the profiled run submitted in one job: read on while it runs")
profile.explain(
    gpu=f"Each run trains {base.model} ({base.precision}, channels_last) for {base.test_steps} steps of "
        f"{base.batch_size} images, two passes over the folder in full batches, so that an epoch boundary is in "
        "every run. "
        "Together they take about five minutes.",
    cpu="Each run computes with one thread, leaving the second core to a worker, as the CPU cores of a GPU node "
        "are free while the GPU computes.")

# %% [markdown] tags=["exercise"]
# ### Predict, then look
#
# While the jobs run: with no worker process (`workers=0`), what percentage of each training step
# will be spent waiting for data? Replace the two placeholder lines below with your guess, a number, in
# `my_guess` (or `my_guess = None`, which shows a box to type it in). The figure below sets it beside the
# measurement.

# %% tags=["exercise"]
### BEGIN SOLUTION
my_guess = 20
### END SOLUTION
labs.predict("wait_no_workers", "With workers=0, what percentage of each step will be spent waiting for data?",
             unit="%", value=my_guess)

# %% [markdown]
# ### While the jobs run: decoding on the CPU or on the GPU
#
# When the CPUs cannot keep up, the decoding itself can move to the GPU: the workers only read the files'
# bytes and `torchvision.io.decode_jpeg(device="cuda")` (nvjpeg) decodes whole batches on the GPU (the
# engine's `--gpu-decode`). A background thread decodes a few batches ahead, on its own CUDA stream and on
# into the next epoch, and the workers never stop between epochs, so that the step does not wait. The
# engine's benchmark recorded both on an H100 with 16 CPU workers:

# %% tags=["nbval-ignore-output"]
recording = labs.load_recording("gpu_ladder")
jpeg = recorded.jpeg_table(recording) if recording else None
if jpeg is not None:
    display(jpeg)
    display(plots.bars(jpeg.column("pipeline"), jpeg.column("img_s"), errors=jpeg.column("img_s_std"),
                       ylabel="training images/s", title="ResNet-50 bf16 (recorded)", color=plots.RECORDED_COLOR))
else:
    print("no recorded JPEG figures")

# %%
profile.explain(gpu="The last configuration of your sweep decodes on the GPU: its row below shows what that does "
                    "to the waiting, with 8 workers reading the files.")

# %% [markdown]
# ### The measurements
#
# One row per loader setting, each number over the same steps: the steps after the first five (warm-up;
# in a run of fewer than 20 steps, after its first quarter), the second epoch's start included.
#
# * `data_fraction`: time waiting for data / wall time of those steps;
# * `data_time_mean_s`, `compute_time_mean_s`: per step, their means over the same steps, so that
#   data / (data + compute) is `data_fraction` exactly (the stacked bars of the figure and its share agree);
# * `data_time_s`: the **median** wait, the typical step: a loader that delivers its batches in bursts
#   (each worker prepares a whole batch, all workers start together) shows a small median and a large mean;
# * `images_per_s`: images / wall time of those steps;
# * `epoch_time_s`: the faster epoch, counted from its start, so the workers' start and the first batch
#   are in it: with workers, the epoch's images / `epoch_time_s` is usually lower than `images_per_s`.
#   With `workers=0` nothing starts at an epoch's beginning and the two rates are close.

# %% tags=["nbval-ignore-output"]
table = sweep.results(timeout_s=s.timeout_s, title="loader settings")
for row, label in zip(table, labels, strict=True):
    row["loader"] = label
failed = failures.report_failures(table, "the loader sweep")
table = failures.completed(table)
table.add_column("epoch_time_s", lambda row: min(e["epoch_time_s"] for e in row["epochs"]))
table.with_columns("loader", "state", "data_fraction", "data_time_mean_s", "compute_time_mean_s", "data_time_s",
                   "images_per_s", "epoch_time_s")

# %%
print("states:", table.column("state"))

# %%
figure, (left, right) = plots.new_figure(ncols=2)
positions = range(len(table))
data = [row["data_time_mean_s"] * 1e3 for row in table]  # means: data / (data + compute) is the right panel's share
compute = [row["compute_time_mean_s"] * 1e3 for row in table]
left.bar(positions, compute, label="compute")
left.bar(positions, data, bottom=compute, label="waiting for data")
short = loading.ladder_labels(table.column("loader"))  # "… +pin": the setting to its left, plus pinned memory
left.set_xticks(list(positions), short, rotation=20, ha="right", fontsize="small")
left.set_ylabel("ms per step (mean of the measured steps)")
left.legend(fontsize="small")
plots.bars(short, [100 * f for f in table.column("data_fraction")], ax=right,
           ylabel="% of step time waiting for data", title="share waiting for data")
for ax in (left, right):
    ax.set_xlabel("loader (… : the one to its left, plus)" if loading.LADDER_MARK in " ".join(short) else "loader")
figure

# %%
labs.reveal("wait_no_workers", 100 * table[0]["data_fraction"] if table[0]["config"].workers == 0 else None)

# %% [markdown]
# With no worker, every step waits for its batch to be decoded. A worker decodes the next batch while
# the current one trains: the wait shrinks to what decoding takes *beyond* the compute. Starting workers
# costs time at each epoch, which `persistent_workers` pays only once. Pinned memory shortens every copy
# to the GPU (the GPU reads page-locked memory directly, without a staging copy by the driver), so
# `+pin` lowers the wait even when the copies are not asynchronous.

# %%
lesson = loading.feeding(list(table))
if lesson["holds"]:
    profile.explain(gpu=f"With {loading.CPU_WORKERS} CPU workers the steps still waited "
                        f"{100 * min(lesson['cpu']):.0f}–{100 * max(lesson['cpu']):.0f} % of their time, whatever the "
                        "other settings: eight cores cannot decode and crop JPEGs as fast as this GPU trains on them. "
                        f"Only decoding on the GPU brought the waiting down, to {100 * max(lesson['gpu']):.0f} %.")
elif lesson["cpu"] and lesson["gpu"]:
    profile.explain(gpu=f"In this run the CPU workers' loaders waited {100 * min(lesson['cpu']):.0f}–"
                        f"{100 * max(lesson['cpu']):.0f} % of step time and GPU decoding {100 * max(lesson['gpu']):.0f} %: "
                        "not the clear split between them that other runs of this lab measured (see the claims at "
                        "the end).")
others = loading.other_settings(list(table))
if others["alike"]:
    profile.explain(gpu=f"The start-up that `persistent_workers` saves does not show here: the "
                        f"{len(others['shares'])} loaders with {loading.CPU_WORKERS} CPU workers all waited "
                        f"{100 * min(others['shares']):.0f}–{100 * max(others['shares']):.0f} % of step time, with or "
                        "without it. The steps wait for the decoding on the CPU cores, and neither keeping the workers "
                        "nor preparing more batches ahead speeds it up.")
if others["pinning_shows"]:
    profile.explain(gpu="Pinned memory does show, in the typical step's wait (the median `data_time_s`): "
                        f"{1e3 * min(others['unpinned_s']):.0f} ms without it, "
                        f"{1e3 * min(others['pinned_s']):.1f}–{1e3 * max(others['pinned_s']):.1f} ms with it.")
decoded = loading.decode_compute(list(table))
if decoded and decoded["longer"]:
    profile.explain(gpu=f"The steps of the GPU-decoding loader computed {100 * decoded['extra']:.0f} % longer "
                        f"({decoded['gpu_s']:.3f} s against {decoded['cpu_s']:.3f} s a step), most likely because "
                        "its decoding runs on the same GPU, at the same time as the step.")

# %% [markdown] tags=["exercise"]
# ### Your turn: a loader that keeps the step fed
#
# The engine set the loader for you above. Now do it yourself. `lab05_data_loading/train_starving.py` is a
# small training loop whose DataLoader starves the step: each image waits to be read (as a file on a
# shared file system does), then is decoded, cropped and flipped on the CPU, all by the training process
# itself, between two steps. Your copy of `lab05_data_loading/train_fed.py` is the same script with a `TODO`
# where each change goes:
#
# 1. in `make_loader`: worker processes (`num_workers=4`), `pin_memory=True`,
#    `persistent_workers=True` and `prefetch_factor=4` for the DataLoader;
# 2. in `to_device`: copy the images and the labels with `.to(device, non_blocking=True)`.
#
# `pin_memory` and `non_blocking` go together: pinned memory makes every copy to the GPU faster, and only
# from pinned memory is a `non_blocking` copy asynchronous: the training process queues it and goes on
# without waiting for it.
#
# Fill in the TODOs, then set `my_script` to the path of your script. `labs.check_loader_script(my_script)`
# runs it beside `train_starving.py`, a few steps each, and checks:
#
# - **run**: the script runs to its end;
# - **output**: it wrote its times per step (waiting for data, the whole step) to the file `--out` names;
# - **workers**, **pinning**, **persistent**: the settings your DataLoader and your copies really used;
# - **wait_share**: the share of a step spent waiting for data fell to at most half of
#   `train_starving.py`'s. Reading a file is waiting, not computing: workers overlap such waits even
#   where they have no core of their own.

# %% tags=["exercise", "nbval-ignore-output"]
### BEGIN SOLUTION
my_script = s.scripts["fed"]  # the solution: lab05_data_loading/train_fed.py
### END SOLUTION
loader_report = labs.check_loader_script(my_script)
loader_report

# %%
for name in ("workers", "pinning", "persistent"):
    print(f"{name}: {loader_report[name].verdict}")

# %% [markdown]
# ## 3. The profiler
#
# `torch.profiler` records every operator the steps run, on the CPU and (with CUDA) on the GPU. The
# engine's `--profile` records `--profile-steps` steps after one step of wait and one of warm-up, and
# writes a Chrome trace into the run's `profile/` folder plus a text summary of the operators
# that took the most time (shown below without its `ProfilerStep*` row: the steps themselves, not an
# operator). We profiled the run without workers, where the loader is inside the steps
# (`profiled`, submitted in section 2 with the loader runs, in the same job after them).

# %% tags=["nbval-ignore-output"]
print(labs.engine_command(profiled).replace(str(root), "<jpeg folder>"))
(prof_job,) = prof_sweep.jobs
print(prof_job.job_id, labs.wait_all([prof_job], timeout_s=s.timeout_s))
failed = failures.report_failures([prof_job])
if not failed:
    print(loading.top_operators_text(prof_job.run_dir))

# %% tags=["nbval-ignore-output"]
trace = None if failed else loading.summarize_trace(loading.trace_file(prof_job.run_dir))
if trace is None:
    print("no trace: the profiled job failed (see above)")
else:
    print(f"{trace['steps']} profiled steps, {trace['profiled_ms']:.1f} ms; "
          f"{100 * trace['dataloader_share']:.0f} % of it inside the DataLoader")
    if trace["gpu_idle_share"] is not None:
        print(f"the GPU was idle {100 * trace['gpu_idle_share']:.0f} % of the profiled time")
trace["top_operators"] if trace else None

# %% [markdown]
# To look at the trace itself, drop the `.pt.trace.json` file on https://ui.perfetto.dev (or open it in
# Chrome's `chrome://tracing`) — each step, each operator, and with CUDA the GPU's kernels on their own
# timeline, where the gaps are the idle time. For traces of several ranks, Holistic Trace Analysis
# (`pip install HolisticTraceAnalysis`) computes idle time, communication overlap and stragglers. The
# TensorBoard plugin `torch-tb-profiler` that older tutorials use is deprecated and no longer maintained.

# %% tags=["exact-counts"]
print(len(list(Path(prof_job.run_dir, "profile").glob("*.pt.trace.json"))), "trace file in", Path(prof_job.run_dir, "profile").name)

# %% [markdown] tags=["exercise"]
# ### Exercise — what share of the step is the data loader?
#
# From the trace summary, the DataLoader took a share of each profiled step. Compare it with the share
# of step time waiting for data that the `workers=0` job of section 2 measured with its own clock
# (`data_fraction`). Store both in `from_trace` and `from_metrics`. Why are they not equal?

# %% tags=["nbval-ignore-output", "exercise"]
### BEGIN SOLUTION
from_trace = trace["dataloader_share"] if trace else float("nan")
from_metrics = table[0]["data_fraction"]
### END SOLUTION
print(f"trace: {from_trace:.2f}, metrics: {from_metrics:.2f}")

# %% [markdown] tags=["solution"]
# They come from different jobs (the profiled run and the sweep's `workers=0` run, each with its own
# machine noise) and different steps (a few steps after one of wait and one of warm-up, against every step
# after the first five). And they do not measure the same thing. The trace counts the time the training process spends
# inside the DataLoader; the engine counts as waiting the wall time in which the device did not compute
# the step. These runs write a record after every step, and the engine waits for the device to finish the
# step before writing it, so the process never reaches the next batch while the device still computes. On a
# GPU the engine's waiting also holds what the trace's DataLoader span does not: the copy of each batch to
# the GPU (from pageable memory the process waits for it: `Memcpy HtoD (Pageable -> Device)` in the table).
# That can put the trace a few points below the engine. The profiler's own cost pushes the other way — it
# records every operator, and the transforms run many small ones per image (`aten::copy_`'s calls in the
# table) — adding time to the traced steps, mostly inside the DataLoader: compare `profiled_ms` per step
# with the sweep's `data_time_mean_s + compute_time_mean_s`.

# %% [markdown]
# ## 4. Exit ticket
#
# Four questions on what *you* measured above (the answers are in your own tables and figures, not in a
# book) and one to compute with the lab's idea. The ticket is checked at once, and your score is saved for
# the instructor.

# %%
no_workers = table[0] if table[0]["config"].workers == 0 else None
least = min(table, key=lambda row: row["data_fraction"])
ticket = labs.exit_ticket("05", {
    "wait_no_workers": labs.Question("With workers=0, what percentage of each step was spent waiting for data?",
                                     100 * no_workers["data_fraction"] if no_workers else None, unit="%", abs_tol=5),
    "least_waiting": labs.Question("Which loader setting waited least for data?", least["loader"],
                                   choices=tuple(table.column("loader"))),
    "trace_share": labs.Question("In the profiler trace, what percentage of the profiled time was spent inside the "
                                 "DataLoader?", 100 * trace["dataloader_share"] if trace else None, unit="%", abs_tol=5),
    "profiled_steps": labs.Question("How many steps did the profiler record?", trace["steps"] if trace else None),
    "workers_needed": labs.Question(
        f"A training step computes for {loading.TRANSFER_COMPUTE_MS} ms on the GPU, and one worker process needs "
        f"{loading.TRANSFER_DECODE_MS} ms of its CPU core to read and decode one batch. With a core for each worker, "
        "how many workers at least keep the step from waiting once the loader runs?",
        loading.workers_needed(loading.TRANSFER_DECODE_MS, loading.TRANSFER_COMPUTE_MS), computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"wait_no_workers": ..., "least_waiting": ..., ...}` in place of the two
# placeholder lines: numbers (or a loader setting, as the table writes it) you read above, and the number
# you computed. A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"wait_no_workers": 100 * no_workers["data_fraction"] if no_workers else None,
           "least_waiting": least["loader"],
           "trace_share": 100 * trace["dataloader_share"] if trace else None,
           "profiled_steps": trace["steps"] if trace else None,
           "workers_needed": -(-300 // 50)}  # each worker delivers a batch per 300 ms, the step takes one per 50 ms
### END SOLUTION
graded = ticket.grade(answers)

# %% [markdown]
# ## 5. The claims, checked

# %%
no_workers = table[0]
# CPU decoding only (the GPU-decoding loader's evidence would be nvjpeg's, not the workers'); the share by at least
# loading.WORKERS_WAIT_CUT; checked on a GPU node, where each worker has a core of its own, not on a CPU, where the
# workers share the cores
effect = loading.workers_effect(list(table))
verdicts = [
    labs.check_claim("worker processes decoding on the CPU cut the share of step time spent waiting for data",
                     effect["cuts_wait"],
                     f"{100 * effect['none']['data_fraction']:.0f} % with workers=0, "
                     f"{100 * effect['least']['data_fraction']:.0f} % with {effect['least']['loader']}"
                     if effect["least"] else "no loader with workers=0 and one with workers, both decoding on the CPU",
                     applies=profile.is_gpu,
                     why_not="on a CPU a worker takes its time from the training process and from whatever else "
                             "runs on the machine, so whether it cuts the wait depends on the machine's load, not on "
                             "the loader: the shares are in the table above"),
    labs.check_claim("with workers decoding on the CPU an epoch takes less time than without",
                     effect["faster_epoch"],
                     ", ".join(f"{row['loader']}: {row['epoch_time_s']:.2f} s"
                               for row in [effect["none"], *effect["with_workers"]] if row),
                     applies=profile.is_gpu,
                     why_not="on a CPU the workers share the machine's cores with the training process and with "
                             "whatever else runs: the epoch times are in the table above"),
    labs.check_claim("the profiler trace shows the steps waiting inside the DataLoader for at least "
                     f"{loading.DATALOADER_SHARE_MIN:.0%} of their time when there is no worker",
                     trace is not None and trace["steps"] == s.profile_steps
                     and trace["dataloader_share"] >= loading.DATALOADER_SHARE_MIN,
                     f"{trace['steps']} steps, {100 * trace['dataloader_share']:.0f} % in the DataLoader"
                     if trace else "no trace: the profiled job failed"),
    labs.check_claim(f"the profiler sees the GPU idle {100 * loading.GPU_IDLE_MIN:.0f}–{100 * loading.GPU_IDLE_MAX:.0f} % "
                     "of the profiled steps without workers, within "
                     f"{100 * loading.GPU_IDLE_VS_WAIT:.0f} points of the share the engine measured waiting",
                     loading.gpu_idle_agrees(trace["gpu_idle_share"] if trace else None, no_workers["data_fraction"]),
                     f"GPU idle {100 * trace['gpu_idle_share']:.0f} % in the trace, waiting "
                     f"{100 * no_workers['data_fraction']:.0f} % by the engine's clock"
                     if trace and trace["gpu_idle_share"] is not None else "no GPU activity in the trace",
                     applies=profile.is_gpu, why_not="no GPU here: the trace holds no GPU activity"),
    labs.check_claim(f"{loading.CPU_WORKERS} CPU workers cannot feed this model on this GPU (every such loader waits "
                     f"at least {100 * loading.CPU_WORKERS_WAIT_MIN:.0f} % of step time); GPU decoding cuts the wait "
                     f"to at most {loading.GPU_DECODE_WAIT_RATIO:g} of the least-waiting of them",
                     lesson["holds"],
                     f"CPU workers: {', '.join(f'{100 * f:.0f} %' for f in lesson['cpu'])}; GPU decoding: "
                     f"{', '.join(f'{100 * f:.0f} %' for f in lesson['gpu'])}",
                     applies=profile.is_gpu, why_not="no GPU here: the sweep has no GPU-decoding loader"),
]
