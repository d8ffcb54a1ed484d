"""Lab 10's GPU view on one GPU: its starving and fed jobs (the gpu profile's settings) through the kit's local site,
once per CPU thread count given to the jobs, and the view's two claims for each; writes them as JSON.

The claim "the fed loader keeps the GPU busier" was measured on a 16-core host; a 2-GPU node gives each job more
threads (OMP_NUM_THREADS = its cores), which a starving loader (no workers: torch prepares each batch in the
training process) may use. Running the pair at several thread counts shows how much the margin depends on them.

    python bench/probes/gpu_view_gpu.py --threads 16,4 --out bench/results/gpu_view_gpu.json   # one GPU
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", default="16,4", help="comma-separated OMP_NUM_THREADS values, one pair of jobs each")
    parser.add_argument("--profile", default="gpu", help="the lab's settings to use (cpu: a smoke test of this probe)")
    args = parser.parse_args()
    threads = [int(value) for value in args.threads.split(",")]
    os.environ.setdefault("COURSEKIT_COURSE_DIR", tempfile.mkdtemp(prefix="gpu-view-"))
    os.environ["COURSEKIT_SITE"] = "local"
    import torch

    from coursekit.labs.lab10_resilience import gpu_view
    from coursekit.labs.lab10_resilience.settings import typed_settings

    s = typed_settings(args.profile)
    configs = gpu_view.loader_configs(s.gpu_view_base, s.gpu_view_loaders)
    runs = []
    for count in threads:
        started = time.monotonic()
        job = {**s.job, "env": {**s.job.get("env", {}), "OMP_NUM_THREADS": str(count)}}
        watched = gpu_view.run_and_watch(configs, name=f"view-t{count}", refresh_s=s.gpu_view_refresh_s,
                                         timeout_s=s.timeout_s, **job)
        table = gpu_view.gpu_table(watched)
        claims = gpu_view.gpu_claims(table)
        runs.append({"omp_num_threads": count, "wall_s": round(time.monotonic() - started, 1),
                     "rows": [{k: v for k, v in row.items()} for row in table],
                     "claims": {name: repr(claim) for name, claim in claims.items()}})
        print(f"=== OMP_NUM_THREADS={count}\n{table}\n" + "\n".join(runs[-1]["claims"].values()), flush=True)
    record = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "cpu_cores": os.cpu_count(), "torch": torch.__version__, "dataset": s.gpu_view_base.dataset,
              "base": repr(s.gpu_view_base), "loaders": s.gpu_view_loaders, "runs": runs,
              "command": "python bench/probes/gpu_view_gpu.py --threads " + args.threads,
              "date": time.strftime("%Y-%m-%d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
