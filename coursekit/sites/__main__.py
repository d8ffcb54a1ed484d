"""``python -m coursekit.sites``: the folder holding the course's job folders (its site's ``log_folder``),
for shell scripts (the sbatch templates set ``COURSEKIT_RUN_ROOT`` from it)."""

from coursekit.sites import site_jobs_dir

print(site_jobs_dir())
