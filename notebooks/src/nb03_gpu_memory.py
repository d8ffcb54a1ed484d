"""Lab 03: the GPU and its memory footprint."""

# %% [markdown]
# # Lab 03 — The GPU and the memory footprint of training
#
# **Learning goals.** After this lab you can
#
# 1. compare the same training step on a CPU and on a GPU, and say where the difference comes from;
# 2. list what training keeps in memory — parameters, gradients, optimizer state, activations — and
#    give the bytes per parameter for SGD and for Adam (and why "24 bytes" is quoted for Adam);
# 3. predict how activations grow with the batch size and with the depth of a network;
# 4. use `torch.no_grad` for evaluation and say what it saves;
# 5. estimate with the engine's calculator what fills your GPU's memory, check it against the
#    allocator's measured peak, and say what neither of them counts.

# %%
# %matplotlib inline
import coursekit
from coursekit import labs
from coursekit.labs import lab03_gpu_memory as anatomy
from coursekit.labs.kit import failures, plots, recorded
from coursekit.train.config import TrainConfig
from coursekit.train.memory import estimate_memory
from coursekit.train.models import build_model

pseudo = labs.choose_pseudonym()  # the one you chose in lab 00
profile = labs.choose_profile()
print(profile)
s = profile.settings("03")
print(s)

# %% [markdown]
# ## 1. The same step on a CPU and on a GPU
#
# One training step of ResNet-50 on 224 × 224 images: about 4.1 billion multiply-adds per image forward
# (≈ 8 GFLOP: a multiply-add is two floating-point operations, the count lab 04's TFLOP/s use), twice
# that backward. The engine runs it in strict fp32 (TF32 off): on a GPU, fp32 arithmetic runs on the
# CUDA cores, whose peak is about 67 TFLOP/s on an H200 (or an H100 SXM); the tensor cores, with hundreds
# of TFLOP/s, multiply only lower-precision formats (lab 04). A CPU core does tens of GFLOP/s. A GPU's
# memory moves terabytes per second.
#
# Memory in this lab is in binary units, as PyTorch and `nvidia-smi` report it: **MiB** (2²⁰ bytes) and
# **GiB** (2³⁰ bytes). GPUs are sold in "GB" that are nearly GiB: an "H100 80GB" holds 79.2 GiB, an H200
# "141 GB" about 140 GiB.

# %% tags=["exact-settings"]
profile.explain(
    gpu="Both jobs below run: the CPU one on the GPU node's own cores, the GPU one on its GPU.",
    cpu="There is no GPU here: we run the CPU job and set it next to the GPU figure recorded by the engine's "
        "benchmark on an H100 (batch 256, fp32).")

# %% [markdown] tags=["exercise"]
# ### Predict, then run
#
# Before you run the step: how many times more training images per second will a GPU process than the
# CPU? Replace the two placeholder lines below with your guess, a number, in `my_guess` (or
# `my_guess = None`, which shows a box to type it in). The figure below sets it beside the measurement.

# %% tags=["exercise"]
### BEGIN SOLUTION
my_guess = 30
### END SOLUTION
labs.predict("gpu_vs_cpu", "How many times more ResNet-50 training images per second will a GPU process than "
             "the CPU?", unit="×", value=my_guess)

# %%
step_configs = [s.step.replace(device=device, test_steps=steps) for device, steps in s.device_steps.items()]
for config in step_configs:
    print(labs.engine_command(config))

# %% tags=["nbval-ignore-output"]
steps_table = labs.run_sweep(step_configs, name=labs.job_name(pseudo, "step"), one_at_a_time=True,
                             time_max=s.job["time_max"],  # no env: this job may use every core
                             timeout_s=s.timeout_s, title="ResNet-50, one training step")
failed = failures.report_failures(steps_table, "the step jobs")
steps_table = failures.completed(steps_table)
for row in steps_table:
    row["batch_size"] = row["config"].batch_size
recording = labs.load_recording("gpu_ladder")
if recording and profile.is_cpu:
    fp32 = recorded.ladder_table(recording).one(rung="fp32")
    steps_table.append({"device": f"{recording['device']} (recorded)", "images_per_s": fp32["img_s"],
                        "state": "recorded", "batch_size": 256})
steps_table.with_columns("device", "state", "batch_size", "images_per_s")

# %% tags=["nbval-ignore-output"]
measured = [r for r in steps_table if r["state"] != "recorded"]
recorded_rows = len(steps_table) - len(measured)
print(f"{len(measured)} measured run(s)" + (f", {recorded_rows} recorded on a GPU" if recorded_rows else ""))
figure = plots.bars([r["device"] for r in steps_table], [r["images_per_s"] for r in steps_table],
                    ylabel="images/s (log scale)", title="ResNet-50 training throughput")
figure.axes[0].set_yscale("log")
figure

# %%
on_cpu = [r["images_per_s"] for r in steps_table if r["state"] != "recorded" and r["config"].device == "cpu"]
on_gpu = [r["images_per_s"] for r in steps_table if r["state"] == "recorded" or r["config"].device != "cpu"]
gpu_vs_cpu = on_gpu[0] / on_cpu[0] if on_cpu and on_gpu else None
labs.reveal("gpu_vs_cpu", gpu_vs_cpu)

# %% tags=["nbval-ignore-output"]
gpu_row = next((r for r in steps_table if r["state"] == "recorded" or r["config"].device != "cpu"), None)
cpu_row = next((r for r in steps_table if r["state"] != "recorded" and r["config"].device == "cpu"), None)
if gpu_row and cpu_row:
    note = anatomy.speedup_note(gpu_row, cpu_row)
    profile.explain(gpu=note, cpu=note)

# %% [markdown]
# ## 2. What training keeps in memory
#
# For every parameter, training in fp32 keeps
#
# * the **parameter** itself (4 bytes),
# * its **gradient** (4 bytes),
# * the **optimizer state**: nothing for plain SGD, one momentum buffer for SGD with momentum (4 bytes),
#   two moments for Adam/AdamW (8 bytes).
#
# That is 12 bytes per parameter for SGD with momentum and 16 for AdamW. The "24 bytes per parameter"
# often quoted for Adam (in the UF HiPerGator workshop, for one) adds fp32 *master copies* of weights and
# gradients, but fp32 training has no master copies: its weights are the fp32 copy. Mixed precision
# (ZeRO's accounting) keeps 2-byte weights and gradients beside fp32 weights and Adam's two moments:
# 2 + 2 + 4 + 4 + 4 = 16 bytes; `torch.autocast` keeps fp32 weights and gradients and caches 2-byte copies
# of the weights during the forward: 4 + 4 + 8 + 2 = 18 bytes. So 24 bytes is an upper bound nobody
# allocates. The engine's calculator counts what PyTorch allocates by default
# (`convention="pytorch"`) and the rule of thumb on request (`"hipergator"`).
#
# Then there are the **activations**: the intermediate results of the forward pass that autograd
# keeps because the backward pass needs them. They grow with the batch.
#
# We measure all of it in a job: `anatomy.measure_training_memory` builds the engine's model and
# optimizer, runs one training step, and counts the bytes of every tensor, the activations included
# (it watches what autograd saves).

# %% tags=["nbval-ignore-output"]
model_name, shape = s.anatomy_model, s.anatomy_input
small, large = s.anatomy_batches
cases = [dict(model_name=model_name, input_shape=shape, optimizer="sgd", batch_size=small),
         dict(model_name=model_name, input_shape=shape, optimizer="adamw", batch_size=small),
         dict(model_name=model_name, input_shape=shape, optimizer="sgd", batch_size=large)]
job = coursekit.submit_function(anatomy.measure_cases, cases, name=labs.job_name(pseudo, "anat"),
                                **s.job)
measured = anatomy.anatomy_table(failures.result_or_none(job, s.timeout_s, "anatomy") or [])
# the GPU the jobs run on, as the job saw it (without one, an example GPU: an H100)
gpu = measured[0]["gpu"] if measured else None
gpu_gib = anatomy.gpu_memory_gib(gpu, default=s.example_gpu_memory_gib)
gpu_label = gpu["name"] if gpu and gpu["name"] else "example GPU (an H100)"
print(f"jobs' GPU: {gpu_label}, {gpu_gib:.1f} GiB" if gpu and gpu["name"] else "jobs' GPU: none")
measured.with_columns("model", "optimizer", "batch_size", "parameters_m", "parameters_mib", "gradients_mib",
                      "optimizer_state_mib", "activations_mib", "bytes_per_param")

# %% [markdown]
# The job's network ends in a 10-class head (`parameters_m`: for ResNet-50, 23.5 M parameters); the 25.6 M
# usually quoted for ResNet-50, and the table of section 3, count ImageNet's 1000-class head (2 M weights
# more). The same figures from the calculator (`coursekit.train.memory.estimate_memory`), in both conventions.
# It measures the activations of a two-sample forward and scales them to the batch.

# %% tags=["exact-arithmetic"]
model = build_model(TrainConfig(model=model_name, image_size=shape[-1]), 10, shape)
estimates = [estimate_memory(model, opt, "fp32", small, shape, convention=conv)
             for opt in ("sgd", "adamw") for conv in ("pytorch", "hipergator")]
calculator = anatomy.estimate_table(estimates)
calculator.with_columns("optimizer", "convention", "parameters_mib", "gradients_mib", "optimizer_state_mib",
                        "master_copy_mib", "activations_mib", "bytes_per_parameter")

# %% [markdown]
# ## 3. Activations grow with the batch and with the depth
#
# Doubling the batch doubles what each layer saves; a deeper network has more layers that save.
# Below, the calculator's activation memory per image for three ResNets on 224 × 224 images, and the
# total against the batch size, on log axes: in proportion to the batch is a line of slope 1, and a deeper
# network the same line shifted up.

# %% tags=["exact-arithmetic"]
depth_rows = []
for name in s.depth_models:
    net = build_model(TrainConfig(model=name, image_size=224), 1000, (3, 224, 224))
    estimate = estimate_memory(net, "sgd", "fp32", 1, (3, 224, 224), convention="pytorch")
    depth_rows.append({"model": name, "parameters_m": estimate.num_parameters / 1e6,
                       "activations_mib_per_image": estimate.activations_bytes / anatomy.MIB})
depth = labs.ResultsTable(depth_rows, title="activations per 224 x 224 image (calculator, fp32)")
depth

# %%
anatomy.activations_figure(depth, [16, 32, 64, 128, 256, 512], gpu_gib, gpu_label)

# %% [markdown]
# ## 4. Evaluation: `torch.no_grad`
#
# `model.eval()` changes how some layers behave (batch norm uses its running statistics, dropout is
# off) but autograd still records the forward pass and keeps its activations. `with torch.no_grad():`
# (or `torch.inference_mode()`, made for inference alone) stops that. The job above measured both, on the
# same batch:

# %% tags=["nbval-ignore-output"]
if measured:
    row = measured[0]
    print(f"model.eval() alone:         {row['eval_saved_bytes'] / anatomy.MIB:8.2f} MiB saved for a backward pass")
    print(f"model.eval() + no_grad:     {row['no_grad_saved_bytes'] / anatomy.MIB:8.2f} MiB")

# %% [markdown]
# ## 5. What fills the GPU
#
# The calculator, for ResNet-50 on 224 × 224 images with AdamW, against the memory of the GPU your jobs
# run on (`gpu_gib`, read by the job above): the static part (parameters, gradients, state, about
# 0.4 GiB) is small for a 25 M-parameter network; the activations dominate and set the largest batch;
# bf16 halves the activations. The calculator also names what a GPU's allocator holds beside them: the
# backward's temporary gradients and, on fp32 tensors, the workspace cuDNN's autotuner tries algorithms
# with during the first steps (a fixed part and a share of the activations, so it grows with the batch: the
# line above the figure gives it per bar). That holds for **TF32** as well: TF32 changes how the
# tensor cores multiply, not the tensors' type, so the autotuner tries the same algorithms (lab 04's
# ladder peaks at the same 27.3 GiB in fp32 and in tf32 at batch 256). In bf16 it needs little (the
# calculator counts none).
# For a model with billions of parameters it is the other way round: at 16 bytes per parameter,
# 80 GiB hold the training state of 5.4 billion parameters *before* a single activation.

# %% tags=["exact-arithmetic"]
resnet50 = build_model(TrainConfig(model="resnet50", image_size=224), 1000, (3, 224, 224))
fill = [estimate_memory(resnet50, "adamw", precision, 256, (3, 224, 224), convention="pytorch",
                        cudnn_benchmark=True) for precision in ("fp32", "bf16")]
fill = [fill[0], fill[0].at_batch(1024), fill[1].at_batch(1024), fill[1].at_batch(2048)]
print("cuDNN autotuning workspace (calculator): " + ", ".join(
    f"{e.precision} batch {e.batch_size} {e.workspace_bytes / anatomy.GIB:.1f} GiB" for e in fill))
anatomy.fill_figure(fill, [f"{e.precision}, batch {e.batch_size}" for e in fill], gpu_gib, gpu_label)

# %% [markdown] tags=["exercise"]
# ### Exercise — the largest batch that fits
#
# With the calculator's figures for ResNet-50, AdamW, fp32 (`fill[0]`), compute the largest batch size
# whose estimated total stays under 90 % of your GPU's memory `gpu_gib` (in GiB: 2³⁰ bytes; keep 10 % for
# the CUDA context and the allocator's rounding). `fill[0].fixed_bytes` is what does not grow with the batch and
# `fill[0].per_sample_bytes` what each image adds. Store it in `largest_batch`.

# %% tags=["exercise", "exact-arithmetic"]
### BEGIN SOLUTION
budget = 0.9 * gpu_gib * 2**30
largest_batch = int((budget - fill[0].fixed_bytes) // fill[0].per_sample_bytes)
### END SOLUTION
print("largest batch that fits (estimate):", largest_batch)

# %% [markdown]
# ## 6. The calculator against the measured peak
#
# On a GPU, PyTorch's caching allocator reports the most memory it handed out to tensors at once:
# `torch.cuda.max_memory_allocated`, which the engine writes into its summary (in MiB, over the whole
# run). We compare it with the calculator computed for the same run — like with like: what the
# calculator counts is what the allocator hands out, the first steps (cuDNN's autotuning) included;
# `steady_mib` is the calculator's peak once cuDNN has chosen its algorithms.
#
# A check is only worth something on data it was not tuned on. The calculator's autotuning term (a fixed
# part and a share of the activations) was **fitted** to ResNet-50 in fp32 on an H100 and an H200, so
# agreeing there is a *calibration*, not evidence. The **held-out** case is one the term was not fitted
# to: ResNet-50 in bf16 with channels_last, where the calculator predicts from first principles alone.
#
# Neither figure contains what `nvidia-smi` shows on top: the CUDA context and the cuDNN/cuBLAS
# libraries (0.5–1 GiB per process), and what the allocator *reserved* but does not use
# (`reserved_mib` − `peak_mem_mib`: rounding to its block sizes and fragmentation). NCCL buffers and
# other processes on the same GPU come on top as well.

# %% tags=["exact-settings"]
profile.explain(
    gpu="The jobs below measure the peak for a few batch sizes of each case (ResNet-50, SGD, synthetic images "
        "kept on the GPU: two batches).",
    cpu="Without a GPU there is no allocator to ask: the comparison is the one of section 2, tensor by tensor.")

# %% tags=["nbval-ignore-output"]
peaks = None
if s.peak_base is not None:
    peak_configs = ([s.peak_base.replace(batch_size=b) for b in s.peak_batch_sizes]
                    + [s.peak_base.replace(batch_size=b, **s.heldout) for b in s.heldout_batch_sizes])
    peaks = labs.run_sweep(peak_configs, name=labs.job_name(pseudo, "peak"), **s.job, timeout_s=s.timeout_s)
    failed = failures.report_failures(peaks, "the peak-memory jobs")
    peaks = anatomy.add_estimates(failures.completed(peaks), s.heldout)
    display(peaks.with_columns("case", "label", "batch_size", "peak_mem_mib", "estimate_mib", "steady_mib",
                               "reserved_mib"))
    display(anatomy.peaks_figure(peaks))

# %% [markdown]
# ## 7. Exit ticket
#
# Five questions on what *you* measured and computed above, and one you compute from the lab's idea: the
# answers are in your own tables, not in a book. The ticket is checked at once, and your score is saved
# for the instructor.

# %%
sgd_small, sgd_large = (measured[0], measured[2]) if len(measured) >= 3 else ({}, {})
fits = int((0.9 * gpu_gib * 2**30 - fill[0].fixed_bytes) // fill[0].per_sample_bytes)
TRANSFER_PARAMS = 7e9  # a 7-billion-parameter model: not one this lab ran
ticket = labs.exit_ticket("03", {
    "gpu_vs_cpu": labs.Question("How many times more training images per second did the GPU process than the CPU?",
                                gpu_vs_cpu, unit="×", rel_tol=0.1),
    "bytes_sgd": labs.Question("How many bytes per parameter did training with SGD and momentum keep (activations "
                               "aside)?", anatomy.bytes_per_parameter(sgd_small) if sgd_small else None, unit="B",
                               abs_tol=0.5),
    "activation_growth": labs.Question(f"How many times more activation memory did batch {large} keep than batch "
                                       f"{small}?", sgd_large["activations_bytes"] / sgd_small["activations_bytes"]
                                       if sgd_small else None, unit="×", rel_tol=0.05),
    "no_grad_mib": labs.Question("How many MiB did evaluation under torch.no_grad keep for a backward pass?",
                                 sgd_small["no_grad_saved_bytes"] / anatomy.MIB if sgd_small else None, unit="MiB",
                                 abs_tol=0.5),
    "largest_batch": labs.Question("By the calculator, what is the largest ResNet-50 batch (AdamW, fp32) that fits "
                                   "in 90 % of your GPU's memory?", fits, rel_tol=0.05, computed=True),
    "state_7b_gib": labs.Question(
        "Transfer: how many GiB do the weights, gradients and optimizer state of a 7-billion-parameter model take "
        "when it trains in fp32 with AdamW (activations aside)?", TRANSFER_PARAMS * 16 / 2**30, unit="GiB",
        rel_tol=0.03, computed=True),
})
answers = ticket.blank()

# %% [markdown] tags=["exercise"]
# Write your answers as `answers = {"gpu_vs_cpu": ..., "bytes_sgd": ..., ...}` in place of the two
# placeholder lines: numbers you read above, and for the last one a number you compute (bytes per
# parameter × parameters, in GiB). A question you leave out counts as not answered.

# %% tags=["exercise"]
### BEGIN SOLUTION
answers = {"gpu_vs_cpu": gpu_vs_cpu, "bytes_sgd": anatomy.bytes_per_parameter(sgd_small) if sgd_small else None,
           "activation_growth": sgd_large["activations_bytes"] / sgd_small["activations_bytes"] if sgd_small else None,
           "no_grad_mib": sgd_small["no_grad_saved_bytes"] / anatomy.MIB if sgd_small else None,
           "largest_batch": largest_batch, "state_7b_gib": 7e9 * (4 + 4 + 8) / 2**30}
### END SOLUTION
graded = ticket.grade(answers)

# %% [markdown]
# ## 8. The claims, checked

# %%
estimate_sgd = next(e for e in estimates if e.optimizer == "sgd" and e.convention == "pytorch")
verdicts = [
    labs.check_claim("the deeper ResNets keep more activations per image (from ResNet-34 to ResNet-50 also because "
                     "a bottleneck block keeps more than a basic one)",
                     depth.column("activations_mib_per_image") == sorted(set(depth.column("activations_mib_per_image"))),
                     "counted in a forward pass on the CPU: "
                     + ", ".join(f"{r['model']} {r['activations_mib_per_image']:.0f} MiB" for r in depth)),
    *anatomy.check_peak_claims(peaks, s.peak_tolerance, applies=profile.is_gpu,
                               why_not="no GPU allocator here: section 2 compares tensor by tensor"),
]
if len(measured) < 3:
    print("the anatomy job returned nothing (see its failure above): the claims on its tensors are not checked")
else:
    sgd, adam, sgd_large = measured[0], measured[1], measured[2]
    verdicts += [
        labs.check_claim("fp32 training keeps 12 bytes per parameter with SGD + momentum and 16 with AdamW",
                         round(anatomy.bytes_per_parameter(sgd), 1) == 12.0 and round(anatomy.bytes_per_parameter(adam), 1) == 16.0,
                         f"{anatomy.bytes_per_parameter(sgd):.2f} and {anatomy.bytes_per_parameter(adam):.2f} B/parameter"),
        labs.check_claim("AdamW's state is twice that of SGD with momentum",
                         abs(adam["optimizer_state_bytes"] / sgd["optimizer_state_bytes"] - 2) < 0.01,
                         f"ratio {adam['optimizer_state_bytes'] / sgd['optimizer_state_bytes']:.3f}"),
        labs.check_claim("activations grow in proportion to the batch size",
                         abs(sgd_large["activations_bytes"] / sgd["activations_bytes"] - large / small) < 0.02 * large / small,
                         f"batch {small} -> {large}: x{sgd_large['activations_bytes'] / sgd['activations_bytes']:.3f}"),
        labs.check_claim("under torch.no_grad evaluation keeps no activations; eval() alone keeps them all",
                         sgd["no_grad_saved_bytes"] == 0 and sgd["eval_saved_bytes"] > 0.9 * sgd["activations_bytes"],
                         f"{sgd['no_grad_saved_bytes']} B vs {sgd['eval_saved_bytes'] / anatomy.MIB:.1f} MiB"),
        labs.check_claim("the calculator's count of a CPU forward pass is what the job saved on its device (same counting)",
                         estimate_sgd.parameters_bytes == sgd["parameters_bytes"]
                         and estimate_sgd.optimizer_state_bytes == sgd["optimizer_state_bytes"]
                         and abs(estimate_sgd.activations_bytes / sgd["activations_bytes"] - 1) < 0.05,
                         f"activations {estimate_sgd.activations_bytes / anatomy.MIB:.2f} MiB estimated, "
                         f"{sgd['activations_bytes'] / anatomy.MIB:.2f} MiB measured"),
    ]
