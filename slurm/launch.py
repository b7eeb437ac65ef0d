"""Submit an accelrl recipe to SLURM (or run it on this machine) through submitit.

    python -m slurm.launch recipes.ppo_atari --nodes 2 --gpus-per-node 8 --partition gpu \\
        --time 240 -- --env.game Breakout --total-frames 10_000_000
    python -m slurm.launch recipes.ppo_atari --sweep seed=0,1,2 -- --env.game Pong  # job array
    python -m slurm.launch recipes.ppo_atari --dry-run -- --env.game Pong  # print sbatch script
    python -m slurm.launch recipes.ppo_atari --local --wait -- --env.game CartPole-v1

The first argument names a recipe module (one with a ``Config`` dataclass and ``train(cfg)``).
Flags before ``--`` are the launcher's, parsed with argparse: they are few and flat, and its
append action gives the repeatable ``--sweep`` and ``--sbatch-line``. Flags after ``--`` are the
recipe's own tyro flags, parsed and validated here, so a wrong value stops before anything is
submitted.

Every run gets its own folder: the recipe's ``--run-dir`` or ``runs/<recipe>[-<sweep
values>]-<time>``. A job that reaches its time limit or is preempted gets USR2
``--signal-delay-s`` seconds before the end; the run saves a checkpoint and submitit requeues
the job, which resumes from that run folder (``accelrl.launch.job.RecipeJob``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from typing import Any

import submitit
from submitit.core.utils import FailedJobError

from accelrl.launch.job import local_executor, submit_jobs
from accelrl.launch.plan import LaunchError, PlannedRun, load_recipe, plan_runs, uses_cuda
from accelrl.tools.atari_scores import SUITES

PROG = "python -m slurm.launch"


@dataclass
class LaunchOptions:
    """What to run and where; see ``python -m slurm.launch --help`` for each field."""

    recipe: str
    recipe_args: list[str] = field(default_factory=list)
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: int = 60
    job_name: str | None = None
    folder: str = "slurm_logs/%j"
    sbatch_line: list[str] = field(default_factory=list)
    signal_delay_s: int = 120
    max_requeues: int = 3
    sweep: list[str] = field(default_factory=list)
    suite: str | None = None
    dry_run: bool = False
    local: bool = False
    wait: bool = False

    @property
    def ntasks_per_node(self) -> int:
        """One task per GPU unless given; one task for CPU jobs."""
        return self.tasks_per_node or max(1, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ntasks_per_node

    @property
    def recipe_name(self) -> str:
        return self.recipe.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------------
# command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        # one line instead of argparse's usage block plus message
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def parse_args(argv: list[str]) -> LaunchOptions:
    """Launcher flags (before ``--``) and the recipe's flags (after it)."""
    if "--" in argv:
        split = argv.index("--")
        own, recipe_args = argv[:split], argv[split + 1 :]
    else:
        own, recipe_args = argv, []
    p = _Parser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        usage=f"{PROG} RECIPE_MODULE [launcher flags] -- [recipe flags]",
        epilog=f"Recipe flags: {PROG} RECIPE_MODULE -- --help",
    )
    d = LaunchOptions(recipe="")
    p.add_argument("recipe", help="recipe module, e.g. recipes.ppo_atari (or recipes/ppo_atari.py)")
    p.add_argument("--nodes", type=int, default=d.nodes, help="nodes per job (default 1)")
    p.add_argument(
        "--gpus-per-node", type=int, default=d.gpus_per_node, help="GPUs per node; 0: a CPU job"
    )
    p.add_argument(
        "--tasks-per-node",
        type=int,
        help="processes (ranks) per node (default: one per GPU, 1 for CPU jobs)",
    )
    p.add_argument(
        "--cpus-per-task",
        type=int,
        help="CPUs per task (default: the partition's CPUs per node / tasks per node, from sinfo)",
    )
    p.add_argument("--mem-gb", type=float, help="memory per node in GB (default: the cluster's)")
    p.add_argument("--partition", help="SLURM partition")
    p.add_argument("--account", help="SLURM account")
    p.add_argument("--qos", help="SLURM quality of service")
    p.add_argument("--constraint", help="SLURM node features, e.g. a100")
    p.add_argument("--time", type=int, default=d.time, help="time limit in minutes (default 60)")
    p.add_argument("--job-name", help="job name (default: accelrl-<recipe>)")
    p.add_argument(
        "--folder",
        default=d.folder,
        help="submitit folder for scripts, pickles and logs; %%j is the job id "
        "(default slurm_logs/%%j)",
    )
    p.add_argument(
        "--sbatch-line",
        action="append",
        default=[],
        metavar="OPTION",
        help="extra sbatch option, repeatable: --sbatch-line=--mail-type=END or "
        "'#SBATCH --exclusive' (these override the launcher's own)",
    )
    p.add_argument(
        "--signal-delay-s",
        type=int,
        default=d.signal_delay_s,
        help="USR2 this many seconds before the time limit: the run checkpoints and the job "
        "is requeued (default 120)",
    )
    p.add_argument(
        "--max-requeues",
        type=int,
        default=d.max_requeues,
        help="requeues after reaching the time limit (submitit's max_num_timeout; preemptions "
        "do not count) (default 3)",
    )
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="config field and values, repeatable; the cartesian product is one job array "
        "(e.g. --sweep seed=0,1,2 --sweep ppo.lr=1e-4,3e-4)",
    )
    p.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default=None,
        help="sweep env.game over a game suite (atari5, atari10: Aitchison et al.'s predictive "
        "subsets; atari57: all); combine with --sweep seed=0,1,2 for seeds",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the sbatch script and submit nothing"
    )
    p.add_argument(
        "--local", action="store_true", help="run the job on this machine (submitit local)"
    )
    p.add_argument("--wait", action="store_true", help="wait for the jobs and print summaries")
    ns = p.parse_args(own)
    return LaunchOptions(recipe_args=recipe_args, **vars(ns))


def check_options(opts: LaunchOptions) -> None:
    """Launcher values that cannot work."""
    for name in ("nodes", "time", "tasks_per_node", "cpus_per_task"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise LaunchError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for name in ("gpus_per_node", "signal_delay_s", "max_requeues"):
        value = getattr(opts, name)
        if value < 0:
            raise LaunchError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
    if opts.mem_gb is not None and opts.mem_gb <= 0:
        raise LaunchError(f"--mem-gb must be > 0, got {opts.mem_gb}")
    if opts.signal_delay_s >= opts.time * 60:
        raise LaunchError(
            f"--signal-delay-s={opts.signal_delay_s} must be shorter than --time={opts.time} min"
        )
    if opts.dry_run and opts.local:
        raise LaunchError("--dry-run prints an sbatch script; it cannot be combined with --local")
    if opts.local and opts.nodes > 1:
        raise LaunchError(f"--local runs on this machine only; use --nodes 1, got {opts.nodes}")


# ---------------------------------------------------------------------------------------------
# executors


def parse_sbatch_line(line: str) -> tuple[str, str | bool]:
    """``--mail-type=END``, ``--exclusive`` or ``#SBATCH --x=y`` as (option, value or True).

    The option comes back in submitit's spelling (underscores), so that it replaces the
    launcher's own value for the same option instead of adding a second line.
    """
    text = line.strip().removeprefix("#SBATCH").strip()
    m = re.fullmatch(r"--([A-Za-z][A-Za-z0-9_-]*)(?:[= ]\s*(\S.*))?", text)
    if m is None:
        raise LaunchError(
            f"--sbatch-line {line!r}: expected a long sbatch option, e.g. "
            "--sbatch-line=--mail-type=END or --sbatch-line='#SBATCH --exclusive'"
        )
    return m.group(1).replace("-", "_"), (m.group(2) if m.group(2) is not None else True)


def slurm_parameters(opts: LaunchOptions) -> dict[str, Any]:
    """``SlurmExecutor.update_parameters`` arguments for these options."""
    # Requeueable, so that submitit's `scontrol requeue` works where JobRequeue=0 is the default
    # and a node failure requeues too (RecipeJob then resumes from the latest checkpoint).
    extra: dict[str, Any] = {"requeue": True}
    for line in opts.sbatch_line:
        key, value = parse_sbatch_line(line)
        if key == "no_requeue":
            extra.pop("requeue", None)
        extra[key] = value
    params: dict[str, Any] = {
        "job_name": opts.job_name or f"accelrl-{opts.recipe_name}",
        "nodes": opts.nodes,
        "ntasks_per_node": opts.ntasks_per_node,
        "time": opts.time,
        "signal_delay_s": opts.signal_delay_s,
        "additional_parameters": extra,
    }
    if opts.gpus_per_node:
        # --gres works on every SLURM version; --gpus-per-node needs 19.05+ and cons_tres
        params["gres"] = f"gpu:{opts.gpus_per_node}"
    if opts.cpus_per_task:
        params["cpus_per_task"] = opts.cpus_per_task
    if opts.mem_gb:
        params["mem"] = f"{round(opts.mem_gb * 1024)}M"
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(opts, name):
            params[name] = getattr(opts, name)
    return params


class _ScriptOnlyExecutor(submitit.SlurmExecutor):
    """A SlurmExecutor that only renders sbatch scripts, so --dry-run works without srun."""

    @classmethod
    def affinity(cls) -> int:
        return 2


def sbatch_script(opts: LaunchOptions, num_runs: int) -> str:
    """The sbatch script submitit would submit for these options (a job array when num_runs > 1)."""
    ex = _ScriptOnlyExecutor(opts.folder, max_num_timeout=opts.max_requeues)
    ex.update_parameters(**slurm_parameters(opts))
    if num_runs > 1:
        ex.parameters["map_count"] = num_runs  # what submitit sets for a batch (job array)
    # the same private call submitit makes when it writes the file it hands to sbatch
    return ex._make_submission_file_text(ex._submitit_command_str, "dry-run")


def make_executor(opts: LaunchOptions) -> submitit.Executor:
    if opts.local:
        return local_executor(
            opts.folder,
            time_min=opts.time,
            max_requeues=opts.max_requeues,
            tasks_per_node=opts.ntasks_per_node,
            gpus_per_node=opts.gpus_per_node,
            signal_delay_s=opts.signal_delay_s,
        )
    ex = submitit.SlurmExecutor(opts.folder, max_num_timeout=opts.max_requeues)
    ex.update_parameters(**slurm_parameters(opts))
    return ex


def check_target(opts: LaunchOptions) -> None:
    """Where the jobs go must exist and be able to run them."""
    if opts.dry_run:
        slurm_parameters(opts)  # --sbatch-line syntax
        return
    if not opts.local and shutil.which("sbatch") is None:
        raise LaunchError("no SLURM cluster found (sbatch not on PATH); use --local or --dry-run")
    if opts.local:
        ignored = [
            f"--{n.replace('_', '-')}"
            for n in ("cpus_per_task", "mem_gb", "partition", "account", "qos", "constraint")
            if getattr(opts, n)
        ] + (["--sbatch-line"] if opts.sbatch_line else [])
        if ignored:
            print(f"{PROG}: note: --local ignores {', '.join(ignored)}", file=sys.stderr)
    else:
        slurm_parameters(opts)
    if opts.world_size > 1 and importlib.util.find_spec("accelrl.distributed") is None:
        raise LaunchError(
            f"{opts.world_size} tasks per job need accelrl.distributed, which this install lacks"
        )


# ---------------------------------------------------------------------------------------------
# submit, report, wait


def submit(opts: LaunchOptions, runs: list[PlannedRun]) -> list[submitit.Job]:
    """One job, or one job array for a sweep."""
    try:
        return submit_jobs(make_executor(opts), opts.recipe, [run.cfg for run in runs])
    except FailedJobError as err:
        lines = [ln.strip() for ln in str(err).splitlines() if "error" in ln.lower()]
        raise LaunchError(f"sbatch failed: {lines[-1] if lines else err}") from None


def describe(opts: LaunchOptions, runs: list[PlannedRun], jobs: list[submitit.Job] | None) -> str:
    """Job ids (when submitted), run folders and log files, one block per run."""
    where = "local" if opts.local else "SLURM"
    blocks = []
    for i, run in enumerate(runs):
        title = f"{opts.recipe_name}" + (f" [{run.label}]" if run.label else "")
        lines = [f"{where} job {jobs[i].job_id}: {title}" if jobs else f"run {i}: {title}"]
        lines.append(f"  run dir: {run.cfg.run_dir}")
        if jobs:
            lines.append(f"  stdout:  {jobs[i].paths.stdout}")
            lines.append(f"  stderr:  {jobs[i].paths.stderr}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def wait(jobs: list[submitit.Job]) -> int:
    """Wait for every job; print each summary (rank 0's) as JSON. Returns the exit code."""
    failed = 0
    for job in jobs:
        try:
            summary = job.results()[0]
        except Exception as err:  # submitit re-raises the job's own exception
            failed += 1
            reason = next((ln for ln in reversed(str(err).splitlines()) if ln.strip()), repr(err))
            print(f"job {job.job_id} failed: {reason.strip()} (log: {job.paths.stderr})")
            continue
        print(f"job {job.job_id} done: {json.dumps(summary, default=str)}")
    return 1 if failed else 0


def partition_cpus(partition: str | None) -> tuple[str, int] | None:
    """(partition, CPUs per node) from ``sinfo``: the given partition or the default one (the
    fewest CPUs when its nodes differ); None without sinfo or an answer."""
    if shutil.which("sinfo") is None:
        return None
    cmd = ["sinfo", "-h", "-o", "%P %c"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [line.split() for line in out.splitlines() if len(line.split()) == 2]
    if not partition:
        rows = [r for r in rows if r[0].endswith("*")] or rows
    cpus = [int(c.rstrip("+")) for _, c in rows if c.rstrip("+").isdigit()]
    if not cpus:
        return None
    return rows[0][0].rstrip("*"), min(cpus)


def default_cpus_per_task(opts: LaunchOptions) -> None:
    """Without ``--cpus-per-task``, give each task its share of a node's cores (a cluster
    whose default is one CPU per task would otherwise run every rank's learner and simulators
    on one core, silently) and say so on stderr."""
    if opts.cpus_per_task is not None or opts.local:
        return
    found = partition_cpus(opts.partition)
    if found is None:
        if not opts.dry_run:
            print(f"{PROG}: note: sinfo gave no CPU count; --cpus-per-task left to the "
                  "cluster's default", file=sys.stderr)  # fmt: skip
        return
    name, cpus = found
    opts.cpus_per_task = max(1, cpus // opts.ntasks_per_node)
    print(f"{PROG}: --cpus-per-task {opts.cpus_per_task} (partition {name}: {cpus} CPUs per "
          f"node / {opts.ntasks_per_node} tasks per node)", file=sys.stderr)  # fmt: skip


def prepare(opts: LaunchOptions) -> list[PlannedRun]:
    """Every check, then the runs to submit; raises ``LaunchError`` and submits nothing."""
    check_options(opts)
    recipe = load_recipe(opts.recipe)
    opts.recipe = recipe.__name__
    sweeps = list(opts.sweep)
    if opts.suite is not None:
        if any(spec.split("=", 1)[0].strip() == "env.game" for spec in sweeps):
            raise LaunchError("--suite sweeps env.game already; drop --sweep env.game=...")
        sweeps.append("env.game=" + ",".join(SUITES[opts.suite]))
    runs = plan_runs(
        recipe,
        opts.recipe_args,
        sweeps,
        runs_here=opts.local,
        prog=f"{PROG} {opts.recipe} --",
    )
    check_launch(opts, runs)
    return runs


def check_launch(opts: LaunchOptions, runs: list[PlannedRun]) -> None:
    """The checks between planned runs and a submission: devices against the GPUs asked for,
    the target (sbatch, --sbatch-line), and the default --cpus-per-task (said on stderr)."""
    if not opts.local and opts.gpus_per_node == 0 and any(uses_cuda(r.cfg) for r in runs):
        raise LaunchError("the recipe flags ask for a CUDA device but --gpus-per-node is 0")
    check_target(opts)
    default_cpus_per_task(opts)  # last: a refused launch prints its one error line only


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit code (2: refused before submitting)."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        runs = prepare(opts)
        if opts.dry_run:
            print(sbatch_script(opts, len(runs)), end="")
            print(describe(opts, runs, None), file=sys.stderr)
            return 0
        jobs = submit(opts, runs)
    except LaunchError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(describe(opts, runs, jobs), flush=True)
    if opts.wait:
        return wait(jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
