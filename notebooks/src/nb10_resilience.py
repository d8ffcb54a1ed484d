"""Lab 10: when the cluster fights back — time limits, requeue and exact resume, a failure clinic, the GPU's work."""

# %% [markdown]
# # Lab 10 — When the cluster fights back
#
# **Learning goals.** After this lab you can
#
# 1. give a job less time than it needs and still finish: Slurm's pre-timeout signal, a checkpoint, the
#    requeue, the resume — and show that the resumed run is the run that was never stopped;
# 2. write the save and the resume of a training script yourself, and say what each forgotten piece costs
#    (the optimizer's momentum, the scheduler, the sampler's epoch, the random generators);
# 3. diagnose a broken distributed job from its logs: a rank that raises, collectives that do not match, a
#    rendezvous that cannot form, one rank out of memory — and know which of them hang and for how long;
# 4. watch what the GPU does while a job trains (utilisation, memory, power) and read its energy per image;
# 5. say which Python, torch and CUDA a job ran with, from your environment or from a container.
#
# The labs before this one made training fast. Alone on a cluster, the first week looks different: the job
# hits its time limit at 95 %, a preempted job starts again from zero, a 4-GPU job hangs with no error, the
# GPU sits at 30 % and nobody looks. This lab submits jobs that meet each of these on purpose.

# %%
# %matplotlib inline
import tempfile
from pathlib import Path

import coursekit
from coursekit import labs
from coursekit.labs.lab10_resilience import clinic, environment, gpu_view, resume, resume_check, transfer

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("10")
print(s)

# %% [markdown]
# ## 1. Submitted now, read while they run
#
# Two groups of jobs start now:
#
# - **the resumable run, twice**: a small training script that saves and resumes (the kit's copy of the script
#   you complete in section 4), once with a time limit shorter than it needs, once with time to spare (the
#   reference);
# - **the failure clinic**: four jobs of two ranks each, each broken its own way, labelled A–D in an order
#   dealt to you alone (your neighbour's A is not yours).
#
# Read sections 2 and 3 while they run.

# %% tags=["nbval-ignore-output"]
runs = resume.start_resume_runs(resume_check.SOLUTION, steps=s.resume_steps, checkpoint_every=s.resume_checkpoint_every,
                                time_max=s.resume_time_max, step_time=s.resume_step_time_s,
                                signal_after_s=s.resume_signal_after_s, device=s.resume_device,
                                extra_args=s.resume_args, name=labs.job_name(pseudo, "resume"), env=s.job["env"])
cases = clinic.submit_cases(pseudo, s.clinic, **s.job)  # jobs <you>-clinica ... <you>-clinicd
# section 7's job from your Python; on a GPU section 6's jobs need the GPU alone, and its last one serves instead
env_job = None if profile.is_gpu else coursekit.submit_jobs(labs.engine_command(s.env_config),
                                                           name=labs.job_name(pseudo, "env-venv"), **s.job)[0]
print(f"resumable run: job {runs.interrupted.job_id} (time limit {s.resume_time_max}), reference: job "
      f"{runs.reference.job_id}; clinic: " + ", ".join(f"{label} = job {job.job_id}" for label, job in cases.jobs.items()))

# %% [markdown]
# ## 2. What a time limit does to a job
#
# A Slurm job has a time limit (`#SBATCH --time`). When it is reached, Slurm ends the job, whatever it was
# doing. A job can ask to be warned first: `#SBATCH --signal=USR2@90` makes Slurm send the signal `SIGUSR2`
# 90 seconds before the end, or up to a minute earlier: Slurm handles such events once a minute. submitit,
# which the kit submits through, asks for it, and on the signal it does two things: it lets the job save
# its state, and it puts the job back in the queue (`scontrol requeue`). Slurm starts the requeued job again —
# often after a wait, as any job waits — and the job must then **resume** from what it saved instead of
# starting over. Preemption (a higher-priority job takes the node) works the same way.
#
# The script saves a checkpoint every few steps *and* when the signal arrives, at the end of the step it is
# in. What must a checkpoint hold so that the resumed run is the run that never stopped?
#
# | part of the state | forgotten, the resumed run ... |
# | --- | --- |
# | the model's weights | starts from random weights (the worst case, but at least it shows) |
# | the optimizer's state (SGD's momentum, Adam's moments) | takes its next steps without momentum: different weights |
# | the scheduler | restarts the warm-up and the decay: the wrong learning rate from then on |
# | the epoch and the position in it | sees an order of the data the uninterrupted run never saw |
# | the random generators | draws other dropout masks (and augmentations) |
# | the step counter | trains too long, or logs and saves at the wrong steps |
#
# None of these mistakes crashes. Each gives a run that trains, converges and is not the run you
# configured: the only way to see it is to compare with a run that was not stopped. That is what this lab
# does. One more rule: write the checkpoint to a temporary file and rename it (`os.replace`): a job killed in
# the middle of `torch.save` then leaves the previous checkpoint whole, never half of a new one.

# %% [markdown]
# ## 3. The resumed run against the uninterrupted one
#
# The cell waits for both jobs. The job's log says what happened: submitit caught the signal and requeued
# the job, which started again. A start that runs out of time once more is signalled and requeued again, so
# count the starts in the log.

# %% tags=["nbval-ignore-output"]
states = resume.follow_runs(runs, s.timeout_s)
print(states)
print("\n".join(resume.requeue_lines(runs)))  # submitit's own lines of the job's log

# %%
profile.explain(
    gpu="On this site's clock the signal came before the time limit: Slurm sends it the seconds the job asked for "
        "(`@90`, less for a short limit) before the end, give or take up to a minute, the kit's local site "
        f"{resume.LOCAL_SIGNAL_DELAY_S} s before it; the log's times above show when each start was stopped. The "
        "script saved at the end of its step and the requeued job resumed from there.",
    cpu="Here the notebook sent the signal itself a few seconds in, as Slurm's clock would near the time limit (a "
        "time limit of a few minutes would make you wait for it); the requeue and the second start are the site's own.")

# %% tags=["nbval-ignore-output"]
comparison = resume.compare_runs(runs)
print(f"started {comparison.starts} times, stopped by {', '.join(comparison.stop_signals)}, resumed at step "
      f"{', '.join(map(str, comparison.resumed_at))}")
comparison

# %% [markdown]
# The script stops on either of two signals. On Slurm it receives `SIGUSR2` itself, as every process of the
# job does. On the local site submitit's controller sends `SIGUSR2` to the job's task only; the task requeues
# the job and ends the script with `SIGTERM`, which the script also takes as "save and stop".
#
# Each row compares one part of the final state: the largest absolute difference between the resumed run
# and the reference. The scheduler, the random state and the data order must be equal; the weights and the
# optimizer state equal within a tolerance set below what any forgotten piece would move them (a forgotten
# scheduler or sampler epoch moves the weights by 0.3 or more).

# %% [markdown] tags=["exercise"]
# ## 4. Your turn: the save and the resume
#
# Your copy of `lab10_resilience/train_resume.py` is the script the jobs of section 1 ran, with two `TODO`s:
#
# 1. in `save_checkpoint`: put the model's, the optimizer's and the scheduler's `state_dict()`, the random
#    generators' states and the progress (epoch, position in the epoch, step) in one dict; `torch.save` it to a
#    temporary file, then `os.replace` it onto the checkpoint's path;
# 2. in `resume`: load it back into each of them, restore the generators, and return the progress.
#
# Fill in the TODOs, then set `my_script` to the path of your script. `labs.check_resume_script(my_script)`
# runs it without a stop, then stopped by the signal in the middle of an epoch, then once more to resume,
# and checks:
#
# - **run**: the script runs to its end, every time;
# - **saves**: the checkpoint holds every part of the state, written to a temporary file and renamed;
# - **resumes**: the second start continues at the step where the first stopped, not at step 0;
# - **exact**: the final weights equal the uninterrupted run's — and if not, which part was forgotten.

# %% tags=["exercise", "nbval-ignore-output"]
### BEGIN SOLUTION
my_script = s.scripts["resume"]  # the solution: lab10_resilience/train_resume.py
### END SOLUTION
resume_report = labs.check_resume_script(my_script)
resume_report

# %% [markdown]
# What does the checker say when a piece is missing? Here the solution with one line changed: the resume returns
# epoch 0, so the sampler deals epoch 0's order again.

# %% tags=["nbval-ignore-output"]
with tempfile.TemporaryDirectory() as folder:
    forgot = resume_check.plant_mistake("forget_epoch", Path(folder) / "forgot_the_epoch.py")
    print(labs.check_resume_script(forgot)["exact"].detail)

# %% [markdown]
# ## 5. The failure clinic
#
# The four jobs of section 1 have ended by now (each sets the process group's timeout short, where torch's
# default would make a stuck job wait 30 minutes, or 10 with NCCL). Each failed its own way. For each job the
# kit shows what you would look at on a cluster: the job's state and exit code, when each rank ended, each
# rank's last lines and its error lines.

# %% tags=["nbval-ignore-output"]
print(cases.wait(s.timeout_s))
for label in cases.labels:
    print(clinic.symptoms(cases, label), end="\n\n")

# %%
profile.explain(
    gpu="With NCCL the job that hangs ends about a minute after its timeout, not at it: PyTorch's NCCL watchdog "
        "thread (part of torch's ProcessGroupNCCL, not of the NCCL library) notices the timed-out collective at the timeout, "
        "then waits up to a minute for its flight recorder to "
        "write what every rank was doing (`TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILLISEC`) and only then aborts the process.")

# %% [markdown]
# The same logs with the tools of lab 00: `search_log` finds every rank's log of a job, `job.tail` reads one
# rank's. On a GPU the jobs also ran with `NCCL_DEBUG=INFO`: NCCL's own lines (`NCCL INFO`: its version, the
# rings, the transport) are in each rank's standard output, beside the traceback in its standard error.

# %% tags=["nbval-ignore-output"]
first = cases.jobs[cases.labels[0]]
print(coursekit.search_log(first.name, contains=first.job_id, with_err=True, all_tasks=True))
print(first.tail(12, stream="err", rank=1))

# %% [markdown]
# ### Your diagnoses
#
# The causes to choose from, by their keys:

# %%
print(clinic.CAUSES)

# %% [markdown] tags=["exercise"]
# For each job give a cause among these keys and the rank that caused it (0 or 1; `"all"` when every rank
# carries the same mistake). A wrong answer says "not yet" and which part is wrong; after three tries the answer is shown. A
# right one explains what happened and how to fix it. Write them in `my_diagnoses`, in place of the two
# placeholder lines: `{"A": {"cause": "...", "rank": ...}, "B": ..., "C": ..., "D": ...}`. Each answer is saved
# for the instructor, who sees how many of the four jobs you diagnosed.

# %% tags=["exercise", "nbval-ignore-output"]
### BEGIN SOLUTION
my_diagnoses = clinic.solution(pseudo)
### END SOLUTION
for label in cases.labels:
    clinic.diagnose(cases, label, **my_diagnoses.get(label, {}))

# %% [markdown]
# ### A second look at the hang: `TORCH_DISTRIBUTED_DEBUG=DETAIL`
#
# With it torch checks, before each collective, that every rank calls the same one with the same shapes, and
# names a mismatch at once instead of waiting for the timeout. It sees operations and shapes, not steps: the
# all-reduces of two different steps look alike to it, so it names the first call that differs. It costs time
# on every collective: turn it on to find a bug, not for training. The job that hung, again, with it:

# %% tags=["nbval-ignore-output"]
hung = cases.label_of("mismatched_collectives")
detail = clinic.submit_cases(pseudo, s.clinic, labels=[hung], debug=True, **s.job)
detail.wait(s.timeout_s)
detail_symptoms = clinic.symptoms(detail, hung)
print(detail_symptoms)

# %% [markdown]
# ## 6. What the GPU is doing while it trains
#
# The engine samples its GPU twice a second with NVML (the library behind `nvidia-smi` and `nvitop`): the
# share of time a kernel ran (utilisation), the memory in use and the power drawn. Two jobs of the same model
# one after the other, as in lab 05: a starving loader (`workers=0`: the training process reads and prepares
# every batch itself, between two steps) and a better-fed one (worker processes, pinned memory, prefetching). The
# view below follows them while they run. Utilisation is a coarse measure: a GPU that runs one small kernel
# all the time is "100 %" busy. A GPU well under 100 % in training is waiting for something.

# %% tags=["nbval-ignore-output"]
if profile.is_gpu:
    watched = gpu_view.run_and_watch(gpu_view.loader_configs(s.gpu_view_base, s.gpu_view_loaders),
                                     name=labs.job_name(pseudo, "gpuview"), refresh_s=s.gpu_view_refresh_s,
                                     timeout_s=s.timeout_s, **s.job)
    gpu_table = gpu_view.gpu_table(watched)
    display(gpu_table)
else:
    watched, gpu_table = [], None
    print(gpu_view.NO_GPU_TEXT)

# %%
profile.explain(
    gpu="Energy per image is the GPU's joules (its power summed over the run's steps) over the images it trained: the "
        "starving job draws less power but for longer, and each of its images costs more. A GPU that waits still "
        "draws its idle power. Every column but the memory covers the same steps (the warm-up left out), so the "
        "power divided by the images per second is the energy per image. The better-fed job's GPU still waits "
        f"part of the time: for its {s.gpu_view_loaders[gpu_view.FED]['workers']} CPU workers, which resize every "
        f"image to {s.gpu_view_base.image_size} px. Moving that work onto the GPU, as lab 05's GPU decoding does, is "
        "the next step.",
    cpu="On a GPU node the table would show each job's mean utilisation, its peak memory, its mean power and the "
        "energy each image cost.")

# %% [markdown]
# ## 7. The environment a job runs in
#
# A job runs with the Python, torch and CUDA of the environment it starts in: your module or venv, or a
# container image (Apptainer, formerly Singularity: `singularity exec --nv image.sif python ...`). The engine
# records which ran in every job's summary. Where the site has a container runtime and the room's image, the
# same job runs once from your Python and once in the container, and the table shows both.

# %% tags=["nbval-ignore-output"]
image = environment.container_image(s.container_image)
print(environment.environment_note(environment.container_runtime(), image, s.container_image))
venv_job = watched[-1].job if watched else env_job  # the GPU view's better-fed job, or the one of section 1
env_jobs = environment.run_environments(watched[-1].config if watched else s.env_config, image=image,
                                        name=labs.job_name(pseudo, "env"), timeout_s=s.timeout_s,
                                        venv_job=venv_job, **s.job)
versions = environment.versions_table(env_jobs)
versions

# %% [markdown]
# Where the container job did not run, here is what each of its processes would run (the lines of the sbatch
# script the kit writes for it).

# %% tags=["nbval-ignore-output"]
if environment.CONTAINER not in env_jobs:
    script = environment.sbatch_script(s.env_config, image=image or "/path/to/coursekit.sif", name="env",
                                       module=s.env_module)
    print("\n".join(environment.container_lines(script)))

# %% [markdown]
# ## 8. Exit ticket
#
# Three questions on what *you* measured above and one to compute with the lab's idea. The ticket is checked
# at once, and your score is saved for the instructor.

# %%
ticket = labs.exit_ticket("10", {
    "resumed_at": labs.Question("At which step did your interrupted job first resume?",
                                comparison.resumed_at[0] if comparison.resumed_at else None),
    "hung_job": labs.Question("Which clinic job (A–D) hung in a collective, after its process group had formed, "
                              "until the timeout?", hung,
                              choices=tuple(cases.labels)),
    "starts": labs.Question("How many times did the interrupted job start in all?", comparison.starts),
    "steps_redone": labs.Question(
        f"A run of {transfer.TRANSFER_STEPS:,} steps saves a checkpoint every {transfer.TRANSFER_EVERY} steps and only "
        f"then. The node fails without warning after step {transfer.TRANSFER_KILLED_AT:,}. How many steps does the "
        "requeued job compute a second time?",
        transfer.steps_redone(transfer.TRANSFER_KILLED_AT, transfer.TRANSFER_EVERY), computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"resumed_at": ..., "hung_job": ..., ...}` in place of the two placeholder
# lines. A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"resumed_at": comparison.resumed_at[0] if comparison.resumed_at else None, "hung_job": hung,
           "starts": comparison.starts, "steps_redone": 3_940 - 3_750}  # the last checkpoint was at step 3,750
### END SOLUTION
graded = ticket.grade(answers)

# %% [markdown]
# ## 9. The claims, checked

# %%
named, measured = clinic.mismatch_named(detail_symptoms.ranks, s.clinic["hang_timeout_s"])
verdicts = [*resume.check_resume_claims(comparison), *clinic.clinic_claims(cases),
            labs.check_claim("with TORCH_DISTRIBUTED_DEBUG=DETAIL torch names the mismatched collectives at once, in less "
                             "than half the process group's timeout", named, measured),
            *gpu_view.gpu_claims(gpu_table).values(),
            *environment.environment_claims(versions, image).values()]
