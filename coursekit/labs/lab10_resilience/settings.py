"""Lab 10's numbers: :class:`ResilienceSettings`, one frozen dataclass whose typed fields are the lab's settings in
the order ``profile.settings("10")`` prints them; :func:`settings` gives them as the dict every lab's
``settings(profile)`` returns; :class:`ClinicSettings` is the failure clinic's part."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from coursekit.labs.kit.settings import QUIET, job_options, on_cifar10, workshop_budget
from coursekit.train.config import TrainConfig

GPUS = 2  # GPUs the notebook needs at once in the gpu profile (the clinic's two ranks)
SCRIPT_PATHS = {"resume": "lab10_resilience/train_resume.py"}
STARVING = {"workers": 0}  # lab 05's lesson: the loader in the training process, the GPU waits
# better fed, not fed: its 8 workers resize every image on the CPU, and the GPU still waits for them
# the GPU view's jobs train this many steps: within the first epoch of Fashion-MNIST (234 full batches of 256) and
# CIFAR-10 (195), so that no epoch boundary's pause (measured on an H200 at 300 steps: 3.5-6.5 s near 0 % busy,
# inside the measured windows) lowers the utilisation the table shows
GPU_VIEW_STEPS = 190
FED = {"workers": 8, "pin_memory": True, "non_blocking": True, "persistent_workers": True, "prefetch_factor": 4}


@dataclass(frozen=True)
class ClinicSettings:
    """The clinic's numbers in one profile (``s.clinic`` as a dict: ``ClinicSettings(**s.clinic)``)."""

    device: str  # "cpu" or "auto" (the GPU of each rank)
    stop_timeout_s: float  # rank_raises, oom_one_rank: process-group timeout, far above stop_bound_s
    hang_timeout_s: float  # mismatched_collectives: the short timeout (torch's default: 10 min with NCCL, 30 with gloo)
    rendezvous_timeout_s: float  # rendezvous_fails
    stop_bound_s: float  # the survivor must end this soon after the failing rank
    hang_margin_s: float  # the hang ends within [timeout, timeout + margin]
    nccl_debug: bool  # NCCL_DEBUG=INFO in the jobs' environment (GPUs)


def clinic_settings(profile: str) -> dict[str, Any]:
    """The clinic's defaults in ``profile`` ("cpu" or "gpu"), as the dict a lab's settings hold."""
    if profile == "cpu":
        # 2 shared cores: a rank's teardown and the launcher's stop (PEER_STOP_GRACE_S + the task's own grace)
        # take seconds; the hang's timeout also bounds the rendezvous, so it must outlast the gap between the two
        # ranks' imports of torch (2-6 s measured on 2 idle cores; more where eight processes start at once
        # beside a busy machine, as a room's notebooks or CI do). The survivor's stop took 19.5 s in one CI run
        # (2 cores, three test workers): the bound is a third of the process group's timeout, so a survivor that
        # hangs until the timeout still fails the claim by a wide margin
        values = ClinicSettings(device="cpu", stop_timeout_s=120, hang_timeout_s=15, rendezvous_timeout_s=5,
                                stop_bound_s=40, hang_margin_s=15, nccl_debug=False)
    elif profile == "gpu":
        # NCCL's watchdog notices a timed-out collective at the timeout, then waits up to a minute for its flight
        # recorder's dump (TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILLISEC, 60 s by default) before it aborts the process:
        # on 2 H200s (torch 2.11, bench/results/clinic_gpu.json) the watchdog caught the 20 s timeout and the
        # ranks ended 85 s into the hang
        values = ClinicSettings(device="auto", stop_timeout_s=120, hang_timeout_s=20, rendezvous_timeout_s=20,
                                stop_bound_s=30, hang_margin_s=90, nccl_debug=True)
    else:
        raise ValueError(f"profile={profile!r}: use 'cpu' or 'gpu'")
    return dict(values.__dict__)


@dataclass(frozen=True)
class ResilienceSettings:
    """Lab 10's settings in one profile, field by field in the order they print."""

    resume_steps: int  # the resumable script's steps (the uninterrupted reference runs as many)
    resume_checkpoint_every: int  # it saves every so many steps (and when it is signalled)
    resume_time_max: str | int  # the interrupted job's time limit: less than the run needs
    resume_step_time_s: float  # the interrupted job's pace: a step lasts at least this long
    resume_signal_after_s: float | None  # the notebook signals the job itself after so long (None: the site's clock)
    resume_device: str  # "cpu" or "cuda"
    resume_args: list[str]  # more options of the script (a larger model on a GPU)
    clinic: dict[str, Any]  # the failure clinic's timeouts and bounds (``ClinicSettings``)
    gpu_view_base: TrainConfig  # the GPU view's training job; its two loaders differ
    gpu_view_loaders: dict[str, dict[str, Any]]  # {"starving": ..., "better-fed": ...} (gpu_view.STARVING, FED)
    gpu_view_refresh_s: float  # the view redraws this often
    env_config: TrainConfig  # the environment part's job (the same from your Python and from a container)
    container_image: str | None  # the room's container image (.sif); None: $COURSEKIT_CONTAINER_IMAGE
    env_module: str | None  # the module a site's sbatch script loads (shown where no runtime exists)
    job: dict[str, Any]  # options of every submission (``submit(..., **s.job)``)
    timeout_s: int  # how long a cell waits for its jobs
    scripts: dict[str, str]  # the participant's scripts, relative to the notebook folder
    dataset_notice: str | None  # where CIFAR-10 is not staged: what the GPU view's jobs train on instead
    budget: dict[str, Any] | None  # the workshop's GPU budget (gpu profile; None: not shown)

    def as_dict(self) -> dict[str, Any]:
        """The fields in order (``budget`` only where there is one)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "budget" or self.budget is not None}


def typed_settings(profile: str) -> ResilienceSettings:
    """Lab 10's settings in ``profile`` ("cpu" or "gpu")."""
    if profile == "cpu":
        # two cores: 48 steps of a small MLP paced to 0.15 s (7 s), signalled by the notebook 2 s after its first
        # step: 5 s to spare for a kernel that reaches that cell late on a busy machine (it is the cell after the
        # submission). The local site's own clock signals 30 s before the limit: with a 1-minute limit it fired
        # while a start was still importing torch beside a CPU hog (CI), and that start began again from step 0;
        # 5 minutes keep it out of the way. The GPU view has nothing to sample here, so only the environment job
        # runs: a tiny engine job
        base = TrainConfig(model="mlp", dataset="generated", num_samples=256, num_classes=4, image_size=8,
                           batch_size=32, epochs=1, test_steps=2, **QUIET)
        return ResilienceSettings(
            resume_steps=48, resume_checkpoint_every=10, resume_time_max="00:05:00", resume_step_time_s=0.15,
            resume_signal_after_s=2.0, resume_device="cpu", resume_args=[], clinic=clinic_settings(profile),
            gpu_view_base=base, gpu_view_loaders={"starving": dict(STARVING), "better-fed": {"workers": 1}},
            gpu_view_refresh_s=0.5, env_config=base, container_image=None, env_module=None,
            job=job_options(profile, "00:10:00"), timeout_s=300, scripts=SCRIPT_PATHS, dataset_notice=None,
            budget=None)
    # gpu: the resumable MLP (width 4096, batch 4096: 51 ms a step on an H200) paced to 0.15 s a step, so that its
    # 800 steps outlast the site's signal (a 2-minute limit: the local site signals at 90 s, Slurm 60 s before the
    # end); the GPU view: ResNet-50 at 224 px, bf16, GPU_VIEW_STEPS a job (H200, Fashion-MNIST, 300 steps: workers=0
    # 37 % busy, 0.18 J/image; the better-fed loader 69 %, 0.14 J/image), within one epoch (see GPU_VIEW_STEPS)
    values: dict[str, Any] = {
        "gpu_view_base": TrainConfig(model="resnet50", dataset="cifar10", image_size=224, batch_size=256, epochs=1,
                                     precision="bf16", channels_last=True, test_steps=GPU_VIEW_STEPS, **QUIET)}
    on_cifar10(values, "gpu_view_base", image_size=224)
    base = values["gpu_view_base"]
    budget = workshop_budget({"the resumed job over its three starts": (1, 3.0),
                              "its uninterrupted reference": (1, 2.0),
                              "the clinic's broken jobs and the DETAIL re-run (2 GPUs x 1 min each)": (5, 2.0),
                              "the GPU view's starving and better-fed jobs": (2, 1.5)})
    return ResilienceSettings(
        resume_steps=800, resume_checkpoint_every=200, resume_time_max="00:02:00", resume_step_time_s=0.15,
        resume_signal_after_s=None, resume_device="cuda",
        resume_args=["--hidden", "4096", "--batch-size", "4096", "--data-size", "65536"],
        clinic=clinic_settings(profile), gpu_view_base=base,
        gpu_view_loaders={"starving": dict(STARVING), "better-fed": dict(FED)},
        gpu_view_refresh_s=1.0, env_config=base, container_image=None, env_module=None,
        job=job_options(profile, "00:20:00"), timeout_s=1200, scripts=SCRIPT_PATHS,
        dataset_notice=values["dataset_notice"], budget=budget)


def settings(profile: str) -> dict[str, Any]:
    """Lab 10's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("10")`` shows them."""
    return typed_settings(profile).as_dict()
