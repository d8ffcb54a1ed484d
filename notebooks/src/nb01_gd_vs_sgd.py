"""Lab 01: gradient descent vs stochastic gradient descent."""

# %% [markdown]
# # Lab 01 — Gradient descent vs stochastic gradient descent
#
# **Learning goals.** After this lab you can
#
# 1. say what one step of gradient descent (GD) computes, and what changes when the gradient comes from
#    a mini-batch of *B* samples instead of the whole training set;
# 2. read a loss surface and the path an optimiser takes across it;
# 3. explain why the path of stochastic gradient descent (SGD) is noisy, why each of its steps is
#    nevertheless cheap, and why that trade is usually worth it;
# 4. measure the noise of a mini-batch gradient and show that its variance falls as 1/B.
#
# Every training run below is a job of the course's training engine (`python -m coursekit.train`),
# submitted from this notebook; the notebook only prepares the runs, reads their metrics back and draws
# them (the loss surface itself is cheap enough to compute here, from the same points the jobs use).

# %%
# %matplotlib inline
from coursekit import labs
from coursekit.labs import lab01_gd_vs_sgd as gd
from coursekit.labs.kit import failures, plots

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("01")
print(s)

# %% [markdown]
# ## 1. One neuron, one line
#
# The data are points on the line *y = 10 x + 2*, with Gaussian noise of standard deviation 1 added to
# every *y*. The model is a single neuron without activation, *ŷ = w·x + b*: two parameters. The loss is
# the mean squared error over the training set,
#
# $$L(w, b) = \frac{1}{n}\sum_{i=1}^{n} (w x_i + b - y_i)^2 .$$
#
# For a model this small we can afford to compute *L* on a whole grid of (*w*, *b*) values and look at
# the surface the optimiser has to walk down. The engine generates the same points from the same seed,
# so the picture below is exactly the surface of the jobs.

# %% tags=["exact-arithmetic"]
x, y = gd.line_points(s.base)
w_best, b_best = gd.best_fit(x, y)
print(f"{len(x)} training points; the bottom of the surface is at w = {w_best:.2f}, b = {b_best:.2f}")
gd.data_figure(x, y)

# %% [markdown]
# ## 2. The runs: one per batch size
#
# Every run starts from the same weights (same seed), uses the same learning rate, no momentum and no
# weight decay, and sees the training set the same number of times (epochs). Only the batch size
# changes:
#
# * **full batch** (*B = n*): gradient descent proper, one step per epoch, each step uses every point;
# * **B = 1**: the textbook stochastic gradient descent, *n* steps per epoch;
# * **mini-batches** in between: mini-batch SGD (the sizes are printed below, from the settings).
#
# `--log-params` makes the engine write *w* and *b* into every step record, which gives us the paths.
# On a cluster each run is a job of its own. Where the runs would share one processor anyway (a CPU,
# or the GPU of a single machine), `one_job=True` puts all of them into a single job
# (`python -m coursekit.train.sweep`: the options below, `--next` between runs, one run after the
# other), which starts Python and torch once instead of once per run (how long the runs last: below).

# %% tags=["exact-settings"]
print(gd.batch_sizes_text(s.points, s.batch_sizes))
configs = [s.base.replace(batch_size=b) for b in s.batch_sizes]
for config in configs:
    print(labs.engine_command(config))

# %% [markdown]
# Section 5 needs a second, smaller experiment (one short run per batch size, explained there); we
# submit both now, together (`gd.submit_sweeps`: one sweep per experiment, or one job for both).

# %% tags=["exact-settings"]
profile.explain(
    gpu="The jobs hold a GPU, so they run on it. For two parameters its arithmetic costs next to nothing. A "
        "step pays a fixed cost, the same for every B: the host's work per step (Python, the optimiser, the "
        "data loader) and the step's kernel launches; assembling the batch on the CPU adds a part that grows "
        "with B. A B = 1 step is nearly all fixed cost, so it is far from *n* times cheaper than a full-batch "
        "step, and the B = 1 run, *n* steps per epoch, lasts a minute or two where the others take seconds. "
        "The step times are in the results table below (`step_time_s`) and in Exercise 2. Between two steps "
        "the engine also writes its record of the step (here with *w* and *b*), outside the step times: the "
        "runs' total times (`total_time_s`) include it.",
    cpu="The jobs run on this machine's CPU, one thread each. A run lasts a second or two at most (the first "
        "also pays the job's start-up), about what starting Python and torch costs.")

# %% tags=["nbval-ignore-output"]
noise_configs = [s.noise_base.replace(batch_size=b) for b in s.noise_batch_sizes]
sweep, noise_sweep = gd.submit_sweeps([configs, noise_configs], one_job=profile.is_cpu or labs.jobs_share_gpus(),
                                      **s.job,
                                      names=[labs.job_name(pseudo, "gd"), labs.job_name(pseudo, "noise")])
print("submitted jobs", sorted({job.job_id for job in [*sweep.jobs, *noise_sweep.jobs]}))

# %% [markdown]
# While they run, `coursekit.display_slurm_queue(name)` shows them (it returns at once and refreshes
# itself). Then `sweep.results()` waits for the jobs and builds **one results table**, one row per
# run, that every plot below reads.

# %% tags=["nbval-ignore-output"]
import coursekit

coursekit.display_slurm_queue(name=labs.job_name(pseudo, "gd"))

# %% tags=["nbval-ignore-output"]
table = gd.add_paths(sweep.results(timeout_s=s.timeout_s, title="GD vs SGD"), x, y)  # a bar while it waits

# %%
print("states:", sorted(set(table.column("state"))))
failed = failures.report_failures(table, "the GD/SGD sweep")

# %% tags=["nbval-ignore-output"]
table.with_columns("batch_size", "job_id", "state", "final_loss", "step_time_s", "total_time_s")

# %% [markdown]
# Where the runs share one job, the first of them (full batch) also pays the job's one-off start-up in
# its total time: the first use of torch's kernels and, on a GPU, starting CUDA. That, not its few
# steps, is why its total time can exceed that of a mini-batch run with many more steps; the step
# times (medians over the run) leave the start-up out.

# %% [markdown]
# ## 3. Loss against epochs and against time
#
# Left: the loss on the whole training set after each step, against the number of epochs done. Right:
# the same loss against the seconds the run had spent stepping (its first step counted at the run's
# median step time: in the job's first run it also carries the job's start-up). Per epoch, small batches make many more
# updates, so they get down faster; per *step* they are noisy.

# %%
figure, (left, right) = plots.new_figure(ncols=2)
for row in table:
    per_epoch = len(row["path"]) / s.base.epochs
    epochs = [(i + 1) / per_epoch for i in range(len(row["path"]))]
    seconds, total = [], 0.0
    for index, record in enumerate(row["steps"]):
        total += row["step_time_s"] if index == 0 else record["data_time_s"] + record["compute_time_s"]
        seconds.append(total)
    left.plot(epochs, row["path_loss"], label=f"B={row['batch_size']}")
    right.plot(seconds, row["path_loss"], label=f"B={row['batch_size']}")
right.set_xscale("log")
for ax, xlabel in ((left, "epochs"), (right, "seconds of training steps (log scale)")):
    ax.set_xlabel(xlabel)
    ax.set_ylabel("training loss (all points)")
    ax.set_yscale("log")
    ax.legend(fontsize="small")
figure

# %% [markdown]
# ## 4. The paths on the loss surface
#
# The contours are the levels of log10 *L*; the star is the least-squares solution. Gradient descent
# follows the steepest way down: its path is a smooth curve. SGD with *B = 1* zig-zags: each step
# follows the gradient of a single point, which points only roughly towards the star. Larger
# mini-batches smooth the path.

# %%
gd.surface_figure(x, y, table)

# %% [markdown]
# ## 5. How noisy is a mini-batch gradient?
#
# Write *g* for the gradient of the full loss and *g_B* for the gradient computed on a random
# mini-batch of *B* distinct points. On average *g_B* equals *g*; its spread is what makes SGD's path
# wobble. If one point's gradient has covariance Σ, then
#
# $$\mathbb{E}\,\lVert g_B - g \rVert^2 = \frac{\operatorname{tr}\Sigma}{B}\cdot\frac{n-B}{n-1},$$
#
# so the variance falls as **1/B** (the second factor, close to 1 while *B ≪ n*, appears because a batch
# never holds the same point twice). On a log-log plot, variance against *B* is a line of slope −1.
#
# The engine measures this with `--grad-noise-batches N`: after a step it draws *N* random mini-batches
# of the run's batch size and averages ‖*g_B* − *g*‖². We make one run per batch size, each with one
# (nearly zero) step, so that every run measures at the same point of the surface.

# %%
print(labs.engine_command(noise_configs[0]))

# %% tags=["nbval-ignore-output"]
noise = gd.noise_rows(noise_sweep.results(timeout_s=s.timeout_s))
slope = labs.loglog_slope(noise.column("batch_size"), noise.column("grad_noise_var"))
print(f"fitted slope of log(variance) against log(B): {slope:.2f}")
noise

# %%
figure = plots.scatter_line(noise, "batch_size", "grad_noise_var", logx=True, logy=True,
                            title="variance of the mini-batch gradient", label="measured")
trace_sigma, batches = noise[0]["grad_noise_var"], noise.column("batch_size")  # B = 1: the variance is tr Σ
ax = figure.axes[0]
ax.plot(batches, [trace_sigma / b for b in batches], linestyle=":", color="black", label="tr Σ / B")
ax.plot(batches, [trace_sigma / b * gd.without_replacement_factor(b, s.points) for b in batches],
        linestyle="--", color="gray", label="tr Σ / B · (n − B)/(n − 1)")
ax.legend(fontsize="small")
figure

# %% [markdown]
# The largest batch holds a large share of the *n* points, so the factor (*n − B*)/(*n − 1*) pulls its
# variance below tr Σ / B and steepens the raw slope. Dividing it out gives the corrected slope:

# %% tags=["nbval-ignore-output"]
noise.add_column("corrected_var", lambda r: r["grad_noise_var"] / gd.without_replacement_factor(r["batch_size"], s.points))
corrected_slope = labs.loglog_slope(noise.column("batch_size"), noise.column("corrected_var"))
print(f"raw slope {slope:.2f}, corrected slope {corrected_slope:.2f}")

# %% [markdown] tags=["exercise"]
# ### Exercise 1 — predict, then measure
#
# With *B = 1* the factor is 1, so the measured variance at *B = 1* is tr Σ. Use it to **predict** the
# variance at *B = 32* (store it in `predicted_32`: `labs.predict` saves it), then **measure** it: submit
# one more job of `s.noise_base` with batch size 32 and read its `grad_noise_var` (store it in
# `measured_32`: `labs.reveal` sets it beside your prediction).

# %% tags=["nbval-ignore-output", "exercise"]
### BEGIN SOLUTION
trace_sigma = noise.one(batch_size=1)["grad_noise_var"]
predicted_32 = trace_sigma / 32 * gd.without_replacement_factor(32, s.points)
### END SOLUTION
labs.predict("var_32", "What is the variance of the mini-batch gradient at B = 32?", value=predicted_32)

# %% tags=["nbval-ignore-output", "exercise"]
### BEGIN SOLUTION
extra = gd.noise_rows(labs.run_sweep([s.noise_base.replace(batch_size=32)], name=labs.job_name(pseudo, "b32"),
                                     **s.job, timeout_s=s.timeout_s))
measured_32 = extra[0]["grad_noise_var"]
### END SOLUTION
labs.reveal("var_32", measured_32)

# %% [markdown] tags=["exercise"]
# ### Exercise 2 — a step is cheap, an epoch is not
#
# From `table`, compute for the full-batch run and for *B = 1* the time of one step (`step_time_s`, the
# median over the run) and the time of one epoch (step time × steps per epoch). Which one makes an epoch
# cheaper, and why is that not the whole story?

# %% tags=["nbval-ignore-output", "exercise"]
### BEGIN SOLUTION
for row in (table.one(batch_size=s.points), table.one(batch_size=1)):
    steps_per_epoch = s.points // row["batch_size"]
    total = (f" ({1e3 * row['total_time_s'] / s.base.epochs:.1f} ms of the run's total time per epoch)"
             if row["batch_size"] == 1 else "")
    print(f"B={row['batch_size']:>4}: {1e3 * row['step_time_s']:.3f} ms per step, "
          f"{1e3 * row['step_time_s'] * steps_per_epoch:.1f} ms of steps per epoch{total}")
share = table.one(batch_size=1)["step_time_s"] / table.one(batch_size=s.points)["step_time_s"]
print(f"one B = 1 step costs {share:.2f} of a full-batch step, for 1/{s.points} of the points")
### END SOLUTION

# %% [markdown] tags=["solution"]
# One *B = 1* step is cheaper than a full-batch step, but nowhere near *n* times cheaper for its one
# point in *n* (the share printed above): a *B = 1* step is nearly all fixed cost — the host's work per
# step (Python, the optimiser, the data loader), on a GPU the step's kernel launches — not arithmetic on
# its example. An epoch of *B = 1* makes *n* such steps and pays that fixed cost every time, so its epoch
# is the slower one. *B = 1*'s total time per epoch (in brackets above) adds what lies between its steps,
# the engine's record of each one, paid *n* times too. What SGD buys is progress per epoch: many more,
# noisier updates. Mini-batches keep most of that progress while sharing the fixed cost of a step, and
# they fill a GPU — the subject of lab 02.

# %% [markdown]
# ## 6. Exit ticket
#
# Four questions on what *you* measured above, and one you compute from it: the answers are in your own
# tables and figures, not in a book. The ticket is checked at once, and your score is saved for the
# instructor.

# %%
gd_run, sgd_run = table.one(batch_size=s.points), table.one(batch_size=1)
sgd_ups = labs.share_of_increases(sgd_run["path_loss"])
gd_epoch_s, sgd_epoch_s = gd_run["step_time_s"], sgd_run["step_time_s"] * s.points  # B = n: one step per epoch
TRANSFER_B = 8  # a batch size no run of this lab used
fixed_s, per_point_s = gd.step_time_model(gd_run["step_time_s"], sgd_run["step_time_s"], s.points)
ticket = labs.exit_ticket("01", {
    "sgd_ups": labs.Question("On what percentage of the B = 1 steps did the training loss go up?", 100 * sgd_ups,
                             unit="%", abs_tol=5),
    "step_ratio": labs.Question(f"How many times longer did one full-batch step (B = {s.points}) take than one "
                                "B = 1 step?", gd_run["step_time_s"] / sgd_run["step_time_s"], unit="×",
                                rel_tol=0.2),
    "slower_epoch": labs.Question("Which run took longer per epoch?",
                                  "B = 1" if sgd_epoch_s > gd_epoch_s else "full batch", choices=("full batch", "B = 1")),
    "slope": labs.Question("What corrected log-log slope did you fit to the gradient variance against B?",
                           corrected_slope, abs_tol=0.05),
    "epoch_ms_b8": labs.Question(
        f"Transfer: say a step costs a fixed part plus a part per point, a + c·B. From your full-batch and B = 1 "
        f"step times, how many milliseconds of steps would one epoch of B = {TRANSFER_B} take ({s.points} "
        "points)?",
        1e3 * s.points / TRANSFER_B * (fixed_s + per_point_s * TRANSFER_B), unit="ms", rel_tol=0.05, computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"sgd_ups": ..., "step_ratio": ..., ...}` in place of the two
# placeholder lines: numbers (or a choice) you read above, and for the last one a number you compute (c
# from the two step times, then a, then the steps of an epoch). A question you leave out counts as not
# answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"sgd_ups": 100 * sgd_ups, "step_ratio": gd_run["step_time_s"] / sgd_run["step_time_s"],
           "slower_epoch": "B = 1" if sgd_epoch_s > gd_epoch_s else "full batch", "slope": corrected_slope}
c = (gd_run["step_time_s"] - sgd_run["step_time_s"]) / (s.points - 1)  # seconds per point
a = sgd_run["step_time_s"] - c  # seconds per step, whatever the batch
answers["epoch_ms_b8"] = 1e3 * (s.points // 8) * (a + 8 * c)
### END SOLUTION
graded = ticket.grade(answers)

# %% [markdown]
# ## 7. The claims, checked on the runs above

# %%
gd_run, sgd_run = table.one(batch_size=s.points), table.one(batch_size=1)
gd_ups, sgd_ups = labs.share_of_increases(gd_run["path_loss"]), labs.share_of_increases(sgd_run["path_loss"])
verdicts = [labs.check_claim(
    "the full-batch GD path is smooth (the loss never goes up), SGD's path with B = 1 is noisy",
    gd_ups == 0 and sgd_ups > 0.2,
    f"loss went up on {100 * gd_ups:.0f} % of GD steps and on {100 * sgd_ups:.0f} % of SGD steps"),
labs.check_claim(
    "each SGD step (B = 1) is cheaper than a full-batch GD step",
    sgd_run["step_time_s"] < gd_run["step_time_s"],
    f"median step {1e3 * sgd_run['step_time_s']:.3f} ms (B = 1) vs {1e3 * gd_run['step_time_s']:.3f} ms (B = {s.points})"),
labs.check_claim(
    "the variance of the mini-batch gradient falls as 1/B (log-log slope -1 ± 0.1, sampling without replacement "
    "corrected)",
    abs(corrected_slope + 1) <= 0.1,
    f"corrected slope {corrected_slope:.2f} (raw {slope:.2f}) over B = {noise.column('batch_size')}")]

