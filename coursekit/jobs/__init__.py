"""Jobs from the notebook: submit (submitit, Slurm or local), follow, reattach after a restart."""

from coursekit.jobs.handle import Job, JobFailedError, get_job, list_jobs
from coursekit.jobs.submit import gpu_jobs_submitter, submit_function, submit_jobs
from coursekit.slurm_cli import SlurmError

__all__ = ["Job", "JobFailedError", "SlurmError", "get_job", "gpu_jobs_submitter", "list_jobs",
           "submit_function", "submit_jobs"]
