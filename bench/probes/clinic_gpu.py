"""Lab 10's failure clinic on GPUs (NCCL): the four broken 2-rank jobs and the DETAIL re-run through the kit's local
site, with the gpu profile's settings; prints each job's symptoms and the clinic's claims, and writes them as JSON.

    python bench/probes/clinic_gpu.py --out bench/results/clinic_gpu.json   # a node with 2 GPUs
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
    args = parser.parse_args()
    os.environ.setdefault("COURSEKIT_COURSE_DIR", tempfile.mkdtemp(prefix="clinic-gpu-"))
    os.environ["COURSEKIT_SITE"] = "local"
    import torch

    from coursekit.labs.kit.settings import job_options
    from coursekit.labs.lab10_resilience import clinic
    from coursekit.labs.lab10_resilience.settings import clinic_settings

    settings = clinic_settings("gpu")
    started = time.monotonic()
    cases = clinic.submit_cases("probe", settings, **job_options("gpu", "00:05:00"))
    hang = cases.label_of("mismatched_collectives")
    detail = clinic.submit_cases("probe", settings, labels=[hang], debug=True, **job_options("gpu", "00:05:00"))
    states = {**cases.wait(240), "detail": detail.wait(120)[hang]}
    wall = time.monotonic() - started
    shown = {cases.case(label): str(clinic.symptoms(cases, label)) for label in cases.labels}
    shown["detail"] = str(clinic.symptoms(detail, hang))
    for case, text in shown.items():
        print(f"=== {case}\n{text}\n")
    results = []
    for claim in (lambda: clinic.clinic_claims(cases),
                  lambda: [clinic.mismatch_named(clinic.symptoms(detail, hang).ranks, settings["hang_timeout_s"])]):
        try:
            results.append(repr(claim()))
        except AssertionError as error:
            results.append(f"FAILED: {error}")
    record = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "gpus": torch.cuda.device_count(), "torch": torch.__version__, "settings": settings,
              "states": states, "wall_s": round(wall, 1), "symptoms": shown, "claims": results,
              "date": time.strftime("%Y-%m-%d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("device", "states", "wall_s", "claims")}, indent=1))


if __name__ == "__main__":
    main()
