"""Lab 10's GPU view on one GPU: its starving and fed jobs (the gpu profile's settings) through the kit's local site,
one job at a time, each with the CPU threads given to it, and the view's two claims for each starving job against
the fed one; writes them as JSON.

The claim "the fed loader keeps the GPU busier" was measured on a 16-core host; a 2-GPU node gives each job more
threads (OMP_NUM_THREADS = its cores), which a starving loader (no workers: torch prepares each batch in the
training process) may use. Running the starving job with fewer threads than the host's shows how much its
utilisation depends on them.

    python bench/probes/gpu_view_gpu.py --out bench/results/gpu_view_gpu.json   # one GPU
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

FED = "better-fed"  # gpu_view.FED, the fed loader's label (importing the lab here would import torch first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", default=f"starving:0,starving:4,{FED}:0",
                        help="comma-separated job:threads, one job each in this order (threads 0: the site's default)")
    parser.add_argument("--profile", default="gpu", help="the lab's settings to use (cpu: a smoke test of this probe)")
    args = parser.parse_args()
    runs = [(label, int(count)) for label, count in (item.split(":") for item in args.runs.split(","))]
    os.environ.setdefault("COURSEKIT_COURSE_DIR", tempfile.mkdtemp(prefix="gpu-view-"))
    os.environ["COURSEKIT_SITE"] = "local"
    import torch

    from coursekit.labs.lab10_resilience import gpu_view
    from coursekit.labs.lab10_resilience.settings import typed_settings

    assert FED == gpu_view.FED, f"the fed loader is called {gpu_view.FED!r} now: update FED"
    s = typed_settings(args.profile)
    configs = gpu_view.loader_configs(s.gpu_view_base, s.gpu_view_loaders)
    watched = []
    for label, count in runs:  # one job at a time, each with its own threads
        env = {**s.job.get("env", {}), **({"OMP_NUM_THREADS": str(count)} if count else {})}
        (item,) = gpu_view.run_and_watch({f"{label}-t{count}": configs[label]}, name="view",
                                         refresh_s=s.gpu_view_refresh_s, timeout_s=s.timeout_s, **{**s.job, "env": env})
        watched.append(item)
    table = gpu_view.gpu_table(watched)
    print(table)
    fed = next(item.label for item in watched if item.label.startswith(gpu_view.FED))
    claims = {starving.label: {name: repr(claim) for name, claim in
                               gpu_view.gpu_claims(table, starving=starving.label, fed=fed).items()}
              for starving in watched if starving.label.startswith(gpu_view.STARVING)}
    for label, verdicts in claims.items():
        print(f"=== {label} against {fed}\n" + "\n".join(verdicts.values()))
    record = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "cpu_cores": os.cpu_count(), "torch": torch.__version__, "dataset": s.gpu_view_base.dataset,
              "host_threads": torch.get_num_threads(), "base": repr(s.gpu_view_base), "loaders": s.gpu_view_loaders,
              "rows": list(table), "claims": claims, "command": "python bench/probes/gpu_view_gpu.py --runs " + args.runs,
              "date": time.strftime("%Y-%m-%d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
