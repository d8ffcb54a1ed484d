"""Lab 03: memory anatomy measured tensor by tensor."""

from coursekit.labs import lab03_gpu_memory as anatomy


def test_bytes_per_parameter_and_activations():
    sgd = anatomy.measure_training_memory("mlp", (3, 8, 8), "sgd", 4, device="cpu")
    adam = anatomy.measure_training_memory("mlp", (3, 8, 8), "adamw", 4, device="cpu")
    double = anatomy.measure_training_memory("mlp", (3, 8, 8), "sgd", 8, device="cpu")
    assert anatomy.bytes_per_parameter(sgd) == 12.0
    assert round(anatomy.bytes_per_parameter(adam), 2) == 16.0
    assert sgd["no_grad_saved_bytes"] == 0 and sgd["eval_saved_bytes"] > 0
    assert abs(double["activations_bytes"] / sgd["activations_bytes"] - 2) < 0.05
    assert sgd["train_peak_bytes"] is None  # no GPU allocator on a CPU
    assert sgd["gpu"]["device"] == "cpu" and sgd["gpu"]["total_memory_gb"] is None  # the job says what it ran on


def test_tables_add_megabytes():
    rows = anatomy.measure_cases([dict(model_name="mlp", input_shape=(3, 8, 8), optimizer="sgd", batch_size=2,
                                       device="cpu")])
    table = anatomy.anatomy_table(rows)
    assert table[0]["bytes_per_param"] == 12.0
    assert table[0]["parameters_mb"] == rows[0]["parameters_bytes"] / 1e6
