"""Lab 07: large-batch training — the gap, LR scaling and warm-up, the critical batch, the noise scale."""

# %% [markdown]
# # Lab 07 — Large-batch training
#
# **Learning goals.** After this lab you can
#
# 1. show that a larger batch trained for the same epochs ends less accurate, and say what the two
#    readings of that gap are: Keskar et al.'s *generalisation gap* (large batches find sharp minima) and
#    Shallue et al.'s and Hoffer et al.'s *budget and tuning artefact* (fewer steps, an LR tuned for another batch);
# 2. scale the learning rate with the batch (linear, Goyal et al.; square root, Hoffer et al.) with warm-up, and
#    say where it works: below the critical batch of the target you train to, not far beyond it;
# 3. compare SGD with LARS and LAMB *tuned alike* (Nado et al.), and test two of Hoffer et al.'s remedies: ghost
#    batch norm and more steps;
# 4. read the early training loss of a run with a very large LR with and without warm-up;
# 5. measure the critical batch as Shallue et al. do (steps to a target against the batch, the best LR of a grid
#    for each batch) and fit McCandlish et al.'s `(S/S_min − 1)(E/E_min − 1) = 1`;
# 6. estimate the gradient noise scale B_simple during training and compare it with the critical batch.
#
# Every run goes into **one results table**; an accuracy run with several seeds is a mean ± std over them (a
# grid point runs one seed), and every plot and claim below is computed from that table. **One schedule shape
# per part**: in A and B a linear warm-up (counted in steps), then linear decay to 0; in C and D a short warm-up,
# then a constant LR, so that the steps to a target do not depend on where a decay would end.

# %% tags=["nbval-ignore-output"]
# %matplotlib inline
from coursekit import labs
from coursekit.labs import lab07_large_batch as lb
from coursekit.labs.lab07_large_batch import room

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("07")
print(s)

# %% [markdown]
# ## 1. Two readings of one gap
#
# Train the same network for the same number of epochs at batch 256 and at 4096: the large batch ends less
# accurate. Two explanations compete in the literature:
#
# * **A generalisation gap** (Keskar et al. 2017): large batches drift to *sharp* minima that generalise worse,
#   whatever the budget — the batch itself is the problem.
# * **A budget and tuning artefact** (Hoffer et al. 2017, Shallue et al. 2019): at equal epochs the large batch
#   makes 16 times fewer steps, with an LR tuned for another batch. Scale the LR, warm up, and — beyond the
#   *critical batch* — train for more steps, and the gap closes.
#
# This lab measures what each predicts: **A** the gap, and what wins it back at the largest batch: LR scaling,
# LARS and LAMB, ghost batch norm, or the reference's number of steps; **B** what warm-up does at a very large
# LR; **C** the steps to a target accuracy against the batch (where doubling the batch stops halving the
# steps); **D** the gradient noise scale, McCandlish et al.'s prediction of that knee. The engine holds the whole
# data set on the device as bytes and augments it there (`--device-data`), so even batch 64 is not waiting for a
# loader.
#
# All runs are sent off at once, below, as soon as your seeds are set: they train while you predict and while you
# write the three rules of section 2 in code; section 3 collects them.

# %% [markdown]
# **Seeds for the room.** Every participant posts their runs to the room's shared results (section 9), so
# the room sees many seeds instead of a few. For that, each participant must run *other* seeds: set `my_seat`
# to the number the instructor gave you, and you run seeds of your own. Left at `None`, you run the lab's
# seeds (what a participant alone does).

# %% tags=["exact-settings"]
my_seat = None  # your number in the room from the instructor (0, 1, 2, ...); None: you work alone
seeds = room.my_seeds(my_seat, s.seeds)
print("your seeds:", seeds)

# %% tags=["nbval-ignore-output"]
runs = lb.plan(s, seeds)
print(len(runs), "runs:", {part: sum(r.tags["part"] == part for r in runs) for part in lb.PARTS})
print("the first run:", labs.engine_command(runs[0].config))
sweeps = lb.submit(runs, name=labs.job_name(pseudo, "large-batch"), jobs=s.jobs, **s.job)
print(f"sent: {len(runs)} runs in {len(sweeps)} job(s); they train while you read on (section 3 collects them)")

# %% [markdown] tags=["exercise"]
# ### Predict, then run
#
# The runs have started; before you see a result, two guesses, as numbers: how many accuracy points the largest batch loses against
# the reference batch at equal epochs with the same learning rate (part A), and how many times fewer steps
# four times the smallest batch needs to reach the target (part C, two doublings; 4 would be perfect). Replace the placeholder
# lines below with your guesses in `my_gap` and `my_speedup` (or `None`, which shows a box to type it in).
# They are set beside the measurements further down.

# %% tags=["exercise"]
### BEGIN SOLUTION
my_gap = 3
my_speedup = 3
### END SOLUTION
labs.predict("gap_large", f"At equal epochs and the same learning rate, how many accuracy points below batch "
             f"{s.base_batch} will batch {s.large_batch} end?", unit="points", value=my_gap)
labs.predict("steps_doubling", f"How many times fewer steps to the target will batch {4 * min(s.critical_batches)} "
             f"need than batch {min(s.critical_batches)} (two doublings)?", unit="×", value=my_speedup)

# %% [markdown]
# ## 2. While the runs train: the rules in code
#
# Three rules make a large batch train well: scale the learning rate with the batch, warm up, and, at very
# large batches, give each layer its own step size. The third is LARS (You, Gitman and Ginsburg 2017). With
# one learning rate for all layers, a layer whose gradient is large next to its weights takes too big a step,
# and the run diverges. LARS scales each layer's step by its *trust ratio*
# `η ‖w‖ / (‖g‖ + weight decay × ‖w‖)`, so that every layer moves by a similar share of its weights.
#
# Each rule is a few lines. First the arithmetic, then the code. Nothing here waits for the runs.

# %% [markdown] tags=["exercise"]
# ### The scaling rule and warm-up, by hand
#
# **First, the numbers.** Goyal et al. trained ResNet-50 at batch 8192 with a learning rate found for batch 256 (0.1).
# Write the scaling rule as a plain function: `lb.scaled_lr(base_lr, base_batch, batch, rule)`. What LR do the
# linear and square-root rules give at 8192? Their warm-up lasted 5 epochs: how many optimiser steps is that
# for ImageNet's 1,281,167 training images at batch 8192 (the last, short batch dropped)?
# `lb.steps_per_epoch(images, batch)` counts one epoch's steps. Put your answers in `linear_lr`, `sqrt_lr` and
# `warmup_steps`.

# %% tags=["exercise", "exact-arithmetic"]
### BEGIN SOLUTION
linear_lr = lb.scaled_lr(0.1, 256, 8192, "linear")
sqrt_lr = lb.scaled_lr(0.1, 256, 8192, "sqrt")
warmup_steps = 5 * lb.steps_per_epoch(1_281_167, 8192)
### END SOLUTION
print(f"linear: lr {linear_lr:.2f}, square root: lr {sqrt_lr:.3f}, warm-up: {warmup_steps} steps")

# %% [markdown]
# ### The rules in code
#
# Open `lab07_large_batch/my_rules.py` and fill in its four TODOs:
#
# 1. `scaled_lr(base_lr, base_batch, batch)`: the linear scaling rule;
# 2. and 3. `warmup_then_decay(step, warmup_steps, total_steps)`: the factor of the peak learning rate at each
#    step, warm-up then linear decay, the shape every run of parts A and B used;
# 4. in `LARS.step`, each layer's local learning rate: the trust ratio, or 1 for biases and batch-norm
#    parameters.
#
# Save the file, then run the cell below. It runs your file and compares it with the training engine: the
# learning rate at every step of three schedules, and the weights after three LARS steps on a small network.
# The table under the report shows the local learning rate it finds for each layer.

# %% tags=["nbval-ignore-output"]
my_rules = "lab07_large_batch/my_rules.py"  # your copy: fill in the TODOs, save, and run this cell again
report = labs.check_large_batch_rules(my_rules)
report

# %%
print("every check passed" if report.ok else "some checks failed (read the report above)")

# %% [markdown]
# ## 3. Collect the runs
#
# The bar counts the runs that have ended, yours sent at the start; it moves as each one ends. In the table,
# `val_acc` is the test accuracy at the end of the run for parts A and B, but for C and D the accuracy on the
# held-out split of the training set when the run stopped (C stops at its target).

# %% tags=["nbval-ignore-output"]
table = lb.results(sweeps, runs, timeout_s=s.timeout_s)
table.with_columns("part", "arm", "batch_size", "lr", "seed", "status", "val_acc", "total_time_s")

# %% tags=["exact-counts"]
failed = [r for r in table if r["status"] not in ("completed", "nan")]
for r in failed[:5]:  # what went wrong, in the run's own words
    print(f"{r['part']} {r['arm']} seed {r['seed']}: {r['status']}: {(r['summary'] or {}).get('error')}")
assert not failed, f"{len(failed)} of {len(table)} runs did not complete"
print(len(table), "runs ended")

# %% [markdown]
# ## 4. A. The gap at equal epochs, and what LR scaling wins back
#
# The reference batch with its tuned LR `lr0`; 4 times the batch with the same LR (*naive*) and with the linear
# rule `4 lr0` plus warm-up; 16 times the batch naive, with the square-root rule `4 lr0` and with the linear rule
# `16 lr0`, both with warm-up. All for the same epochs, so the larger batches make 4 and 16 times fewer steps.
# The table holds every arm of A; the figure shows the scaling rules, ghost batch norm and equal steps (the LR
# grid has a figure of its own below).

# %% tags=["nbval-ignore-output"]
summary = lb.cells(table, "A")
summary

# %% tags=["nbval-ignore-output"]
lb.accuracy_figure(summary.where(lambda row: row["arm"] not in lb.arm_names(s, lb.GRID)))

# %%
gap_large = lb.gap_points(table, s)
labs.reveal("gap_large", gap_large)

# %% [markdown]
# ### Tuned alike: SGD, LARS and LAMB
#
# LARS and LAMB were made for large batches: each layer takes a step in proportion to its own weights. Papers
# often compare them with an SGD that nobody tuned for the large batch. Nado et al. (2021) tuned the baselines
# as carefully: Nesterov momentum matched LARS, and Adam matched LAMB. Here every optimizer gets the **same
# 3-point grid**: its centre times ½, 1 and 2, with the same warm-up and decay, at the largest batch. There is no
# Adam arm: the question is whether tuned SGD keeps up with both.
#
# * SGD's grid is centred on the square-root rule: `½`, `1` and `2` times `4 lr0` at 16 times the batch.
# * LARS and LAMB use other LR scales. LARS (trust coefficient 0.001) moves each layer by about
#   `lr × 0.001 × |w|` a step, LAMB by about `lr × |w|`. The literature's LRs are for other models, so the
#   centres give each layer about the step SGD's centre gives it (from the ratio |g|/|w| over the first steps):
#   **LARS 10 and LAMB 0.05**. LAMB's centre is higher than that match alone gives, because its averaged moments
#   do not add up steps the way SGD's momentum does.
#
# Each grid point runs on your first seed only (the room adds seeds). The comparison uses the seeds that every
# grid point ran.

# %% tags=["nbval-ignore-output"]
grid = lb.grid_table(table, s)
grid

# %% tags=["nbval-ignore-output"]
reference_acc = summary.one(arm=s.claim_arms["reference"])["val_acc"]
lb.grid_figure(grid, reference_acc)

# %% [markdown]
# Each optimizer's best point is ringed in the figure and listed below. A best point at the edge of its grid,
# clearly above the inner point, means that the optimizer's best LR may lie beyond the grid; the comparison then
# holds for these grids only. Within half a point (one seed's noise) the edge and the inner point tie, and the
# grid brackets the optimum as far as this run can tell.

# %% tags=["nbval-ignore-output"]
grid.where(best=True)

# %% [markdown]
# ### Ghost batch norm and equal steps
#
# Hoffer et al. (2017) named two more causes of the gap. First, batch norm over 4,096 images is less noisy than
# over 256, and that noise helps a network generalise. *Ghost batch norm* normalises virtual batches of the
# reference size inside the large batch, so the noise comes back. Data parallelism without `SyncBatchNorm` already
# does this: each GPU normalises its own share of the batch, so its ghost batch is the per-GPU batch (lab 06).
# Second, the large batch makes 16 times fewer
# steps. The *equal steps* arm gives it the reference's number of steps: 16 times the epochs, on the linear rule
# with warm-up. Ghost batch norm runs on the square-root rule, as Hoffer et al. ran it, and is compared with the
# square-root arm: at this batch the linear rule's LR trains worse than the square-root rule's (a claim at the
# end checks it), and a remedy tested there could not tell "no help" from "nothing helps at that LR".
#
# Equal steps costs 16 times the training of an arm at equal epochs, so it runs on your first seed only. Why the
# largest batch and not the middle one, which would cost a quarter of that? At the middle batch, linear scaling
# already wins back most of the gap. The open question is at the largest batch, where no LR rule closes it.

# %% tags=["nbval-ignore-output"]
ghost, ghost_std = lb.ghost_gain(table, s)
equal = lb.equal_steps_recovery(table, s)
print(f"ghost batch norm: {labs.signed(ghost)} ± {ghost_std:.3f} against the same run with plain batch norm (the "
      "square-root rule)")
print(f"equal steps: won back {labs.signed(equal['won'])} of a {labs.signed(equal['gap'])} gap ({labs.percent(equal['share'])})"
      + (": over 100 %, it ended above the reference" if equal["share"] > 1 else ""))

# %% [markdown]
# ### What wins back how much at the largest batch
#
# Every arm at the largest batch with the lab's epochs, best first: the share of the gap (reference − naive) it
# wins back, and how far below the reference it still ends. Compare the LR rules, the layer-wise optimizers and
# ghost batch norm with the equal-steps run above.

# %% tags=["nbval-ignore-output"]
lb.large_batch_recovery(table, s)

# %% [markdown]
# ## 5. B. Warm-up where it matters
#
# The largest batch at a very large LR, with and without a short linear warm-up; the training loss of every
# step. Without warm-up the first steps take the full step while the weights are random: the loss jumps
# (Goyal et al.'s figure 2). Batch norm usually catches the run again. The claim below tests the spike only.
# Whether warm-up also ends more accurate is printed above the table, LR by LR, paired seed by seed: in how many
# seeds the warm-up run ended higher, and the mean of the differences. With a few seeds that is a reading, not a
# claim. A final training loss close to another run's need not mean the same test accuracy. Whether warm-up makes
# a very large LR a good one: compare these accuracies with part A's arms at the same batch. (This part runs only
# very large LRs: what warm-up does at a moderate LR is not measured here.)

# %% tags=["nbval-ignore-output"]
print(lb.warmup_reading(table))
lb.cells(table, "B")

# %% tags=["nbval-ignore-output"]
lb.spike_figure(table)

# %% [markdown]
# ## 6. C. The critical batch
#
# For each batch: the steps until the accuracy on a **held-out split** of the training set (not the test set)
# reaches the target, with the best LR of a small grid (¼, ½ and 1 times the linear rule) and a fixed warm-up
# in steps, then a constant LR. Below the critical batch doubling the batch halves the steps (*perfect
# scaling*: the samples E = S × B stay flat); beyond it the steps stop falling and the samples grow. The fit is
# McCandlish et al.'s `(S/S_min − 1)(E/E_min − 1) = 1`, i.e. `S = S_min (1 + B_crit/B)`, with
# `B_crit = E_min / S_min`. The fit's 95 % interval for B_crit comes from the scatter of the points about it.

# %% tags=["nbval-ignore-output"]
curve = lb.critical_curve(table)
fit = lb.fit_critical_batch(curve)
if fit and fit["b_crit_low"] is not None:
    print(f"fit: S_min {fit['s_min']:.0f} steps, E_min {fit['e_min']:.0f} samples, B_crit ≈ {fit['b_crit']:.0f} "
          f"(95 % interval {fit['b_crit_low']:.0f} to {fit['b_crit_high']:.0f})")
else:
    print("fit:", fit)
curve

# %% [markdown]
# **Did each batch's LR grid find its fastest LR?** The table lists the steps to the target of each LR of the
# grid. Where the fastest is at an edge of its grid (`best_at_edge`: faster than the inner LR by more than one
# evaluation interval, the precision of a step count), a larger or smaller LR might have reached the target in
# fewer steps: that batch's step count is an upper bound. The fitted B_crit carries that error beyond its
# interval, and the speed-up of two doublings, a ratio of two such counts, may be off either way. Their claims
# below say how many of their batches were at an edge. The grid itself grows with the batch (it is the linear rule times ¼, ½ and 1), so a `best_lr` at the
# grid's top edge grows with the batch by construction: it does not measure how the fastest LR scales.

# %% tags=["nbval-ignore-output"]
lb.critical_grid_check(table, s)

# %%
labs.reveal("steps_doubling", lb.two_doublings_speedup(curve, min(s.critical_batches)))

# %% [markdown]
# ## 7. D. The noise scale
#
# In a run at the reference batch split into micro-batches (`--accumulation-steps`), each micro-batch's gradient
# is a small batch and the step's gradient a big one: McCandlish et al.'s two-batch estimator gives |G|² and
# tr(Σ) from them, in train mode, without an extra pass over the data. It is free under data parallelism,
# where each GPU's gradient already is the small batch; on one device the split itself slows every step (the
# first line printed below). Both are noisy, so each is smoothed by its own moving
# average, and B_simple = tr(Σ)/|G|² is their ratio. It grows as the loss falls: the nearer the target, the
# larger the batch that still pays. The first readings come while the moving averages settle (decay 0.95 per
# estimate: each averages about the last 20 steps' estimates), and a single dip from one record to the next is
# noise. Read at the step where C's reference batch reached the target, McCandlish et al. predict it lies near
# B_crit. How near? The estimate itself moves from record to record: the claim below asks whether B_crit lies
# between its lowest and highest reading from half to twice that step (its own spread).

# %% tags=["nbval-ignore-output"]
print(lb.split_step_cost(table) or "no step times for D and A")
series = lb.noise_series(table)
at_step = lb.reference_steps(curve, s.base_batch)
b_simple = lb.b_simple_at(series, at_step)
spread = lb.noise_spread(series, at_step)
print(f"B_simple at step {at_step}: {b_simple:.0f}" if b_simple else "B_simple: no estimate at C's target")
if spread:
    print(f"from step {at_step / 2:.0f} to {2 * at_step}: {spread['low']:.0f} to {spread['high']:.0f} "
          f"(a factor {spread['factor']:.2f})")
lb.noise_figure(series, fit["b_crit"] if fit else None, at_step)

# %% tags=["nbval-ignore-output"]
lb.critical_figure(curve, fit, b_simple)

# %% [markdown]
# ### Where is the knee for part A?
#
# C's critical batch belongs to C's target: the accuracy on the held-out split that C stops at. Part A trains
# every arm to its last epoch, and its reference ends past that target. McCandlish et al. (2018) found that the
# critical batch grows as the target gets harder, because the gradient noise scale grows as the loss falls (D's
# curve). So a batch can lie above C's B_crit and still below the knee for A's target: the line below places A's
# batches against C's measurement.

# %% tags=["nbval-ignore-output"]
print(lb.knee_reading(s, fit, series, at_step, table))

# %% [markdown]
# ## 8. What the measurement supports
#
# Read the claims below with both readings in mind.
#
# * **The gap is real** at equal epochs (A). Keskar et al. would say the large batch found a worse minimum.
# * **At 4 times the batch** linear scaling with warm-up wins most of it back: there the gap is a tuning
#   artefact. That linear scaling still works there says this batch is below the knee for A's target, even where
#   it lies above C's B_crit (section 7).
# * **At 16 times the batch** the linear rule wins back less, and the square-root rule more (its claim asks for
#   more than two standard errors of the paired difference), because the linear LR is too large for so few
#   steps. How much LARS and LAMB win back, against the two rules, is in the table "what wins back how much". The
#   claim below checks that none of them closes the gap at equal epochs: each ends more than half a point below
#   the reference.
# * **Tuned alike**: Nado et al. found a tuned Nesterov SGD as good as LARS, and tuned Adam as good as LAMB; You
#   et al. found LARS and LAMB ahead of the SGD they compared with. The line marked MEASURED below says which way
#   it went here and how that reads against Nado et al.: with one seed per grid point, half a point either way
#   counts as a tie.
# * **Ghost batch norm** brings back the noise of batch norm over small batches, not the steps. Hoffer et al.
#   found that it narrows the gap; here it counts as seen only when its gain, paired seed by seed, exceeds two
#   standard errors, and is reported either way.
# * **Equal steps** decides between the two readings. If the large batch given the reference's steps ends near
#   the reference, the gap was a budget artefact (Hoffer et al., Shallue et al.). Keskar et al.'s reading
#   predicts a gap that more steps do not close.
#
# One caveat: equal steps also means 16 times the epochs, so the large batch sees more data. This lab cannot tell
# "more steps" from "more epochs"; Shallue et al. separate them with many more runs.

# %% tags=["nbval-ignore-output"]
profile.explain(
    gpu="The claims below are asserted: a claim that does not hold stops the notebook. Four results are "
        "reported either way, never asserted: ghost batch norm's gain, whether each LR grid (A's and C's) brackets "
        "its optimum, and B_simple against B_crit; each prints CLAIM HOLDS where it holds and NOT SEEN ON THIS "
        "DATA where it does not, without stopping. The line marked MEASURED compares the optimizers, with no "
        "direction expected.",
    cpu=lb.CPU_CLAIMS_NOTE)

# %% tags=["nbval-ignore-output"]
claims = lb.check_claims(table, s)

# %% [markdown]
# ## 9. The room's seeds
#
# Your runs of parts A and C go to the room's shared results, with your pseudonym; then you read back every
# run posted so far. Each dot below is one seed of one participant: with a room of twenty, the spread of an
# arm is no longer a guess from two or three seeds. Run the cell again later to see the runs posted since.
# Alone, the room is just your own points. Your LR grid points and your equal-steps run had one seed each; the
# room's seats add the seeds they lack. A record that is not one of this lab's runs (another profile's, a broken
# line) is left out and counted below the table.

# %% tags=["exact-counts"]
print(f"posted {room.post_runs(table, pseudo, s)} of your runs to the room's results")

# %% tags=["nbval-ignore-output"]
arms = [arm for arm, *_ in s.arms]
the_room = room.read_room(s)
print(the_room)
room.room_table(the_room, arms)

# %% tags=["nbval-ignore-output"]
room.room_figure(the_room, arms)

# %% [markdown]
# ## 10. Exit ticket
#
# Four questions on what *you* measured above (the answers are in your own tables and figures, not in a
# book), and one that carries the lab's idea to a model you did not train. The ticket is checked at once, and
# your score is saved for the instructor.

# %%
large_arms = summary.where(lambda row: row["batch_size"] == s.large_batch and row["arm"] in lb.arm_names(s, lb.SCALING))
best_large = max(large_arms, key=lambda row: row["val_acc"])
smallest = min(s.critical_batches)
doubling = lb.two_doublings_speedup(curve, smallest)
ticket = labs.exit_ticket("07", {
    "gap_large": labs.Question(f"At equal epochs, how many accuracy points below batch {s.base_batch} did batch "
                               f"{s.large_batch} with the same LR end (part A)?", gap_large, unit="points",
                               abs_tol=0.5),
    "best_large": labs.Question(f"Which LR scaling rule at batch {s.large_batch} ended most accurate (part A, "
                                f"equal epochs, SGD)?", best_large["arm"],
                                choices=tuple(large_arms.column("arm"))),
    "steps_doubling": labs.Question(f"In part C, how many times fewer steps to the target did batch {4 * smallest} "
                                    f"need than batch {smallest}?", doubling, unit="×", rel_tol=0.1),
    "b_crit": labs.Question("What critical batch B_crit did the fit of part C give?",
                            fit["b_crit"] if fit and 0 < fit["b_crit"] < float("inf") else None, rel_tol=0.2),
    "steps_elsewhere": labs.Question("Another model needs S_min = 1,500 steps to its target at the largest batches, "
                                     "and its critical batch is B_crit = 6,000. By McCandlish et al.'s law, how many "
                                     "steps does it need at batch 2,000?", 1_500 * (1 + 6_000 / 2_000), unit="steps",
                                     rel_tol=0.02, computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"gap_large": ..., "best_large": ..., ...}` in place of the two placeholder
# lines: numbers (or an arm's name, as the table writes it) you read above, and for `steps_elsewhere` the number
# you compute. A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"gap_large": gap_large, "best_large": best_large["arm"], "steps_doubling": doubling,
           "b_crit": fit["b_crit"] if fit else None, "steps_elsewhere": 1_500 * (1 + 6_000 / 2_000)}
### END SOLUTION
graded = ticket.grade(answers)
