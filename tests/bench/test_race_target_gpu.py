"""bench/probes/race_target_gpu.py: the lab's settings it runs, and its reading of planted curves."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "probes"))

import race_target_gpu as probe  # noqa: E402


def test_the_runs_are_the_labs_gpu_settings_with_the_target_out_of_reach() -> None:
    from coursekit.labs import lab_settings

    s = lab_settings("09", "gpu")
    _, configs = probe.lab_configs("gpu", {})
    assert configs["baseline"] == s.baseline and configs["tuned"] == s.baseline.replace(**s.tuned)
    args = configs["tuned"].replace(target_acc=probe.UNREACHABLE).to_args()
    assert args[args.index("--target-acc") + 1] == "1.0" and args[args.index("--eval-every") + 1] == "50"
    assert args[args.index("--confirm-fraction") + 1] == "0.5"
    _, changed = probe.lab_configs("gpu", probe.parse_overrides(["num_samples=30000", "epochs=8"]))
    assert changed["tuned"].num_samples == 30000 and changed["tuned"].epochs == 8 and changed["tuned"].batch_size == 512
    with pytest.raises(SystemExit, match="no field"):
        probe.parse_overrides(["epoch=3"])


def run(recipe: str, seed: int, accs: list[float], seconds_per_eval: float, steps_per_epoch: int = 100) -> dict:
    curve = [{"epoch": 0.5 * (i + 1), "step": 50 * (i + 1), "clock_s": seconds_per_eval * (i + 1),
              "wall_s": 10 + 2 * seconds_per_eval * (i + 1), "val_acc": acc, "held_out_acc": acc - 0.002}
             for i, acc in enumerate(accs)]
    return {"name": f"{recipe}-{seed}", "recipe": recipe, "seed": seed, "capped": False, "curve": curve,
            "steps_per_epoch": steps_per_epoch, "val_samples": 5000, "confirm_samples": 5000, "held_out_eval_s": 0.0,
            "observed_epochs": curve[-1]["epoch"], "epochs": [{"epoch": 1, "wall_s": 12.0}]}


def test_candidates_time_epoch_margin_and_selection() -> None:
    ramp = [0.80 + 0.01 * i for i in range(12)]  # 0.90 first at the 11th evaluation: epoch 5.5
    runs = [run("baseline", seed, ramp, 5.0 + 0.1 * seed) for seed in range(3)]
    runs += [run("tuned", seed, ramp, 2.0 + 0.1 * seed) for seed in range(3)]
    rows = {r["target"]: r for r in probe.candidates(runs, [0.85, 0.9, 0.95], probe.rival_wall_s(runs))}
    b, t = rows[0.9]["baseline"], rows[0.9]["tuned"]
    assert b["all_reached"] and b["earliest_epoch"] == pytest.approx(5.5) and b["epoch_std"] == 0.0
    assert b["time_s_mean"] == pytest.approx(5.1 * 11) and t["time_s_mean"] == pytest.approx(2.1 * 11)
    assert rows[0.9]["margin_se"] > 3 and rows[0.9]["speedup"] == pytest.approx(5.1 / 2.1)
    assert rows[0.95]["margin_se"] is None and rows[0.95]["baseline"]["reached"] == 0
    assert rows[0.9]["notebook_s"] > rows[0.85]["notebook_s"] > probe.OTHER_CELLS_S
    assert [r["target"] for r in probe.selected(list(rows.values()), 5.0)] == [0.9]
    assert [r["target"] for r in probe.selected(list(rows.values()), 3.0)] == [0.85, 0.9]


def test_the_plan_gives_each_baseline_seed_a_gpu_and_the_tuned_seeds_turns_on_the_rest() -> None:
    def jobs() -> list[dict]:
        return [{"name": f"{r}-{s}", "recipe": r, "seed": s} for s in range(3) for r in ("baseline", "tuned")]

    four = jobs()
    probe.plan(four, ["0", "1", "2", "3"], probe.GPU_BUDGET_S, None)
    base, tuned = [j for j in four if j["recipe"] == "baseline"], [j for j in four if j["recipe"] == "tuned"]
    assert [j["lane"] for j in base] == [[0], [1], [2]] and {j["cap_s"] for j in base} == {probe.GPU_BUDGET_S - 5}
    assert all(j["lane"] == [3] for j in tuned)
    assert 3 * (tuned[0]["cap_s"] + probe.KILL_GRACE_S) <= probe.GPU_BUDGET_S  # three turns fit the budget
    two = jobs()
    probe.plan(two, ["0", "1"], 300.0, None)  # too few GPUs for lanes: waves of 2
    assert all(j["lane"] == [0, 1] for j in two) and two[0]["cap_s"] == pytest.approx(295 / 3 - probe.KILL_GRACE_S)
