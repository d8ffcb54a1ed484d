"""coursekit: deep-learning labs on GPU clusters, jobs from the notebook through submitit and Slurm."""

__version__ = "0.1.0"
