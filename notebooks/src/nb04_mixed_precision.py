"""Lab 04: mixed precision, tensor cores, channels_last."""

from cells import code, md

CELLS = [
    md("""
    # Lab 04 — Mixed precision and tensor cores

    **Learning goals.** After this lab you can

    1. compare fp32, tf32, bf16 and fp16: their range, their precision, and what each costs in speed
       and memory;
    2. explain why fp16 training needs loss scaling, show a gradient that underflows without it, and read
       a `GradScaler`'s scale and skipped steps;
    3. say what `channels_last` changes in memory and why convolutions on tensor cores like it;
    4. read the speed-up ladder fp32 → tf32 → bf16 → + channels_last → + `torch.compile` in images/s and
       TFLOP/s, with the memory each rung uses.

    The numbers of sections 1–3 are exact and are computed right here; the training runs are jobs of the
    engine. The speed-up ladder needs tensor cores: on a GPU cluster the jobs measure it, in the cpu
    profile the notebook shows the ladder recorded by the engine's benchmark on an H100.
    """),
    code("""
    %matplotlib inline
    import coursekit
    from coursekit import labs
    from coursekit.labs import numerics, plots, recorded

    pseudo = labs.choose_pseudonym("ada")
    profile = labs.choose_profile()
    print(profile)
    s = profile.settings("04")
    print(s)
    """),
    md("""
    ## 1. Four formats

    A floating-point number is a sign, an exponent (the range) and a mantissa (the precision). bf16 keeps
    fp32's 8 exponent bits and so its range, with only 7 mantissa bits; fp16 keeps 10 mantissa bits but
    only 5 exponent bits: its largest value is 65504 and its smallest positive value 2⁻²⁴ ≈ 6·10⁻⁸.
    tf32 is not a storage format: Ampere and later tensor cores read fp32 inputs, round them to 10
    mantissa bits, and multiply — fp32's range with fp16's precision, enabled with
    `torch.backends.cuda.matmul.allow_tf32` (the engine's `--precision tf32`).
    """),
    code("""
    numerics.formats_table()
    """),
    md("""
    ## 2. Underflow, and why fp16 scales the loss

    Gradients are often tiny. In fp16 anything below 2⁻²⁴ becomes 0 (a value halfway rounds to the even
    neighbour, which is 0): that part of the gradient is lost. Loss scaling multiplies the loss — hence
    every gradient — by a large factor *S* before the backward pass, so that small gradients land in
    fp16's range, then divides the (fp32) weight gradients by *S* before the optimizer step.
    """),
    code("""
    numerics.underflow_table()
    """),
    md("""
    Scaling has the opposite risk: a large gradient times *S* overflows to infinity. `GradScaler` handles
    both: it starts with a large scale (2¹⁶); when a step produces an inf or NaN gradient it **skips**
    that step and halves the scale; after 2000 steps without trouble it doubles it. Here a model of one
    weight whose gradient of 1000 flows through an fp16 operation: the first steps overflow and are
    skipped, until the scale is small enough.
    """),
    code("""
    numerics.grad_scaler_demo()
    """),
    md("""
    ## 3. The same run in fp32, bf16 and fp16

    Three jobs of the engine, identical except for `--precision`: autocast runs the matrix products in
    the low precision and keeps the weights, the loss and the reductions in fp32; fp16 also uses a
    `GradScaler`, whose scale the engine writes into every step record (`loss_scale`, `skipped_steps`).
    """),
    code("""
    configs = [s.base.replace(precision=p) for p in s.precisions]
    for config in configs:
        print(labs.engine_command(config))
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    table = labs.run_sweep(configs, name=labs.job_name(pseudo, "amp"), **s.job, timeout_s=s.timeout_s,
                           title="precision sweep")
    table.with_columns("precision", "job_id", "state", "train_loss", "val_acc", "images_per_s")
    """),
    code("""
    print("states:", table.column("state"))
    fp16 = table.one(precision="fp16")
    print("fp16 run: loss scale", fp16["summary"]["loss_scale"], "- skipped steps", fp16["summary"]["skipped_steps"])
    """),
    code("""
    figure, (left, right) = plots.new_figure(ncols=2)
    plots.curves(table, "steps", "step", "loss", ["precision"], ax=left, title="training loss")
    plots.curves(table.where(precision="fp16"), "steps", "step", "loss_scale", ["precision"], ax=right,
                 title="fp16: GradScaler's scale")
    figure
    """),
    md("""
    On a CPU the low precisions change little in speed (there are no tensor cores; bf16 and fp16 may
    even be slower). What matters here: the three runs learn alike.

    ## 4. channels_last

    A batch of images is a 4-d tensor (N, C, H, W). By default the width varies fastest in memory
    (NCHW). With `channels_last` the channels do (NHWC): the shape is the same, the strides differ. Tensor-
    core convolutions work on NHWC; given NCHW, cuDNN must transpose before and after. The engine's
    `--channels-last` converts the model and every batch.
    """),
    code("""
    numerics.strides_table()
    """),
    md("""
    ## 5. Multiples of 8

    Tensor cores work on tiles: a matrix dimension that is a multiple of 8 (for fp16/bf16) fills them;
    one that is not gets padded or falls back to slower kernels. Batch sizes, channel counts and hidden
    sizes that are multiples of 8 (better: of 64) keep them fed. On a GPU the job below times square bf16
    matrix products of three sizes.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    matmuls = None
    if s.matmul_sizes:
        job = coursekit.submit_function(numerics.matmul_tflops, s.matmul_sizes, "bf16", name=labs.job_name(pseudo, "mm"),
                                        **s.job)
        matmuls = labs.ResultsTable(job.result(timeout=s.timeout_s), title="bf16 matmul")
        display(matmuls)
    else:
        print("needs a GPU: run this notebook in the gpu profile")
    """),
    md("""
    ## 6. The speed-up ladder

    ResNet-50, 224 × 224 images, batch 256, synthetic data kept on the GPU: each rung adds one change.
    TFLOP/s = images/s × the FLOPs of one training step per image. In the gpu profile the jobs below
    measure it; in the cpu profile the plot shows the recording of the engine's benchmark
    (`bench/gpu_ladder.py`), labelled with the machine it ran on.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    ladder = None
    if s.ladder:
        from coursekit.train.config import TrainConfig
        from coursekit.train.models import build_model

        rungs = [s.ladder_base.replace(**rung) for rung in s.ladder]
        ladder = labs.run_sweep(rungs, name=labs.job_name(pseudo, "ladder"), **s.job,
                                timeout_s=s.timeout_s, title="GPU ladder (measured)")
        net = build_model(TrainConfig(model="resnet50", image_size=224), 1000, (3, 224, 224))
        flop = numerics.training_flop_per_image(net, (3, 224, 224), 1000)
        base = ladder[0]["images_per_s"]
        ladder.add_column("rung", lambda r: "+".join([r["config"].precision] + ["channels_last"] * r["config"].channels_last
                                                   + ["compile"] * r["config"].compile))
        ladder.add_column("img_s", lambda r: r["images_per_s"])
        ladder.add_column("speedup", lambda r: r["images_per_s"] / base)
        ladder.add_column("tflops", lambda r: r["images_per_s"] * flop / 1e12)
        ladder.add_column("peak_mem_gb", lambda r: (r["peak_mem_mb"] or 0) / 1024)
        title = "ResNet-50 training ladder (measured)"
    else:
        recording = labs.load_gpu_ladder()
        if recording:
            ladder = recorded.ladder_table(recording)
            title = "ResNet-50 training ladder (recorded on " + recording["device"] + ")"
    if ladder is not None:
        display(ladder.with_columns("rung", "img_s", "speedup", "tflops", "peak_mem_gb"))
        figure, (left, right) = plots.new_figure(ncols=2)
        plots.bars(ladder.column("rung"), ladder.column("img_s"), ax=left, ylabel="images/s", title=title,
                   color=None if s.ladder else plots.RECORDED_COLOR)
        plots.bars(ladder.column("rung"), ladder.column("peak_mem_gb"), ax=right, ylabel="peak memory (GB)",
                   annotate="{:.1f}", color=None if s.ladder else plots.RECORDED_COLOR)
        display(figure)
    """),
    md("""
    ### Exercise — what share of the peak?

    An H100 SXM does about 989 TFLOP/s in dense bf16 on its tensor cores. For each rung of `ladder` (if
    there is one), compute the share of that peak it reaches (`tflops / 989`); store the rung names and
    shares in a dict `share_of_peak`. Why is a ResNet-50 far from the peak even at the best rung?
    """, tags=("exercise",)),
    code("""
    # NBVAL_IGNORE_OUTPUT
    H100_BF16_DENSE_TFLOPS = 989
    ### BEGIN SOLUTION
    share_of_peak = {row["rung"]: row["tflops"] / H100_BF16_DENSE_TFLOPS for row in ladder} if ladder is not None else {}
    ### END SOLUTION
    print({rung: f"{share:.1%}" for rung, share in share_of_peak.items()})
    """, tags=("exercise",)),
    md("""
    A ResNet-50 is made of many small convolutions, batch norms and element-wise operations: most of
    them are limited by memory bandwidth, not by arithmetic, and every kernel launch costs time. Only the
    large convolutions reach the tensor cores' rate; `torch.compile` helps by fusing the small operations.
    """, tags=("solution",)),
    md("""
    ## 7. The claims, checked
    """),
    code("""
    underflow = numerics.underflow_table()
    smallest, halfway = underflow.one(value=numerics.FP16_SMALLEST_SUBNORMAL), underflow.one(value=2.0**-25)
    losses = {row["precision"]: row["train_loss"] for row in table}
    worst = max(abs(losses[p] / losses["fp32"] - 1) for p in losses)
    scaler = numerics.grad_scaler_demo()
    verdicts = [
        labs.check_claim("in fp16, 2^-24 survives and 2^-25 underflows to 0; scaled by 2^16 it survives and comes back exactly",
                         smallest["as_fp16"] > 0 and halfway["as_fp16"] == 0 and halfway["unscaled_fp32"] == 2.0**-25,
                         f"2^-24 -> {smallest['as_fp16']:.3g}, 2^-25 -> {halfway['as_fp16']:g}, scaled and back: {halfway['unscaled_fp32']:.3g}"),
        labs.check_claim("GradScaler skips exactly the steps whose scaled gradient overflows fp16, halving the scale each time",
                         all(r["skipped"] == (not r["fits_fp16"]) for r in scaler),
                         f"{sum(scaler.column('skipped'))} skipped, final scale {scaler[-1]['scale']:g}"),
        labs.check_claim("bf16 and fp16 (with its GradScaler) train like fp32 (final loss within 5 %)",
                         worst < 0.05 and fp16["summary"].get("loss_scale") is not None,
                         ", ".join(f"{p}: {v:.4f}" for p, v in losses.items())),
        labs.check_claim("on tensor cores each rung of the ladder is faster than fp32",
                         ladder is not None and all(r["speedup"] > 1 for r in ladder[1:]),
                         "speed-ups " + (", ".join(f"{r['rung']}: x{r['speedup']:.2f}" for r in ladder) if ladder is not None else "-"),
                         applies=profile.is_gpu, why_not="no tensor cores in this profile (the recorded ladder above shows them)"),
        labs.check_claim("matrix sizes that are multiples of 8 run faster on tensor cores",
                         matmuls is not None and min(r["tflops"] for r in matmuls if r["multiple_of_8"])
                         > max(r["tflops"] for r in matmuls if not r["multiple_of_8"]),
                         ", ".join(f"{r['size']}: {r['tflops']:.0f} TFLOP/s" for r in matmuls) if matmuls is not None else "-",
                         applies=profile.is_gpu, why_not="no tensor cores in this profile"),
    ]
    """),
]
