"""Lab 03: the GPU and its memory footprint."""

from cells import code, md

CELLS = [
    md("""
    # Lab 03 — The GPU and the memory footprint of training

    **Learning goals.** After this lab you can

    1. compare the same training step on a CPU and on a GPU, and say where the difference comes from;
    2. list what training keeps in memory — parameters, gradients, optimizer state, activations — and
       give the bytes per parameter for SGD and for Adam (and why "24 bytes" is quoted for Adam);
    3. predict how activations grow with the batch size and with the depth of a network;
    4. use `torch.no_grad` for evaluation and say what it saves;
    5. estimate with the engine's calculator what fills an 80 GB GPU, and check it against a measurement.
    """),
    code("""
    %matplotlib inline
    import coursekit
    from coursekit import labs
    from coursekit.labs import anatomy, plots, recorded
    from coursekit.train.config import TrainConfig
    from coursekit.train.memory import estimate_memory
    from coursekit.train.models import build_model

    pseudo = labs.choose_pseudonym("ada")
    profile = labs.choose_profile()
    print(profile)
    s = profile.settings("03")
    print(s)
    """),
    md("""
    ## 1. The same step on a CPU and on a GPU

    One training step of ResNet-50 on 224 × 224 images: about 4 GFLOP per image forward, twice that
    backward. A CPU core does tens of GFLOP/s; a GPU's tensor cores do hundreds of TFLOP/s, and its
    memory moves terabytes per second. On a GPU cluster both jobs below run (the CPU one on the GPU
    node's own cores); in the CPU profile we run the CPU job and set it next to the GPU figure recorded
    by the engine's benchmark on an H100 (batch 256, fp32).
    """),
    code("""
    step_configs = [s.step.replace(device=device, test_steps=steps) for device, steps in s.device_steps.items()]
    for config in step_configs:
        print(labs.engine_command(config))
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    steps_table = labs.run_sweep(step_configs, name=labs.job_name(pseudo, "step"), one_at_a_time=True,
                                 time_max=s.job["time_max"],  # no env: this job may use every core
                                 timeout_s=s.timeout_s, title="ResNet-50, one training step")
    recording = labs.load_gpu_ladder()
    if recording and profile.is_cpu:
        fp32 = recorded.ladder_table(recording).one(rung="fp32")
        steps_table.append({"device": f"{recording['device']} (recorded)", "images_per_s": fp32["img_s"],
                            "state": "recorded", "batch_size": 256})
    steps_table.with_columns("device", "state", "batch_size", "images_per_s")
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    measured = [r for r in steps_table if r["state"] != "recorded"]
    print(f"{len(measured)} measured run(s), {len(steps_table) - len(measured)} recorded figure(s)")
    figure = plots.bars([r["device"] for r in steps_table], [r["images_per_s"] for r in steps_table],
                        ylabel="images/s (log scale)", title="ResNet-50 training throughput")
    figure.axes[0].set_yscale("log")
    figure
    """),
    md("""
    ## 2. What training keeps in memory

    For every parameter, training in fp32 keeps

    * the **parameter** itself (4 bytes),
    * its **gradient** (4 bytes),
    * the **optimizer state**: nothing for plain SGD, one momentum buffer for SGD with momentum (4 bytes),
      two moments for Adam/AdamW (8 bytes).

    That is 12 bytes per parameter for SGD with momentum and 16 for AdamW. The "24 bytes per parameter"
    often quoted for Adam also counts the fp32 *master copies* of weights and gradients that
    mixed-precision training keeps: an upper bound. The engine's calculator knows both conventions
    (`convention="pytorch"`, `"hipergator"`).

    Then there are the **activations**: the intermediate results of the forward pass that autograd
    keeps because the backward pass needs them. They grow with the batch.

    We measure all of it in a job: `anatomy.measure_training_memory` builds the engine's model and
    optimizer, runs one training step, and counts the bytes of every tensor, the activations included
    (it watches what autograd saves).
    """),
    code("""
    model_name, shape = s.anatomy_model, s.anatomy_input
    small, large = s.anatomy_batches
    cases = [dict(model_name=model_name, input_shape=shape, optimizer="sgd", batch_size=small),
             dict(model_name=model_name, input_shape=shape, optimizer="adamw", batch_size=small),
             dict(model_name=model_name, input_shape=shape, optimizer="sgd", batch_size=large)]
    job = coursekit.submit_function(anatomy.measure_cases, cases, name=labs.job_name(pseudo, "anat"),
                                    **s.job)
    measured = anatomy.anatomy_table(job.result(timeout=s.timeout_s))
    measured.with_columns("model", "optimizer", "batch_size", "parameters_mb", "gradients_mb", "optimizer_state_mb",
                          "activations_mb", "bytes_per_param")
    """),
    md("""
    The same figures from the calculator (`coursekit.train.memory.estimate_memory`), in both conventions.
    It measures the activations of a two-sample forward and scales them to the batch.
    """),
    code("""
    model = build_model(TrainConfig(model=model_name, image_size=shape[-1]), 10, shape)
    estimates = [estimate_memory(model, opt, "fp32", small, shape, convention=conv)
                 for opt in ("sgd", "adamw") for conv in ("pytorch", "hipergator")]
    calculator = anatomy.estimate_table(estimates)
    calculator.with_columns("optimizer", "convention", "parameters_mb", "gradients_mb", "optimizer_state_mb",
                            "master_copy_mb", "activations_mb", "bytes_per_parameter")
    """),
    md("""
    ## 3. Activations grow with the batch and with the depth

    Doubling the batch doubles what each layer saves; a deeper network has more layers that save.
    Below, the calculator's activation memory per image for three ResNets on 224 × 224 images, and the
    total against the batch size.
    """),
    code("""
    depth_rows = []
    for name in s.depth_models:
        net = build_model(TrainConfig(model=name, image_size=224), 1000, (3, 224, 224))
        estimate = estimate_memory(net, "sgd", "fp32", 1, (3, 224, 224), convention="pytorch")
        depth_rows.append({"model": name, "parameters_m": estimate.num_parameters / 1e6,
                           "activations_mb_per_image": estimate.activations_bytes / 1e6})
    depth = labs.ResultsTable(depth_rows, title="activations per 224 x 224 image (calculator, fp32)")
    depth
    """),
    code("""
    figure, ax = plots.new_figure()
    batches = [16, 32, 64, 128, 256, 512]
    for row in depth:
        ax.plot(batches, [row["activations_mb_per_image"] * b / 1e3 for b in batches], marker="o", label=row["model"])
    ax.axhline(s.gpu_memory_gb, color="tab:red", linestyle="--", label=f"{s.gpu_memory_gb} GB")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("activations (GB)")
    ax.legend(fontsize="small")
    figure
    """),
    md("""
    ## 4. Evaluation: `torch.no_grad`

    `model.eval()` changes how some layers behave (batch norm uses its running statistics, dropout is
    off) but autograd still records the forward pass and keeps its activations. Only
    `with torch.no_grad():` stops that. The job above measured both, on the same batch:
    """),
    code("""
    row = measured[0]
    print(f"model.eval() alone:         {row['eval_saved_bytes'] / 1e6:8.2f} MB saved for a backward pass")
    print(f"model.eval() + no_grad:     {row['no_grad_saved_bytes'] / 1e6:8.2f} MB")
    """),
    md("""
    ## 5. What fills 80 GB

    The calculator, for ResNet-50 on 224 × 224 images with AdamW: the static part (parameters, gradients,
    state, about 0.4 GB) is small for a 25 M-parameter network; the activations dominate and set the
    largest batch: fp32 at batch 1024 does not fit, bf16 halves the activations.
    For a model with billions of parameters it is the other way round: at 16 bytes per parameter,
    80 GB hold the training state of 5 billion parameters *before* a single activation.
    """),
    code("""
    resnet50 = build_model(TrainConfig(model="resnet50", image_size=224), 1000, (3, 224, 224))
    fill = [estimate_memory(resnet50, "adamw", precision, batch, (3, 224, 224), convention="pytorch")
            for precision, batch in (("fp32", 256), ("fp32", 1024), ("bf16", 1024), ("bf16", 2048))]
    anatomy.fill_figure(fill, [f"{e.precision}, batch {e.batch_size}" for e in fill], s.gpu_memory_gb)
    """),
    md("""
    ### Exercise — the largest batch that fits

    With the calculator's figures for ResNet-50, AdamW, fp32 (`fill[0]`), compute the largest batch size
    whose estimated total stays under 90 % of 80 GB (keep 10 % for the allocator and temporary buffers).
    Store it in `largest_batch`.
    """, tags=("exercise",)),
    code("""
    ### BEGIN SOLUTION
    budget = 0.9 * s.gpu_memory_gb * 1e9
    static = fill[0].total_bytes - fill[0].activations_bytes
    per_image = fill[0].activations_bytes / fill[0].batch_size
    largest_batch = int((budget - static) // per_image)
    ### END SOLUTION
    print("largest batch that fits (estimate):", largest_batch)
    """, tags=("exercise",)),
    md("""
    ## 6. The calculator against the measured peak

    On a GPU the allocator reports the peak it handed out. In the gpu profile the jobs below measure it
    for a few batch sizes and we put the calculator's total next to it; the measured peak is a little
    higher (temporary buffers of the backward pass, cuDNN workspaces). In the cpu profile there is no GPU
    allocator to ask: the comparison is the one of section 2, tensor by tensor.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    peaks = None
    if s.peak_base is not None:
        peaks = labs.run_sweep([s.peak_base.replace(batch_size=b) for b in s.peak_batch_sizes],
                               name=labs.job_name(pseudo, "peak"), **s.job, timeout_s=s.timeout_s)
        peaks.add_column("estimate_mb", lambda r: r["summary"]["memory_estimate"]["total_bytes"] / 2**20)
        display(peaks.with_columns("batch_size", "state", "peak_mem_mb", "estimate_mb"))
        figure, ax = plots.new_figure()
        plots.scatter_line(peaks, "batch_size", "peak_mem_mb", ax=ax, label="measured peak", logx=True)
        plots.scatter_line(peaks, "batch_size", "estimate_mb", ax=ax, label="calculator", logx=True)
        display(figure)
    else:
        print("no GPU in this profile: see section 2 for calculator vs measurement")
    """),
    md("""
    ## 7. The claims, checked
    """),
    code("""
    sgd, adam, sgd_large = measured[0], measured[1], measured[2]
    estimate_sgd = next(e for e in estimates if e.optimizer == "sgd" and e.convention == "pytorch")
    verdicts = [
        labs.check_claim("fp32 training keeps 12 bytes per parameter with SGD + momentum and 16 with AdamW",
                         round(anatomy.bytes_per_parameter(sgd), 1) == 12.0 and round(anatomy.bytes_per_parameter(adam), 1) == 16.0,
                         f"{anatomy.bytes_per_parameter(sgd):.2f} and {anatomy.bytes_per_parameter(adam):.2f} B/parameter"),
        labs.check_claim("AdamW's state is twice that of SGD with momentum",
                         abs(adam["optimizer_state_bytes"] / sgd["optimizer_state_bytes"] - 2) < 0.01,
                         f"ratio {adam['optimizer_state_bytes'] / sgd['optimizer_state_bytes']:.3f}"),
        labs.check_claim("activations grow in proportion to the batch size",
                         abs(sgd_large["activations_bytes"] / sgd["activations_bytes"] - large / small) < 0.02 * large / small,
                         f"batch {small} -> {large}: x{sgd_large['activations_bytes'] / sgd['activations_bytes']:.3f}"),
        labs.check_claim("deeper networks keep more activations per image",
                         depth.column("activations_mb_per_image") == sorted(depth.column("activations_mb_per_image")),
                         ", ".join(f"{r['model']} {r['activations_mb_per_image']:.0f} MB" for r in depth)),
        labs.check_claim("under torch.no_grad evaluation keeps no activations; eval() alone keeps them all",
                         sgd["no_grad_saved_bytes"] == 0 and sgd["eval_saved_bytes"] > 0.9 * sgd["activations_bytes"],
                         f"{sgd['no_grad_saved_bytes']} B vs {sgd['eval_saved_bytes'] / 1e6:.1f} MB"),
        labs.check_claim("the calculator's pytorch convention matches the measured tensors",
                         estimate_sgd.parameters_bytes == sgd["parameters_bytes"]
                         and estimate_sgd.optimizer_state_bytes == sgd["optimizer_state_bytes"]
                         and abs(estimate_sgd.activations_bytes / sgd["activations_bytes"] - 1) < 0.05,
                         f"activations {estimate_sgd.activations_bytes / 1e6:.2f} MB estimated, {sgd['activations_bytes'] / 1e6:.2f} MB measured"),
        labs.check_claim("the calculator's total is within 25 % of the GPU's measured peak",
                         peaks is not None and all(abs(r["estimate_mb"] / r["peak_mem_mb"] - 1) < 0.25 for r in peaks),
                         "per batch: " + (", ".join(f"{r['batch_size']}: {r['estimate_mb']:.0f}/{r['peak_mem_mb']:.0f} MB"
                                                      for r in peaks) if peaks is not None else "-"),
                         applies=profile.is_gpu, why_not="no GPU allocator in this profile"),
    ]
    """),
]
