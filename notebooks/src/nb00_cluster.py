"""Notebook 00: the cluster from the notebook — submit, watch, read, cancel, sweep."""

# %% [markdown]
# # 00 — The cluster from the notebook
#
# **Learning goals.** After this notebook you can
#
# 1. check that your environment can reach the GPUs (or, off a cluster, your own machine);
# 2. submit a training job from a notebook, and know where its script, logs and metrics live;
# 3. follow jobs in the queue, read their logs and their metrics, and cancel one;
# 4. submit a small sweep of jobs in one call, then compare them on one plot.
#
# Every lab after this one works the same way: the notebook prepares runs of the course's training
# engine (`python -m coursekit.train`), submits them as jobs through `coursekit`, and reads back what
# they measured. On a cluster the jobs go to Slurm; on a laptop or a plain JupyterHub they run as local
# processes. The notebook's code is the same in both cases.

# %% [markdown]
# ## 1. Your pseudonym
#
# Your jobs share the queue with everybody else's. Choose a pseudonym of at most five lower-case
# letters or digits: it starts the name of every job you submit, so you (and the instructor) can find
# yours. Put yours in the cell below, in place of `"ada"`: it is remembered, and the next labs use it
# (`labs.choose_pseudonym()`).

# %%
# %matplotlib inline
from collections import Counter

import coursekit
from coursekit import labs
from coursekit.labs import lab00_cluster
from coursekit.labs.kit import failures, plots

pseudo = labs.choose_pseudonym("ada")  # <- put yours here
profile = labs.choose_profile()
print(profile)
s = profile.settings("00")

# %% tags=["exact-settings"]
try:  # what a pseudonym that does not fit looks like
    labs.choose_pseudonym("Ada Lovelace")
except ValueError as error:
    print("not a pseudonym:", error)

# %% [markdown]
# ## 2. The doctor
#
# `coursekit doctor` (here as a function) checks Python, torch, the GPUs, the course folder and the site
# profile; on a Slurm site also Slurm's commands, the controller, accounting and your partition. Every
# line says what to fix when something is wrong. Off a cluster a missing GPU is only a warning.

# %% tags=["nbval-ignore-output"]
from coursekit.doctor import doctor

ready = doctor()

# %%
print("ready to submit jobs:", ready)

# %% [markdown]
# ## 3. A first job
#
# A job runs one command. Ours is the training engine with a handful of options; `engine_command`
# writes the command for a configuration (only the options that differ from the defaults appear). As with
# `idr_pytools`' `gpu_jobs_submitter`, a command is what follows `python`: the job runs it with the Python of
# your environment, so in a terminal you would type `python` before it. Every lab prints its commands so.
# `s.job` holds the submission options: the time limit and, where the jobs run on a few shared CPU
# cores, one compute thread per job (`OMP_NUM_THREADS=1`), so that they take turns instead of getting in
# each other's way.

# %%
print(labs.engine_command(s.first_job))

# %% tags=["nbval-ignore-output"]
(job,) = coursekit.submit_jobs(labs.engine_command(s.first_job), n_gpu=1, name=labs.job_name(pseudo, "first"),
                               **s.job)
print(job)
print("its folder:", job.folder)
print("its sbatch script:", job.submission_script.name if job.submission_script.exists() else "none (not on Slurm)")

# %% [markdown]
# `submit_jobs` returned at once with a handle on the job. Its folder (`jobs/<name>/<job id>/` in the
# course folder) keeps the logs (`<id>_0_log.out` and `.err`) and the engine's `metrics.jsonl`; on a
# Slurm site also the sbatch script Slurm ran (`<id>_submission.sh`). On the local site there is no
# sbatch script: submitit keeps the command it runs in `<id>_submitted.pkl` and its result in
# `<id>_0_result.pkl`. Nothing is ever overwritten: a new job gets a new folder.
#
# ## 4. Watching the queue
#
# `display_slurm_queue(name)` shows your jobs with their state, the time they have run, the node, their
# progress (read from their metrics) and the last line of their log. It returns at once and refreshes
# itself in the background until the jobs have ended: you can keep working meanwhile.

# %% tags=["nbval-ignore-output"]
view = coursekit.display_slurm_queue(name=labs.job_name(pseudo, "first"))

# %%
print("final state:", job.wait(timeout=s.timeout_s))
failed = failures.report_failures([job])  # a failed job: its state, the last lines of its stderr, what to do

# %% [markdown]
# ## 5. Logs and metrics
#
# `job.tail(n)` gives the last lines of the job's standard output (`stream="err"` for its errors).
# `search_log(name)` finds the log files of every job with that name, as idr_pytools does — with job
# ids matched exactly.

# %% tags=["nbval-ignore-output"]
print(job.tail(4))

# %% tags=["nbval-ignore-output"]
logs = coursekit.search_log(name=labs.job_name(pseudo, "first"), with_err=True)
logs

# %% tags=["exact-counts"]
print(f"{len(logs['stdout'])} stdout and {len(logs['stderr'])} stderr file(s)")

# %% [markdown]
# The metrics are JSON lines, one record per line: a `start` record, one `step` record per optimiser
# step (loss, learning rate, images/s, time waiting for data, compute time, ...), one `epoch` record per
# epoch (training and validation loss and accuracy) and a final `summary`.

# %% tags=["exact-counts"]
records = job.metrics()
print(Counter(record["kind"] for record in records))

# %% tags=["nbval-ignore-output"]
run = labs.summarize_run(records)
print(f"status {run['status']}, validation accuracy {run['val_acc']:.3f}, {run['total_time_s']:.1f} s in all")
print(f"{run['images_per_s']:,.0f} images/s: the images of the steps after the first five, divided by the wall time "
      f"they took (the windows between two step records spread ± {run['images_per_s_std']:,.0f})")
for epoch in run["epochs"]:
    print(f"epoch {epoch['epoch']}: {epoch['images_per_s_global']:,.0f} images/s over {epoch['epoch_time_s']:.1f} s, "
          f"counted from the epoch's start")

# %% [markdown]
# Both numbers divide images by seconds, over different stretches of time. An epoch's rate counts from
# the epoch's start: the loader's first batch (starting its worker processes) and, in the first epoch,
# the warm-up steps (memory allocation, the choice of the fastest kernels) are in it. The summary's rate
# covers every measured step: all the steps after the first five (the warm-up), in every epoch, the rest
# of the first one included, their images divided by the time they spent waiting for data and computing
# (the gaps between epochs, such as the validation, left out). So the summary's rate is normally the
# highest, and the first epoch, which pays the warm-up, normally the slowest. What one more epoch would
# add is about the last epoch's rate: it pays an epoch's start as the next one would (on a busy machine
# another program's work can slow any stretch of time).

# %%
figure, ax = plots.new_figure()
ax.plot([r["step"] for r in run["steps"]], [r["loss"] for r in run["steps"]])
ax.set_yscale("log")  # the loss falls by factors: a log axis shows the late steps as well as the first ones
ax.set_xlabel("step")
ax.set_ylabel("training loss (log scale)")
ax.set_title("the first job")
figure

# %% [markdown]
# ## 6. Cancelling a job
#
# A job that is not needed any more should leave the queue (and free its GPUs for the others). We
# submit a long run, wait until it has really started training, and cancel it.

# %% tags=["nbval-ignore-output"]
(long_job,) = coursekit.submit_jobs(labs.engine_command(s.long_job), name=labs.job_name(pseudo, "long"),
                                    **s.job)
print("steps done before cancelling:", labs.wait_until_training(long_job, timeout_s=s.timeout_s))
long_job.cancel()

# %%
print("state after cancel:", long_job.wait(timeout=s.timeout_s))

# %% [markdown]
# ## 7. A sweep in one call
#
# `gpu_jobs_submitter` takes a list of commands (and, if you like, a list of GPU counts) and submits
# every combination, exactly like idr_pytools' function of the same name; it returns the job ids. Here:
# the same run at three learning rates. On Slurm the three jobs go in as one job array.

# %% tags=["exact-counts"]
configs = [s.first_job.replace(lr=lr) for lr in s.sweep_lrs]
commands = [labs.engine_command(config) for config in configs]
job_ids = coursekit.gpu_jobs_submitter(commands, n_gpu=1, name=labs.job_name(pseudo, "lr"), **s.job)
print(len(job_ids), "jobs submitted")

# %% tags=["nbval-ignore-output"]
view = coursekit.display_slurm_queue(name=labs.job_name(pseudo, "lr"))

# %% [markdown]
# The ids are all we need: `get_job(id)` gives the handle back (also after a kernel restart — the
# course folder keeps a registry of your jobs). `labs.collect` waits for the jobs and turns their metrics
# into one results table: one row per job, the options that differ between the runs first.

# %% tags=["nbval-ignore-output"]
jobs = [coursekit.get_job(job_id) for job_id in job_ids]
table = labs.collect(jobs, configs, timeout_s=s.timeout_s, title="learning-rate sweep")  # a bar while it waits

# %%
print("states:", table.column("state"))
failed = failures.report_failures(table, "the learning-rate sweep")

# %% tags=["nbval-ignore-output"]
table.with_columns("lr", "job_id", "state", "val_acc", "val_loss", "images_per_s", "total_time_s")

# %% tags=["nbval-ignore-output"]
# one job of the sweep has the first job's settings, seed included: the two differ by chance alone
repeat = next((row for row, config in zip(table, configs, strict=True) if config == s.first_job), None)
if repeat is not None and None not in (repeat["val_acc"], run["val_acc"]):
    print(lab00_cluster.repeat_note(run["val_acc"], repeat["val_acc"], repeat["lr"], profile.is_gpu))
if labs.jobs_share_gpus():  # a single machine: every job of the sweep on its one GPU, at once
    profile.explain(gpu=lab00_cluster.sharing_note(run["images_per_s"], table.column("images_per_s")))

# %%
figure, (left, right) = plots.new_figure(ncols=2)
plots.curves(table, "steps", "step", "loss", ["lr"], ax=left, title="training loss (log scale)")
# a log axis shows the fall and, in the first steps, the spikes of the larger lrs (the default 0.1 too: the loss can
# jump several-fold, 0.5's more, as the runs start at full lr with no warm-up; lab 07 adds one)
left.set_yscale("log")
plots.curves(table, "epochs", "epoch", "val_acc", ["lr"], ax=right, title="validation accuracy")
figure

# %% [markdown] tags=["exercise"]
# ### Exercise — read the best job's log
#
# Find the row of `table` with the highest validation accuracy, get its job back with
# `coursekit.get_job`, and store the last three lines of its standard output in `best_tail`.

# %% tags=["nbval-ignore-output", "exercise"]
### BEGIN SOLUTION
best = max(table, key=lambda row: row["val_acc"])
best_tail = coursekit.get_job(best["job_id"]).tail(3)
### END SOLUTION
print(best_tail)

# %% [markdown]
# ## 8. What just happened, checked

# %%
verdicts = [
    labs.check_claim("the first job completed and its metrics came back (start, steps, epochs, summary)",
                     job.state == "COMPLETED" and run["status"] == "completed" and len(run["epochs"]) == s.first_job.epochs,
                     f"{len(run['steps'])} step and {len(run['epochs'])} epoch records"),
    labs.check_claim("the cancelled job stopped early",
                     long_job.state == "CANCELLED" and labs.summarize_run(long_job.metrics())["status"] != "completed",
                     f"state {long_job.state}, {len(long_job.metrics())} records"),
    labs.check_claim("every job of the sweep completed and reported a validation accuracy",
                     all(state == "COMPLETED" for state in table.column("state")) and None not in table.column("val_acc"),
                     f"states {table.column('state')}"),
]

# %% [markdown]
# ## 9. Exit ticket
#
# Three questions on *your* jobs, whose answers are in the outputs above (the queue, the states, the sweep's
# table), and one to compute from what a job array does. The ticket is checked at once, and your score is
# saved for the instructor.

# %%
ticket = labs.exit_ticket("00", lab00_cluster.ticket_questions(job.job_id, long_job.state, table))
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"first_job_id": ..., "long_state": ..., "best_lr": ...,
# "array_minutes": ...}` in place of the two placeholder lines. A question you leave out counts as not
# answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"first_job_id": job.job_id, "long_state": long_job.state,
           "best_lr": max(table, key=lambda row: row["val_acc"] or 0)["lr"],
           "array_minutes": -(-12 // 4) * 10}  # 12 runs in waves of 4 GPUs: 3 waves of 10 minutes
### END SOLUTION
graded = ticket.grade(answers)
