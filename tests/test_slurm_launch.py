"""The SLURM launcher: sbatch scripts, refusals before submitting, the job's resume rule, and
(marked `slurm`) real jobs on the local test cluster (slurm/testing/local_cluster.sh)."""

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit

from accelrl.launch.job import RecipeJob
from recipes.ppo_atari import Config
from slurm.launch import main, parse_args, prepare, submit
from tests.helpers import cartpole_flags, run_main

ROOT = Path(__file__).resolve().parents[1]

# A CartPole PPO run of a few seconds.
TINY = cartpole_flags("--total-frames", "1024")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the launcher from an empty folder: its default runs/ and slurm_logs/ land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def launch(capsys, *argv: str) -> tuple[int, str, str]:
    return run_main(main, capsys, *argv)


def sbatch_lines(script: str) -> dict[str, str]:
    lines = [
        ln.removeprefix("#SBATCH --") for ln in script.splitlines() if ln.startswith("#SBATCH")
    ]
    return dict((ln.split("=", 1) + [""])[:2] for ln in lines)


def test_dry_run_prints_the_sbatch_script_and_submits_nothing(in_tmp, capsys):
    code, out, err = launch(
        capsys,
        *("recipes.ppo_atari", "--nodes", "2", "--gpus-per-node", "8", "--partition", "P"),
        *("--time", "240", "--dry-run", "--", "--env.game", "Breakout", "--device", "cuda"),
    )
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n")
    flags = sbatch_lines(out)
    assert flags["nodes"] == "2"
    assert flags["ntasks-per-node"] == "8"  # one task per GPU
    assert flags["gres"] == "gpu:8"
    assert flags["time"] == "240"
    assert flags["partition"] == "P"
    assert flags["signal"] == "USR2@120"
    assert "requeue" in flags and "array" not in flags
    assert "-m submitit.core._submit" in out
    assert "run dir:" in err and "ppo_atari" in err
    assert list(in_tmp.iterdir()) == []


def test_dry_run_of_a_sweep_is_one_job_array_with_a_run_dir_per_member(in_tmp, capsys):
    code, out, err = launch(
        capsys,
        *("recipes.ppo_atari", "--sweep", "seed=0,1,2", "--sweep", "ppo.clip-epsilon=0.1,0.2"),
        *("--dry-run", "--", *TINY),
    )
    assert code == 0, err
    assert sbatch_lines(out)["array"] == "0-5%6"
    dirs = [ln.split("run dir:")[1].strip() for ln in err.splitlines() if "run dir:" in ln]
    assert len(set(dirs)) == 6
    assert any("seed=2-ppo.clip_epsilon=0.2" in d for d in dirs)


def test_suite_sweeps_its_games_times_the_seeds(in_tmp, capsys):
    code, out, err = launch(
        capsys,
        *("recipes.ppo_atari", "--suite", "atari5", "--sweep", "seed=0,1"),
        *("--dry-run", "--", "--total-frames", "1000"),
    )
    assert code == 0, err
    assert sbatch_lines(out)["array"] == "0-9%10"
    members = [ln.split("[", 1)[1].rstrip("]") for ln in err.splitlines() if ln.startswith("run ")]
    games = ("battle_zone", "double_dunk", "name_this_game", "phoenix", "qbert")
    assert sorted(members) == sorted(f"seed={s}-env.game={g}" for s in (0, 1) for g in games)
    code, _, err = launch(
        capsys,
        *("recipes.ppo_atari", "--suite", "atari5", "--sweep", "env.game=Pong,Breakout"),
        "--dry-run",
    )
    assert code == 2 and "--suite sweeps env.game already" in err


def test_dry_run_passes_cluster_options_and_extra_sbatch_lines(in_tmp, capsys):
    code, out, err = launch(
        capsys,
        *("recipes.ppo_atari", "--account", "acc", "--qos", "high", "--constraint", "a100"),
        *("--cpus-per-task", "6", "--mem-gb", "32", "--job-name", "pong", "--tasks-per-node", "2"),
        *("--sbatch-line=--mail-type=END", "--sbatch-line", "#SBATCH --exclusive"),
        "--sbatch-line=--ntasks-per-node=3",
        *("--dry-run", "--", *TINY),
    )
    assert code == 0, err
    flags = sbatch_lines(out)
    expected = {"account": "acc", "qos": "high", "constraint": "a100", "cpus-per-task": "6"}
    assert {k: flags[k] for k in expected} == expected
    assert flags["mem"] == "32768M" and flags["job-name"] == "pong"
    assert flags["ntasks-per-node"] == "3" and "gres" not in flags  # the extra line wins
    assert out.count("--ntasks-per-node=") == 1
    assert flags["mail-type"] == "END" and flags["exclusive"] == ""


BAD = [
    (["recipes.no_such_recipe"], "unknown recipe module"),
    (["accelrl.config"], "is not a recipe"),
    (["--nodes", "0"], "--nodes must be >= 1"),
    (["--sweep", "seed"], "expected KEY=V1,V2"),
    (["--sweep", "seed=0,,1"], "expected KEY=V1,V2"),
    (["--sweep", "sed=0,1"], "did you mean seed"),
    (["--sweep", "env=0,1"], "is not a field"),
    (["--", "--env.game", "Pongg"], "invalid --env.game='Pongg'"),
    (["--", "--seed", "abc"], "Error parsing --seed"),
    (["--", "--no-such-flag", "1"], "Unrecognized options"),
    (["--", "--resume"], "no checkpoint in"),
    (["--", "--device", "cuda"], "--gpus-per-node is 0"),
    (["--sbatch-line", "exclusive"], "expected a long sbatch option"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_bad_input_is_refused_in_one_line_before_submitting(argv, message, in_tmp, capsys):
    if argv[0].startswith("-"):
        argv = ["recipes.ppo_atari", *argv]
    # --dry-run: should a check fail to refuse, the test still submits nothing
    code, out, err = launch(capsys, argv[0], "--dry-run", *argv[1:])
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("python -m slurm.launch: error: ")
    assert message in err
    assert list(in_tmp.iterdir()) == []


def test_local_runs_on_one_node_only(in_tmp, capsys):
    code, out, err = launch(capsys, "recipes.ppo_atari", "--local", "--nodes", "2", "--", *TINY)
    assert code == 2
    assert err.startswith("python -m slurm.launch: error: --local runs on this machine only")
    assert list(in_tmp.iterdir()) == []


def test_without_sbatch_it_asks_for_local_or_dry_run(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(in_tmp))
    code, out, err = launch(capsys, "recipes.ppo_atari", "--", *TINY)
    assert code == 2
    assert err == (
        "python -m slurm.launch: error: no SLURM cluster found (sbatch not on PATH); "
        "use --local or --dry-run\n"
    )


def test_command_line_flag_error_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "slurm.launch", "recipes.ppo_atari", "--no-such-flag"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "unrecognized arguments: --no-such-flag" in proc.stderr


def tiny_config(run_dir: Path, **changes) -> Config:
    cfg = Config(total_frames=1024, run_dir=str(run_dir), **changes)
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.collector.steps_per_batch = 64
    cfg.log.eval_episodes, cfg.log.tensorboard, cfg.log.progress = 0, False, False
    return cfg


def test_job_resumes_exactly_when_its_run_dir_holds_a_checkpoint(tmp_path):
    # A requeued job asks to resume, but the first attempt may have died before any checkpoint.
    job = RecipeJob("recipes.ppo_atari", tiny_config(tmp_path / "run", resume=True))
    assert job.config_for_this_start().resume is False
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "ckpt_000000000512.pt").touch()
    assert job.config_for_this_start().resume is True


def test_checkpoint_resubmits_the_same_run_with_resume(tmp_path):
    job = RecipeJob("recipes.ppo_atari", tiny_config(tmp_path / "run"))
    delayed = job.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    again = delayed.function
    assert isinstance(again, RecipeJob) and again.module_name == "recipes.ppo_atari"
    assert again.cfg == dataclasses.replace(job.cfg, resume=True)


def test_job_trains_then_a_restart_continues_from_its_checkpoint(tmp_path):
    cfg = tiny_config(tmp_path / "run")
    assert RecipeJob("recipes.ppo_atari", cfg)()["frames"] == 1024
    # The same job started again (as after a requeue) with a larger budget continues the run.
    summary = RecipeJob("recipes.ppo_atari", dataclasses.replace(cfg, total_frames=2048))()
    assert summary["frames"] == 2048 and summary["updates"] == 32


def test_local_job_runs_through_submitit(in_tmp, capsys):
    code, out, err = launch(
        capsys, "recipes.ppo_atari", "--local", "--wait", "--time", "5", "--", *TINY
    )
    assert code == 0, out + err
    assert "local job" in out and '"frames": 1024' in out
    (run_dir,) = (in_tmp / "runs").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 1024


@pytest.mark.slurm
def test_sbatch_accepts_the_dry_run_scripts(in_tmp, capsys):
    for sweep in ([], ["--sweep", "seed=0,1"]):
        code, out, err = launch(
            capsys, "recipes.ppo_atari", "--partition", "debug", "--time", "5", *sweep, "--dry-run"
        )
        assert code == 0, err
        script = in_tmp / "job.sh"
        script.write_text(out)
        proc = subprocess.run(
            ["sbatch", "--test-only", str(script)], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert "to start at" in proc.stderr


def submitted(out: str) -> list[dict[str, str]]:
    """Job id, run dir and log paths of each job the launcher printed."""
    jobs: list[dict[str, str]] = []
    for line in out.splitlines():
        if line.startswith("SLURM job "):
            jobs.append({"id": line.split()[2].rstrip(":")})
        elif line.startswith("  ") and ":" in line:
            key, value = line.strip().split(":", 1)
            jobs[-1][key] = value.strip()
    return jobs


@pytest.mark.slurm
def test_cartpole_job_completes_on_slurm(in_tmp, capsys):
    code, out, err = launch(
        capsys, "recipes.ppo_atari", "--time", "5", "--cpus-per-task", "1", "--wait", "--", *TINY
    )
    assert code == 0, out + err
    (job,) = submitted(out)
    assert f"job {job['id']} done" in out
    assert Path(job["stdout"]).exists() and Path(job["stderr"]).exists()
    summary = json.loads((Path(job["run dir"]) / "summary.json").read_text())
    assert summary["frames"] == 1024


@pytest.mark.slurm
def test_sweep_runs_as_a_job_array_with_two_run_dirs(in_tmp, capsys):
    code, out, err = launch(
        capsys,
        *("recipes.ppo_atari", "--time", "5", "--cpus-per-task", "1", "--sweep", "seed=0,1"),
        *("--wait", "--", *TINY),
    )
    assert code == 0, out + err
    jobs = submitted(out)
    assert [j["id"].split("_")[1] for j in jobs] == ["0", "1"]
    assert len({j["id"].split("_")[0] for j in jobs}) == 1  # one array
    seeds = []
    for job in jobs:
        run_dir = Path(job["run dir"])
        assert json.loads((run_dir / "summary.json").read_text())["frames"] == 1024
        seeds.append(json.loads((run_dir / "config.json").read_text())["config"]["seed"])
    assert seeds == [0, 1]


@pytest.mark.slurm
def test_two_node_job_trains_data_parallel(in_tmp, capsys):
    # The local cluster's two fake nodes: one rank on each, gloo over 127.0.0.1.
    code, out, err = launch(
        capsys,
        *("recipes.ppo_atari", "--nodes", "2", "--time", "5", "--cpus-per-task", "1", "--wait"),
        *("--", *TINY),
    )
    assert code == 0, out + err
    (job,) = submitted(out)
    summary = json.loads(out.split(f"job {job['id']} done: ")[1].splitlines()[0])
    assert summary["world_size"] == 2 and summary["frames"] == 1024
    assert "node=1(2)" in Path(job["stdout"].replace("_0_log", "_1_log")).read_text()


@pytest.mark.slurm
@pytest.mark.slow  # about 55 s, 30 s of it SLURM's requeue delay
def test_signalled_job_checkpoints_requeues_and_resumes(in_tmp):
    # USR2 is what SLURM sends --signal-delay-s before the time limit (and what submitit uses
    # for preemption): the run checkpoints at the next batch boundary, submitit requeues the job
    # (same id), and the restart resumes from the checkpoint. --time 15: submitit counts a
    # signal this early as a preemption, not a timeout. The restart waits cred_expire (30 s).
    flags = [
        *TINY,
        "--total-frames",
        "8192",
        "--log.checkpoint-every-frames",
        "100000",
    ]  # last wins
    opts = parse_args(["recipes.ppo_atari", "--time", "15", "--cpus-per-task", "1", "--", *flags])
    (run,) = prepare(opts)
    (job,) = submit(opts, [run])
    metrics = Path(run.cfg.run_dir) / "metrics.csv"
    try:
        # Waits for an event (rows written, or the job ending early); 300 s only guards a hang
        # (a busy cluster may take a while to schedule the job).
        deadline = time.time() + 300
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
            assert not job.done(), f"the job ended before training: {job.stderr()}"
            assert time.time() < deadline, "the job did not start training within 300 s"
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal", "USR2", job.job_id], check=True)
        summary = job.results()[0]
    finally:
        if not job.done(force_check=True):
            job.cancel(check=False)
    assert summary["frames"] == 8192
    log = Path(job.paths.stderr).read_text()
    assert "SIGUSR2: stopped at" in log
    assert "resumed from" in log
    frames = [int(row.split(",")[0]) for row in metrics.read_text().splitlines()[1:]]
    assert frames == sorted(set(frames))  # no rows repeated after the resume


@pytest.mark.slurm
@pytest.mark.slow  # about a minute, 30 s of it SLURM's requeue delay
def test_two_node_job_preempted_stops_both_ranks_requeues_and_resumes(in_tmp):
    """USR2 to both tasks of a 2-node data-parallel job: the ranks agree to stop after the same
    batch, rank 0 checkpoints, submitit requeues the job and both ranks resume; the run ends
    with one metrics row per update and the same weights on both ranks."""
    flags = [*TINY, "--total-frames", "16384", "--log.checkpoint-every-frames", "100000"]
    opts = parse_args([
        "recipes.ppo_atari", "--nodes", "2", "--time", "15", "--cpus-per-task", "1", "--",
        *flags,
    ])  # fmt: skip
    (run,) = prepare(opts)
    (job,) = submit(opts, [run])
    metrics = Path(run.cfg.run_dir) / "metrics.csv"
    try:
        deadline = time.time() + 300  # a hang guard; the loop waits for rows or the job's end
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
            assert not job.done(), f"the job ended before training: {job.stderr()}"
            assert time.time() < deadline, "the job did not start training within 300 s"
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal", "USR2", job.job_id], check=True)
        results = job.results()
    finally:
        if not job.done(force_check=True):
            job.cancel(check=False)
    by_rank = {r["rank"]: r for r in results}
    assert sorted(by_rank) == [0, 1] and by_rank[0]["frames"] == 16384
    assert by_rank[0]["weights_checksum"] == by_rank[1]["weights_checksum"]
    log = Path(job.paths.stderr).read_text()
    assert "SIGUSR2: stopped at" in log and "resumed from" in log, log[-3000:]
    frames = [int(row.split(",")[0]) for row in metrics.read_text().splitlines()[1:]]
    assert frames == list(range(128, 16384 + 1, 128)), "one row per update, none repeated"


def calibrated_fps(tmp_path) -> float:
    """Frames/s of the TINY recipe on this machine now, one torch thread as in a 1-CPU job."""
    from accelrl.cli import run_recipe
    from recipes import ppo_atari

    argv = [*TINY, "--total-frames", "4096", "--run-dir", str(tmp_path / "calibrate"),
            "--threads.torch-threads", "1"]  # fmt: skip
    summary = run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
    return float(summary["fps"])


@pytest.mark.slurm
@pytest.mark.slow  # 2-3 min: each attempt runs 20-50 s before SLURM's signal, requeues wait 31 s
def test_job_past_its_time_limit_checkpoints_requeues_and_ends_with_exact_frames(in_tmp):
    # A real time limit, not a simulated signal: --time 1 (SLURM's minimum) with the signal
    # 10 s before the end, which slurmctld (checking every 30 s) sends 20-50 s into each attempt.
    # The budget is this machine's measured speed x 105 s, so it needs more than one attempt
    # (at most 50 s each, even if the calibration ran at half speed: 52 s) and at most ~6 of at
    # least 20 s when the job runs at the calibrated speed;
    # every attempt stops at a batch boundary, checkpoints, is requeued under the same id and
    # resumes; the frames logged must be exactly one row per batch, none lost or repeated.
    batch = 64
    total = batch * max(64, round(calibrated_fps(in_tmp) * 105 / batch))
    flags = [*TINY, "--total-frames", str(total), "--log.checkpoint-every-frames", "1000000"]
    opts = parse_args([
        "recipes.ppo_atari", "--time", "1", "--signal-delay-s", "10", "--max-requeues", "16",
        "--cpus-per-task", "1", "--", *flags,
    ])  # fmt: skip
    (run,) = prepare(opts)
    (job,) = submit(opts, [run])
    try:
        summary = job.results()[0]
    finally:
        if not job.done(force_check=True):
            job.cancel(check=False)
    assert summary["frames"] == total
    log = Path(job.paths.stderr).read_text()
    stops = log.count("SIGUSR2: stopped at")
    assert stops >= 1 and log.count("resumed from") == stops, log[-3000:]
    metrics = Path(run.cfg.run_dir) / "metrics.csv"
    frames = [int(row.split(",")[0]) for row in metrics.read_text().splitlines()[1:]]
    assert frames == list(range(batch, total + 1, batch))


@pytest.mark.slurm
@pytest.mark.parametrize("tasks,cpus", [("1", "2"), ("2", "1")])
def test_cpus_per_task_defaults_to_the_partitions_share(tasks, cpus, in_tmp, capsys):
    # The local cluster's nodes have 2 CPUs each: 1 task gets both, 2 tasks one each.
    code, out, err = launch(
        capsys, "recipes.ppo_atari", "--tasks-per-node", tasks, "--dry-run", "--", *TINY
    )
    assert code == 0, err
    assert sbatch_lines(out)["cpus-per-task"] == cpus
    assert f"--cpus-per-task {cpus} (partition debug: 2 CPUs per node / {tasks} tasks" in err
    # Given explicitly, the flag wins and nothing is looked up.
    code, out, err = launch(
        capsys, "recipes.ppo_atari", "--cpus-per-task", "3", "--dry-run", "--", *TINY
    )
    assert sbatch_lines(out)["cpus-per-task"] == "3" and "partition" not in err


def test_without_sinfo_the_cluster_default_stays(in_tmp, capsys, monkeypatch):
    import slurm.launch as launcher

    real = launcher.shutil.which
    monkeypatch.setattr(launcher.shutil, "which", lambda n: None if n == "sinfo" else real(n))
    code, out, err = launch(capsys, "recipes.ppo_atari", "--dry-run", "--", *TINY)
    assert code == 0 and "cpus-per-task" not in sbatch_lines(out), out
