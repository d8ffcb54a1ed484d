"""Lab 06: data parallelism — ranks, a script made DDP, DDP = serial, buckets, scaling, NCCL's log."""

# %% [markdown]
# # Lab 06 — Data parallelism
#
# **Learning goals.** After this lab you can
#
# 1. say what every process of a data-parallel job is told by its launcher (`srun`, `torchrun`) — its
#    rank, local rank, world size, where rank 0 listens — and read it in the job's script and logs;
# 2. turn a serial training script into a DistributedDataParallel (DDP) one: process group, device
#    from the local rank, `DistributedSampler` + `set_epoch`, DDP, rank-0-only printing and saving,
#    metrics averaged with `all_reduce` — and map each step to its Horovod counterpart;
# 3. show, on numbers, that N processes give the weights one process gives on the global batch, that
#    forgetting `set_epoch` repeats the same order every epoch, and that a metric one rank prints is not
#    the global one;
# 4. explain what DDP does during the backward pass (gradient buckets, overlap, `no_sync`), what a slow
#    network changes, and what a communication hook (bf16 compression) saves;
# 5. measure strong and weak scaling from one sweep over GPU counts, and read NCCL's log to see which
#    links the all-reduce uses.

# %%
# %matplotlib inline
import torch

import coursekit
from coursekit import labs
from coursekit.course import course_dir
from coursekit.labs import lab06_data_parallel as dp
from coursekit.labs.kit import plots

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("06")
s

# %% tags=["nbval-ignore-output"]
site = coursekit.load_site()
print(f"site {site.name!r} ({site.scheduler}): {site.description}")

# %% [markdown]
# ## 1. Ranks, seen from inside a job
#
# A data-parallel job runs the **same script** in several processes, one per GPU. The launcher tells
# each one who it is: `srun` through `SLURM_PROCID` / `SLURM_LOCALID` / `SLURM_NTASKS`, `torchrun`
# through `RANK` / `LOCAL_RANK` / `WORLD_SIZE` and `MASTER_ADDR` / `MASTER_PORT`. The *rank* numbers
# the processes of the whole job, the *local rank* those of one node (it picks the GPU), and rank 0's
# address is where the others meet. `lab06_data_parallel/show_ranks.py` prints what it was given, joins the process
# group and adds up the ranks with one `all_reduce`. Two processes: one per GPU where there are GPUs (they
# talk through NCCL), two CPU processes where there are none (they talk through gloo).

# %% tags=["nbval-ignore-output"]
(ranks_job,) = coursekit.submit_jobs(s.scripts["ranks"], n_gpu=s.n_processes, name=labs.job_name(pseudo, "ranks"),
                                     **s.job)
print(f"job {ranks_job.job_id}: {s.scripts['ranks']} on {s.n_processes} processes; waiting for it to end "
      "(seconds: each process first imports torch) ...", flush=True)
print(ranks_job.wait(s.timeout_s))

# %% [markdown]
# Each process writes its own log; `job.tail(n, rank=r)` reads rank *r*'s.

# %% tags=["nbval-ignore-output"]
for rank in range(s.n_processes):
    print(ranks_job.tail(14, rank=rank), end="\n\n")

# %% tags=["exact-arithmetic"]
for rank in range(s.n_processes):
    print(*[line for line in ranks_job.tail(14, rank=rank).splitlines() if "all_reduce" in line])

# %% [markdown]
# On a cluster, the job is a batch script: `--nodes`, `--ntasks-per-node` (one task per GPU), the GPUs
# (`--gres` or `--gpus-per-task`), and the `srun` line that starts the tasks. `job.submission_script` is
# that file. The local site has no script: submitit's local executor starts the processes itself on
# this machine and gives each one `SUBMITIT_LOCAL_GLOBALID` / `LOCALID` / `NTASKS` — what you read above.

# %% tags=["nbval-ignore-output"]
if ranks_job.scheduler == "slurm":
    print(ranks_job.submission_script.read_text())
else:
    print(f"site {site.name!r}: no sbatch script; {s.n_processes} processes were started on this machine "
          f"by submitit's local executor (ranks from SUBMITIT_LOCAL_*, rank 0 on 127.0.0.1)")

# %% [markdown] tags=["exercise"]
# ## 2. Your turn: make a serial script data parallel
#
# `lab06_data_parallel/train_serial.py` is the kind of script you bring from your own work: plain PyTorch, about 100
# lines, a small CNN on generated images, one device. Make `lab06_data_parallel/train_ddp.py` out of it, step by step:
#
# 1. `dist.init_process_group(...)` with the rank and world size your launcher gives;
# 2. the device from the **local** rank (`cuda:<local_rank>`; the CPU and gloo without a GPU);
# 3. a `DistributedSampler` for the training set, and `sampler.set_epoch(epoch)` every epoch;
# 4. `DistributedDataParallel(model)`;
# 5. print on rank 0 only; save the checkpoint on rank 0 only (the model inside DDP: `model.module`);
# 6. sum the loss and the correct predictions over the ranks with `dist.all_reduce` before printing.
#
# Your copy of `lab06_data_parallel/train_ddp.py` is the serial script with a `TODO` where each of these steps goes:
# fill them in (or convert a script of your own), then set `my_script` to its path. `--batch-size` is
# now the batch of one process: with N processes the global batch is N times larger.
# `labs.check_ddp_script(my_script)` runs your script on 2 processes beside the serial one and tells
# you, in plain words, what is wrong. It runs them on the CPU (gloo), so the device each rank picks (step 2)
# is not checked there: it shows in the GPU jobs, where ranks that all take `cuda:0` on a node whose GPUs
# every rank sees (coursekit's default) would share one GPU, which NCCL refuses.

# %% tags=["exercise", "nbval-ignore-output"]
### BEGIN SOLUTION
my_script = s.scripts["ddp"]  # the solution: lab06_data_parallel/train_ddp.py
### END SOLUTION
report = labs.check_ddp_script(my_script)
report

# %%
print("every check passed" if report.ok else "some checks failed (read the report above)")

# %% [markdown]
# Now run both scripts as jobs, as you would on the cluster: the serial one on one GPU at the global
# batch, the DDP one on two GPUs at half of it — once started by `srun` (one task per GPU), once by
# `torchrun` (one task per node, torchrun starts a process per GPU). `gpu_jobs_submitter` returns the
# job ids, as idr_pytools' does.

# %% tags=["nbval-ignore-output"]
out = course_dir() / "checkpoints"
global_batch = 64
common = "--epochs 2 --data-size 1024 --seed 0"
runs = {
    "serial": coursekit.gpu_jobs_submitter(f"{s.scripts['serial']} --batch-size {global_batch} {common} --out {out}/serial",
                                           n_gpu=1, name=labs.job_name(pseudo, "serial"), **s.job),
    "ddp-srun": coursekit.gpu_jobs_submitter(
        f"{my_script} --batch-size {global_batch // 2} {common} --out {out}/ddp-srun",
        n_gpu=2, name=labs.job_name(pseudo, "ddp"), **s.job),
    "ddp-torchrun": coursekit.gpu_jobs_submitter(
        f"{my_script} --batch-size {global_batch // 2} {common} --out {out}/ddp-torchrun",
        n_gpu=2, launcher="torchrun", name=labs.job_name(pseudo, "ddpt"), **s.job),
}
jobs = {label: coursekit.get_job(ids[0]) for label, ids in runs.items()}
print(f"jobs {', '.join(j.job_id for j in jobs.values())} ({', '.join(jobs)}): 2 epochs each ...", flush=True)
print(labs.wait_all(list(jobs.values()), s.timeout_s, desc="serial and DDP jobs"))

# %% [markdown]
# `search_log(name)` finds the logs, one per job (`all_tasks=True`: every rank's). The last lines:
# the same validation accuracy for the serial run and both DDP runs — and nothing from rank 1, which
# only trains.

# %% tags=["nbval-ignore-output"]
print(coursekit.search_log(name=labs.job_name(pseudo, "ddp*"), all_tasks=True))

# %% tags=["exact-counts"]
for label, job in jobs.items():
    last_epoch = job.tail(2, rank=0).splitlines()[0]
    print(f"{label:>13}: {job.state}, rank 0 -> measured: {last_epoch.rsplit('  ', 1)[0]}")  # without the img/s
print(f"ddp-srun rank 1 wrote {len(jobs['ddp-srun'].tail(5, rank=1).strip())} characters")

# %% tags=["nbval-ignore-output"]
weights = {label: torch.load(out / label / "checkpoint.pt", map_location="cpu", weights_only=True)["model"]
           for label in jobs}
for label in ("ddp-srun", "ddp-torchrun"):
    dw = max((weights[label][k] - weights["serial"][k]).abs().max().item() for k in weights["serial"])
    print(f"max |w({label}) - w(serial)| = {dw:.1e}")

# %% [markdown]
# ## 3. From Horovod to DDP
#
# The NVIDIA DLI course teaches data parallelism with Horovod; many scripts in the wild still use it.
# Every Horovod step has its DDP line — the ones you just wrote:

# %% tags=["exact-settings"]
labs.horovod_table(my_script)

# %% [markdown]
# ## 4. The correctness claims, measured
#
# **Same weights.** DDP averages the gradients of the N processes after every backward pass. Each
# process computed the mean gradient of its 1/N of the global batch, so the average is the gradient of
# the whole batch: N processes at batch B take exactly the steps one process takes at batch N·B, up to
# the order of float additions. The job below trains a small classifier both ways in each of its
# processes (DDP on its shard, and alone on the global batch) and compares the weights.
#
# That equality holds for this classifier because it has no BatchNorm. A BatchNorm layer under DDP
# normalises with the statistics of its own process's batch, not the global one: DDP without
# `SyncBatchNorm` is *ghost batch norm* with a ghost batch of the per-GPU batch (lab 07 meets it again),
# and DDP copies rank 0's running statistics to the others at each forward (`broadcast_buffers=True`).
# For small per-GPU batches, `torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)` normalises over the
# global batch, at the price of an all-reduce per BatchNorm layer.
#
# One more detail of the validation: `DistributedSampler` pads the set with repeated samples until it
# divides by the number of processes, and those repeats count in the all-reduced accuracy (here 256
# images on 2 processes: nothing is repeated). For exact figures, validate on one rank or count only
# each rank's real samples.

# %% tags=["nbval-ignore-output"]
equivalence_job = coursekit.submit_function(dp.ddp_equivalence, n_gpu=s.n_processes,
                                            name=labs.job_name(pseudo, "equal"), **s.job, **s.equivalence)
print(f"job {equivalence_job.job_id}: ddp_equivalence on {s.n_processes} processes; waiting for its results ...",
      flush=True)
equivalence = dp.equivalence_table(equivalence_job.results(timeout=s.timeout_s))
equivalence.with_columns("rank", "world_size", "global_batch", "batch_per_rank", "max_abs_dw")

# %% [markdown]
# **A metric printed by one rank is one rank's.** The same job measured the accuracy of the final model
# on its own half of a validation set (`local_acc`), averaged it over the ranks with `all_reduce`
# (`averaged_acc`), and computed it on the whole set (`global_acc`). With equal shards the average of
# the ranks' accuracies *is* the global accuracy; with unequal ones, all-reduce the counts (correct,
# total) instead, as `train_ddp.py` does.

# %% tags=["nbval-ignore-output"]
equivalence.with_columns("rank", "local_acc", "averaged_acc", "global_acc")

# %% [markdown]
# **`set_epoch`.** `DistributedSampler` shuffles with a seed plus the epoch number it was given, and
# deals the shuffled indices out to the ranks. Without `set_epoch`, the epoch stays 0: every epoch
# visits the data in the same order. The sampler needs no process group to show it — rank and world
# size can be passed to it directly:

# %% tags=["exact-arithmetic"]
without = dp.sampler_orders(**s.sampler, set_epoch=False)
with_set_epoch = dp.sampler_orders(**s.sampler, set_epoch=True)
print(without, with_set_epoch, sep="\n\n")

# %% [markdown]
# ## 5. Gradient buckets and overlap
#
# DDP does not wait for the whole backward pass: it groups the gradients into **buckets** of
# `bucket_cap_mb` (25 MB by default), in the reverse order of the layers, and starts the all-reduce of
# a bucket as soon as all its gradients are ready, while backward goes on with the earlier layers. One
# huge bucket can only start at the end (nothing hidden); many tiny ones pay a fixed cost per message.
# With **gradient accumulation**, `with model.no_sync():` skips the all-reduce of every micro-batch but
# the last: one communication per optimizer step instead of one per micro-batch.
#
# The job below times one step of a deep MLP under DDP for each bucket cap, beside the forward and backward
# without communication (`no_sync`) and one all-reduce of every gradient alone. Each bucket row names the
# buckets DDP really made of its cap: a bucket holds whole gradients, so a cap below one layer's gradient
# gives one bucket per layer. Every row sets `bucket_cap_mb` explicitly, and an explicit cap turns off the
# small first bucket (1 MiB) that DDP's default (`bucket_cap_mb=None`) makes: the 25 MB row is not quite
# DDP's default layout. `hidden` = (forward + backward alone + all-reduce alone − step) / all-reduce alone:
# the time overlapping saved, as a share of the all-reduce; 1 when the communication was completely hidden,
# 0 or less when overlapping saved nothing (DDP's own copies into its buckets cost a little more). DDP
# starts the all-reduce of every bucket but the last during the backward, whatever this column says: it
# measures what that saved, not the order of events. A bf16 compression row is set against the bf16
# all-reduce alone.

# %% tags=["exact-settings"]
profile.explain(gpu="Here the backward pass runs on the GPUs and NCCL all-reduces the gradients.",
                cpu="On a CPU the cores that compute are the cores that communicate, which would hide nothing: "
                    "here each layer's backward also *sleeps* a few milliseconds (the processor is free, as it is "
                    "while a GPU computes) and gloo's all-reduces are real.")

# %% tags=["nbval-ignore-output"]
buckets_job = coursekit.submit_function(dp.bucket_overlap, n_gpu=s.n_processes, name=labs.job_name(pseudo, "buckets"),
                                        **s.job, **s.buckets)
print(f"job {buckets_job.job_id}: bucket_overlap on {s.n_processes} processes, {len(s.buckets['bucket_caps_mb'])} "
      "bucket sizes and no_sync; waiting for its timings ...", flush=True)
buckets = dp.bucket_table(buckets_job.results(timeout=s.timeout_s))
buckets

# %% tags=["nbval-ignore-output"]
plots.bars(buckets.column("setting"), buckets.column("step_ms"), ylabel="median time (ms)",
           title=f"one DDP step on rank 0 of {s.n_processes} (measured)")

# %% [markdown]
# What to read in it. `no_sync` always pays: the accumulated step communicates once instead of once per
# micro-batch. Buckets pay where the link is slow next to the compute: between nodes over the network, GPUs
# on PCIe, CPUs.

# %% tags=["exact-settings"]
links = dp.network_effects(buckets)
link_rows = [r for r in buckets if r.get("bucket_cap_mb")]
link_steps = [r["step_ms"] for r in link_rows]
most_hidden = max(r["hidden"] for r in link_rows)
profile.explain(
    gpu=f"Between the GPUs of one node the all-reduce of every gradient alone took {links['allreduce']:.1f} ms, "
        f"the forward and backward alone {links['compute']:.1f} ms, and the steps of every bucket row ran in "
        f"{min(link_steps):.1f}–{max(link_steps):.1f} ms. {dp.describe_bucket_layouts(buckets)} "
        + (f"The `hidden` column is at most {most_hidden:.2f}: overlapping saved nothing here, the steps were no "
           "shorter than compute and all-reduce one after the other "
           f"({links['compute'] + links['allreduce']:.1f} ms); the all-reduce is small enough next to the step "
           "that this costs little."
           if most_hidden <= 0 else f"Overlapping saved at most {min(most_hidden, 1):.0%} of the all-reduce.")
        + " The claim below checks this on your GPUs.",
    cpu="With two processes sharing two cores, DDP's copies of the gradients into its buckets and the noise of "
        "the shared cores are as large as what the overlap saves: the bucket rows change from one run to the "
        "next, and not always in the same order, so the claim about buckets is checked on GPUs only. "
        f"{dp.describe_bucket_layouts(buckets)}")

# %% [markdown]
# ### Over a network
#
# You can see the network case on one node: tell NCCL to leave its fast links alone and talk over TCP
# sockets on the loopback interface, as it would between two nodes without InfiniBand:
# `NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo`
# (`dp.SOCKET_ENV`). The job below times the same rows with these variables set, on an MLP whose compute
# and all-reduce are of one order there. Two rows are new: the all-reduce alone in bf16, and the smallest
# buckets with DDP's **communication hook** `bf16_compress_hook`, which sends the gradients in bf16 (half
# the bytes) and puts the averaged gradients back into fp32. The cost: the sum is rounded to bf16's 8 bits
# of mantissa.

# %% tags=["nbval-ignore-output"]
if s.network:
    network_job = coursekit.submit_function(dp.bucket_overlap, n_gpu=s.n_processes, name=labs.job_name(pseudo, "net"),
                                            **{**s.job, "env": {**s.job["env"], **s.network["env"]}},
                                            **s.network["buckets"])
    print(f"job {network_job.job_id}: the same over TCP sockets; waiting for its timings ...", flush=True)
    network = dp.bucket_table(network_job.results(timeout=s.timeout_s))
else:
    print("gloo, the CPU backend, talks over TCP already: the table above is the network case.")
    network = buckets
network

# %% tags=["nbval-ignore-output"]
effects = dp.network_effects(network)
print(f"compute alone {effects['compute']:.1f} ms, all-reduce alone {effects['allreduce']:.1f} ms "
      f"(bf16: {effects['allreduce_bf16']:.1f} ms)")
print(f"one bucket {effects['one_bucket']:.1f} ms, best smaller buckets {effects['best_buckets']:.1f} ms: "
      f"{effects['saved_ms']:.1f} ms faster")
print(f"of the all-reduce, the best buckets hid {effects['hidden_ms']:.1f} ms (the table's hidden share); "
      f"an overlap can hide at most the backward's part of the {effects['compute']:.1f} ms of forward + backward")
print(dp.describe_saving(effects))
print(f"smallest buckets with bf16 compression: {effects['compressed']:.1f} ms")
plots.bars(network.column("setting"), network.column("step_ms"), ylabel="median time (ms)",
           title=f"one DDP step on rank 0 of {s.n_processes}, {network[0]['transport']} (measured)")

# %% [markdown]
# What to read in it: over sockets the all-reduce is no longer a small part of a step. Smaller buckets
# make a step faster than one bucket for two reasons: they hide part of the all-reduce behind the backward
# pass (`hidden` above 0), and they avoid one bucket's own extra cost where it has one (its `hidden` below 0:
# the step took longer than compute and all-reduce one after the other; the lines above split the saving
# between the two).
# bf16 compression halves what is left to send;
# its row's `hidden` is against the bf16 all-reduce alone.

# %% tags=["exact-settings"]
profile.explain(cpu="On the CPU (gloo) compression saves less than half, or nothing: gloo converts and sums bf16 in "
                    "software, and two shared cores are noisy, so the claims below are checked on GPUs.")

# %% [markdown]
# ## 6. Scaling: strong and weak, from one sweep
#
# **Weak scaling** keeps the batch per GPU: N GPUs process N times more images per step, and ideally
# N times more images per second. **Strong scaling** keeps the global batch: each GPU gets 1/N of it,
# its kernels get smaller and the communication stays the same — efficiency drops sooner. One sweep
# gives both: every per-GPU batch on every GPU count (`submit_sweep(configs, n_gpu=[...])`, like
# `gpu_jobs_submitter(commands, n_gpu=[1, 2, 4, 8])`). Speed-up = images/s ÷ images/s on one GPU;
# efficiency = speed-up ÷ number of GPUs.
#
# **One sweep per team.** The whole sweep on 1, 2, 4 and 8 GPUs costs about 1.5 GPU-hours: a room of 20
# would need the partition for three times the lab's slot. So a team of four runs it once: each member
# runs one row (one per-GPU batch on every GPU count) and posts it to the team's shared results; everyone
# then reads the whole team's table. Set `my_team` to the team name the instructor gave you. Left at
# `None`, you are a team of one and run every row yourself (what a participant alone does).

# %% tags=["exact-counts"]
my_team = None  # your team's name from the instructor, e.g. "red"; None: run the whole sweep yourself
n_gpus = dp.usable_gpu_counts(s.n_gpus, site)
batches = dp.scaling_batches(n_gpus, s.batch_per_gpu, s.global_batch)
part = dp.take_part(my_team, pseudo, batches, n_gpus, s.team_size)
print(part)
configs = [s.scaling_base.replace(batch_size=b) for b in part.my_batches]
print(f"{len(configs)} per-GPU batch(es) {part.my_batches} x GPU counts {n_gpus} = {len(configs) * len(n_gpus)} runs")

# %% [markdown] tags=["exercise"]
# ### Predict, then run
#
# Before the sweep runs: with the same batch on each GPU, how many times more **images per second** will
# 2 GPUs process than 1? Replace the two placeholder lines below with your
# guess, a number, in `my_guess` (or `my_guess = None`, which shows a box to type it in). The tables after
# the sweep set it beside the measurement.

# %% tags=["exact-settings"]
profile.explain(cpu="On a CPU the \"GPUs\" are processes: guess how many times more images per second 2 processes "
                    "process than 1.")

# %% tags=["exercise", "nbval-ignore-output"]
### BEGIN SOLUTION
my_guess = 1.8
### END SOLUTION
labs.predict("weak_speedup_2", "How many times more images per second will 2 GPUs process than 1, at the same "
             "batch per GPU?", unit="×", value=my_guess)

# %% tags=["nbval-ignore-output"]
# one at a time where jobs would share processors: the CPU, or the GPUs of one machine (local site); in the
# CPU one job per GPU count makes its runs one after the other (torch is imported once per process)
sweep = labs.run_sweep(configs, name=labs.job_name(pseudo, "scale"), n_gpu=n_gpus, one_job=profile.is_cpu,
                       one_at_a_time=profile.is_cpu or site.is_local, **s.job, timeout_s=s.timeout_s,
                       title="scaling sweep")
print(f"posted {dp.post_part(part, pseudo, sweep)} run(s) to the team's results")
print(labs.energy_note(sweep) or "energy per image (all GPUs of a run together): in the table below")
sweep.with_columns("n_gpu", "batch_size", "state", "images_per_s_median", *dp.energy_columns(sweep), "step_time_s")

# %% [markdown]
# The team's table: your rows and those your team posted so far. A row not posted yet is named below the
# table; run this cell again when your teammates are done.

# %% tags=["nbval-ignore-output"]
team_sweep, not_yet = dp.team_table(part, title=f"scaling sweep of {part.team}")
for note in not_yet:
    print(note)
strong, weak = dp.scaling_tables(team_sweep, s.batch_per_gpu, s.global_batch)
unit = "GPUs" if profile.is_gpu else "CPU processes"
dp.scaling_figure(strong, weak, unit=unit, title=f"scaling over {unit} (measured here)")

# %% tags=["nbval-ignore-output"]
pairs = dp.weak_pairs(team_sweep)  # 2 GPUs against 1 at every batch per GPU the sweep ran on both
display(dp.rich(strong, note=f"measured here, {unit}"), dp.rich(weak, note=f"measured here, {unit}"),
        dp.rich(pairs, note=f"measured here, {unit}; step times in ms, extra_ms = what 2 add to a step"))

# %%
# 2 against 1 at the same batch per GPU, when the team posted both runs
weak_two = next((r for r in weak if r["n_gpu"] == 2), None) if any(r["n_gpu"] == 1 for r in weak) else None
labs.reveal("weak_speedup_2", weak_two["speedup"] if weak_two else None)

# %% [markdown]
# **Two nodes.** On a cluster the same two processes can sit on two nodes (one task per node): the
# all-reduce then crosses the network between them instead of staying inside one machine.

# %% tags=["exact-settings"]
profile.explain(gpu=dp.two_node_text(n_gpus, site),
                cpu="On Slurm one extra job runs the weak-scaling configuration on 2 nodes (when the cluster has two).")

# %% tags=["nbval-ignore-output"]
two_nodes = dp.two_node_options(site) if profile.is_cpu else None
posted = {r["n_gpu"] for r in weak}
if two_nodes is None:
    print("no separate 2-node job here (one machine, or the sweep's 8-GPU jobs already span nodes)")
elif not {1, 2} <= posted:
    print(f"the weak-scaling table has no run on {', '.join(str(n) for n in sorted({1, 2} - posted))} process(es) "
          "yet (see the notes above the table): run the sweep's cells, then this one, again")
else:
    across = labs.run_sweep([s.scaling_base.replace(batch_size=s.batch_per_gpu)], name=labs.job_name(pseudo, "nodes"),
                            **two_nodes, **s.job, timeout_s=s.timeout_s)
    one_node = weak.one(n_gpu=2)
    display(labs.ResultsTable([
        {"processes": 2, "nodes": 1, "img_s": one_node["img_s"], "efficiency": one_node["efficiency"]},
        {"processes": 2, "nodes": 2, "img_s": across[0]["images_per_s_median"],
         "efficiency": across[0]["images_per_s_median"] / (2 * weak.one(n_gpu=1)["img_s"])}],
        title=f"weak scaling at batch {s.batch_per_gpu} per process: one node vs two"))

# %% [markdown]
# ### Where the time of a step goes, 1 GPU against 2
#
# The engine times every step in two parts (rank 0, medians over the timed windows): **waiting between
# steps** (the GPU idle until the next batch is on it and the host has launched its work) and **batch on
# the GPU to the step's end**, which holds the backward pass, the gradient all-reduce and any wait for the
# other rank: a collective ends only when both ranks arrived, so the faster one waits for the slower. With
# the same batch per GPU, the computation is the same at 1 and 2 GPUs; what 2 GPUs add is the extra below.
# The all-reduce of this model's gradients alone is estimated from section 5's measurement (ms per MB over
# the node's links). The rest of the extra time is waiting for the other rank and DDP's own work (its
# hooks, its copies into buckets, NCCL's kernels sharing the GPU): this lab does not separate them.

# %% tags=["nbval-ignore-output"]
split = dp.step_split(weak, dp.allreduce_ms_per_mb(buckets))
print(dp.describe_split(split))

# %% tags=["exact-settings"]
strong_most = strong[-1] if len(strong) > 1 and strong[-1].get("efficiency") else None
profile.explain(
    gpu="What the loss depends on. The all-reduce over NVLink is a fraction of a millisecond; the rest of the loss "
        "is waiting for the other rank and DDP's own work. The waiting: every step ends when the slower of the two "
        "ends, and each rank's step "
        "varies with its host (the CPU that launches its kernels, the other jobs on that host). So the same "
        "2-GPU job scales less well while the machine's other GPUs are busy than on an otherwise idle machine: "
        f"on a shared cluster, your neighbours are part of your efficiency. The claim below asks for at least "
        f"{dp.WEAK_EFFICIENCY_MIN:g} at {s.batch_per_gpu} images per GPU, leaving room for a busy host. "
        f"{dp.extra_time_text(pairs)} Strong scaling loses more"
        + (f" ({strong_most['efficiency']:.2f} on {strong_most['n_gpu']} GPUs in the strong-scaling table above)"
           if strong_most else "")
        + ": half the batch per GPU does not halve a step, since parts of it do not shrink with the batch "
        "(launching its kernels, the all-reduce, the extra time 2 GPUs add); the recorded run below shows where "
        "that ends.",
    cpu="These \"GPUs\" are processes sharing two cores: two processes do not get more arithmetic, they only add "
        "the cost of talking to each other. What you see is **overhead, not speed-up**. What data parallelism "
        "gives on real GPUs was recorded with ResNet-50 in bf16 over NCCL, on the machine named in the title "
        "below; the JSC course reports, for comparison, 1 GPU 1 h 32 min → 4 GPUs 25 min → 8 GPUs on 2 nodes "
        "14 min (efficiency ≈ 0.92 and 0.82).")

# %% tags=["nbval-ignore-output"]
recording = labs.load_recording("ddp_gpu")
recorded = dp.recorded_scaling_tables(recording) if recording else None
if recorded is not None:
    print(dp.describe_recording(recording))
    display(dp.scaling_figure(*recorded, title=dp.describe_recording(recording) + " (recorded)"))
    for table in (*recorded, dp.recorded_busbw_table(recording)):
        if table is not None:
            display(dp.rich(table, note="recorded earlier on GPUs, not measured by this notebook"))

# %% [markdown]
# **Why were 4 GPUs slower than 2 in the recorded strong-scaling run?** The global batch stays 256, so each
# of 4 GPUs gets 64 images. In that recording a step at 256 images per GPU took 64 ms, at 128 images 49 ms,
# at 64 images 55 ms: halving the batch no longer halves the step, because at 64 images a ResNet-50 step is
# too small to fill an H100 (the host's launching of its hundreds of kernels and the fixed costs of a step
# take as long as the arithmetic), while each step still all-reduces the whole 100 MB of gradients and
# waits for the slowest of 4 ranks. Strong scaling ends where a GPU's share of the batch stops filling it.

# %% [markdown]
# ## 7. Reading NCCL's mind
#
# With `NCCL_DEBUG=INFO` in a job's environment, NCCL writes, while it sets up a communicator, which
# **rings** and **trees** it built over the ranks and which **transport** each link uses: `P2P` (GPU
# to GPU over NVLink or PCIe), `SHM` (through host memory, when peer access is not possible — older NCCL
# versions fell back to it when each task saw only its own GPU), `NET` (InfiniBand or sockets, between
# nodes). `dp.parse_nccl_log` reads it.

# %% tags=["exact-settings"]
profile.explain(
    gpu="The job below runs the ranks script again with `NCCL_DEBUG=INFO` and reads its log: check which transport "
        "your GPUs use, as NCCL's version and your cluster decide it.",
    cpu="gloo on a CPU writes nothing of the kind, so here we read an example written in NCCL's format (2 GPUs of one "
        "node joined by NVLink) and, when the benchmark recorded them, the real logs of a 2-GPU machine with every "
        "task seeing the node's GPUs (`node` binding, coursekit's default for multi-GPU jobs) and with each task "
        "seeing only its own (`task` binding). Read the transports: on that machine NCCL 2.28 found GPU-to-GPU links "
        "(P2P through CUDA memory handles) with either binding — check yours, as its version and your cluster may "
        "differ.")

# %% tags=["nbval-ignore-output"]
if profile.is_gpu:
    env = {**s.job["env"], **s.nccl_env}
    (nccl_job,) = coursekit.submit_jobs(s.scripts["ranks"], n_gpu=s.n_processes, name=labs.job_name(pseudo, "nccl"),
                                        time_max=s.job["time_max"], env=env)
    nccl_job.wait(s.timeout_s)
    nccl_log = [nccl_job.tail(5000, stream=stream, rank=r, raw=True)
                for r in range(s.n_processes) for stream in ("out", "err")]
    print("measured: the NCCL lines of the job's logs")
else:
    nccl_log = dp.EXAMPLE_NCCL_LOG
    print("example: what 2 GPUs on one node would print (no NCCL on this CPU)")
nccl = dp.parse_nccl_log(nccl_log)
print(nccl)
for binding, text in (dp.recorded_nccl_logs(recording) if recording and profile.is_cpu else {}).items():
    print(f"\nrecorded by the benchmark with {binding} binding ({dp.describe_recording(recording)}):")
    print(dp.parse_nccl_log(text))

# %% [markdown]
# ## 8. The claims, checked on what was just measured

# %%
first = equivalence[0]
local_accs = equivalence.column("local_acc")
no_sync_rows = {r["no_sync"]: r["step_ms"] for r in buckets if r.get("no_sync") is not None}
bucket_steps = [r["step_ms"] for r in buckets if r.get("bucket_cap_mb")]
allreduce_alone = next(r["step_ms"] for r in buckets if r["setting"].startswith("all-reduce only"))
network_holds = dp.network_claims(buckets, network)
ms_per_mb = {"links": dp.allreduce_ms_per_mb(buckets), "net": dp.allreduce_ms_per_mb(network)}
strong_last = strong[-1] if len(strong) else {"speedup": None, "n_gpu": None}  # a team's rows may be missing
NO_SYNC_VISIBLE = 0.05  # no_sync's saving is measurable when the all-reduce is at least this share of a step
# efficiency on 2 GPUs, against the 1-GPU run of the same row (both posted: a team's rows may be missing)
weak_two = next((r for r in weak if r["n_gpu"] == 2), None) if any(r["n_gpu"] == 1 for r in weak) else None
split_holds = dp.split_claims(split)
verdicts = [
    labs.check_claim(
        f"{first['world_size']} DDP processes give the weights of one process on the global batch (max |dw| <= {s.tolerance:g})",
        max(equivalence.column("max_abs_dw")) <= s.tolerance,
        f"max |dw| = {max(equivalence.column('max_abs_dw')):.1e} after {first['steps']} steps"),
    labs.check_claim(
        "without set_epoch every epoch sees the same order; with it, a new one",
        dp.same_order_every_epoch(without) and not dp.same_order_every_epoch(with_set_epoch),
        f"{s.sampler['epochs']} epochs, {s.sampler['world_size']} ranks"),
    labs.check_claim(
        "an un-averaged metric differs between ranks; the all-reduced average equals the global one",
        len(set(local_accs)) > 1 and all(abs(r["averaged_acc"] - r["global_acc"]) < 1e-6 for r in equivalence),
        f"local {local_accs}, averaged {first['averaged_acc']:.4f}, global {first['global_acc']:.4f}"),
    labs.check_claim(
        "the converted script passes every check (same weights, set_epoch, rank-0 checkpoint, averaged metric)",
        report.ok, report.headline()),
    labs.check_claim(
        "with gradient accumulation, no_sync makes an optimizer step cheaper than syncing every micro-batch",
        no_sync_rows[True] < no_sync_rows[False],
        f"{no_sync_rows[False]:.0f} ms -> {no_sync_rows[True]:.0f} ms per optimizer step",
        applies=profile.is_gpu and allreduce_alone >= NO_SYNC_VISIBLE * min(bucket_steps),
        why_not=("on two shared CPU cores a busy neighbour moves these steps by more than no_sync saves (the table "
                 "above has both)" if profile.is_cpu else
                 f"the all-reduce alone is under {NO_SYNC_VISIBLE:.0%} of a step here, so what no_sync saves is "
                 "within the noise (the table above has the measured steps)")),
    labs.check_claim(
        f"between GPUs of one node the all-reduce alone is under {dp.LINKS_ALLREDUCE_SHARE:.0%} of a step, and the "
        f"bucket rows' steps are within {dp.LINKS_SPREAD:.0%} of each other (measured: how many buckets each cap "
        "gave, and the most any row hid)",
        *dp.links_claim(buckets),
        applies=profile.is_gpu,
        why_not="on two shared CPU cores DDP's copies into its buckets and the noise outweigh the overlap (above)"),
    labs.check_claim(
        f"over TCP sockets an all-reduce costs at least {dp.SOCKETS_SLOWER:g}x more per MB than over the node's own "
        "links", network_holds["sockets_slower"],
        f"{ms_per_mb['net']:.3g} ms/MB over sockets, {ms_per_mb['links']:.3g} ms/MB over the node's links",
        applies=profile.is_gpu, why_not="gloo on a CPU talks over TCP in both tables: there is one link here"),
    labs.check_claim(
        f"over sockets, smaller buckets make a step faster than one bucket by at least {dp.OVERLAP_SHARE:.0%} of "
        "the smaller of compute and all-reduce alone", network_holds["buckets_faster"],
        f"one bucket {effects['one_bucket']:.1f} ms, best buckets {effects['best_buckets']:.1f} ms: "
        f"{effects['saved_ms']:.1f} ms faster, against {dp.OVERLAP_SHARE:.0%} of "
        f"{effects['overlap_room_ms']:.1f} ms",
        applies=profile.is_gpu,
        why_not="on two shared CPU cores DDP's copies into its buckets and the noise outweigh the overlap (above)"),
    labs.check_claim(
        f"bf16 compression halves the bytes: over sockets the bf16 all-reduce takes at most {dp.BF16_TIME:g}x the "
        "time of the fp32 one", network_holds["bf16_halves"],
        f"{effects['allreduce_bf16']:.1f} ms in bf16 against {effects['allreduce']:.1f} ms in fp32",
        applies=profile.is_gpu, why_not="gloo sums bf16 in software on the CPU: not what a GPU's network shows"),
    labs.check_claim(
        f"two GPUs at {s.batch_per_gpu} images per GPU scale with an efficiency of at least "
        f"{dp.WEAK_EFFICIENCY_MIN:g} (weak scaling; it moves with the host's load)",
        split_holds["efficiency"],
        (f"efficiency {weak_two['efficiency']:.3f}" if weak_two and weak_two.get("efficiency") else "no 2-GPU row")
        + dp.other_weak_pairs(pairs, s.batch_per_gpu),
        applies=profile.is_gpu and split is not None,
        why_not=("processes on CPU cores, not GPUs" if profile.is_cpu else
                 "the team's 1- and 2-GPU runs at this batch are not both posted yet: re-run the team's table")),
    labs.check_claim(
        f"the all-reduce alone is under {dp.ALLREDUCE_SHARE:.0%} of the extra time a step takes at 2 GPUs; the rest "
        "is waiting for the other rank and DDP's own work (not separated here)", bool(split_holds["allreduce_minor"]),
        f"all-reduce alone {split['allreduce']:.2f} ms of {split['extra']:+.1f} ms a step"
        if split and split["allreduce"] is not None else "-",
        applies=profile.is_gpu and split_holds["allreduce_minor"] is not None, strict=False,
        why_not="processes on CPU cores, not GPUs" if profile.is_cpu else
        "no visible extra time per step at 2 GPUs, or no split: nothing to explain"),
    labs.check_claim(
        "the extra time at 2 GPUs is in the step's compute part (all-reduce, waiting for the other rank), not in "
        "waiting between steps", bool(split_holds["in_compute"]),
        f"compute {split['extra_compute']:+.1f} ms, waiting between steps {split['extra_data']:+.1f} ms"
        if split else "-",
        applies=profile.is_gpu and split_holds["in_compute"] is not None, strict=False,
        why_not="processes on CPU cores, not GPUs" if profile.is_cpu else
        "no visible extra time per step at 2 GPUs, or no split: nothing to explain"),
    labs.check_claim(
        "NCCL's log shows the ranks linked GPU to GPU or through host memory (P2P or SHM)",
        bool(nccl.transports.keys() & {"P2P", "SHM"}), f"transports {dict(nccl.transports)}",
        applies=profile.is_gpu, why_not="no NCCL in this profile (the example above shows what it prints)"),
]

# %% [markdown]
# ## 9. Exit ticket
#
# Four questions on what *you* measured above: the answers are in your own tables, not in a book; the fifth
# asks you to use one of your measurements on a model you did not run.
# A question whose measurement is missing here (a team's row not posted yet, energy on a CPU) is shown
# but not counted. Write your answers in the cell after the next one, run it, and your score is saved for
# the instructor.

# %%
weak_one = next((r for r in weak if r["n_gpu"] == 1), None)
joules = [r.get("energy_per_image_j") for r in (weak_one, weak_two) if r is not None]
energy_ratio = None  # 2 GPUs' energy per image over 1 GPU's: only where both runs measured it (GPUs)
if len(joules) == 2 and None not in joules and joules[0]:
    energy_ratio = joules[1] / joules[0]
most = f" ({strong_last['n_gpu']})" if strong_last.get("n_gpu") else ""
ticket = labs.exit_ticket("06", {
    "weak_speedup_2": labs.Question("In your weak-scaling table, how many times more images per second did 2 GPUs "
                                    "process than 1?", weak_two["speedup"] if weak_two else None,
                                    unit="×", rel_tol=0.1),
    "strong_efficiency": labs.Question(f"In your strong-scaling table, what was the efficiency on the most GPUs{most}?",
                                       strong_last.get("efficiency"), rel_tol=0.1, abs_tol=0.02),
    "same_weights": labs.Question("Did the DDP processes end with the weights of one process trained on the global "
                                  "batch (yes or no)?",
                                  "yes" if max(equivalence.column("max_abs_dw")) <= s.tolerance else "no",
                                  choices=("yes", "no")),
    "energy_ratio": labs.Question("In your weak-scaling table, how many times the energy per image of 1 GPU did 2 "
                                  "GPUs use (2 GPUs' energy per image ÷ 1 GPU's; under 1: 2 GPUs used less)?",
                                  energy_ratio, unit="×", rel_tol=0.05),
    "allreduce_1b": labs.Question("A model of 1 billion parameters has 4 × 10⁹ bytes of fp32 gradients. At the cost "
                                  "per MB (MB = 2²⁰ bytes) of the all-reduce alone that you measured over the node's "
                                  "own links in section 5, how many ms would one all-reduce of its gradients take?",
                                  4e9 / dp.MB * ms_per_mb["links"], unit="ms", rel_tol=0.1, computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"weak_speedup_2": ..., "strong_efficiency": ..., ...}` in place of the two
# placeholder lines: numbers (or a choice, as the question writes it) you read in your tables above, and the
# number you computed. A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"weak_speedup_2": weak_two["speedup"] if weak_two else None,
           "strong_efficiency": strong_last.get("efficiency"),
           "same_weights": "yes" if max(equivalence.column("max_abs_dw")) <= s.tolerance else "no",
           "energy_ratio": energy_ratio,
           "allreduce_1b": 4e9 / 2**20 * dp.allreduce_ms_per_mb(buckets)}  # bytes in MB x ms per MB over the links
### END SOLUTION
graded = ticket.grade(answers)
if energy_ratio:  # what the energy answer means (GPUs only: energy is measured there)
    print(dp.energy_reading(energy_ratio, weak_two.get("efficiency")))
