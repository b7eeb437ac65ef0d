"""``benchmarks.peers`` gives every peer the recipe's work per batch, times each from its batch
marks, pairs the rounds, and names the fix for a missing venv or script; ``benchmarks.
time_to_score --peer`` writes a peer's curve and stops it at the target. The peers themselves
run only in the slow tests, from the venvs ``python -m benchmarks.peers setup`` makes (skipped,
with the command, where they are absent). Nothing here asserts a speed."""

from __future__ import annotations

import csv
import datetime
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelrl.run.record import code_version
from benchmarks import peer_libs, peers, time_to_score
from benchmarks.common import cpu_name
from benchmarks.peer_libs import EPISODE, MARK, PeerError

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ACCELRL_PEERS_CACHE", peer_libs.DEFAULT_CACHE))


def flags(args: list[str]) -> dict[str, str]:
    """``--key=value`` arguments as a dict (every peer's overrides use that form)."""
    out = {}
    for arg in args:
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            out[key] = value
    return out


def test_speed_args_give_each_library_the_recipes_work_per_batch():
    from recipes.ppo_atari import Config

    cfg = Config()
    work = peer_libs.recipe_work()
    assert work.batch_steps == cfg.collector.steps_per_batch == 1024
    assert (work.num_envs, work.steps_per_env, work.epochs, work.minibatches) == (8, 128, 4, 4)
    assert work.minibatch_steps == 256

    sb3 = peer_libs.speed_args("sb3", "Pong", 5, work, "/t", device="cpu")
    params = dict(p.split(":") for p in sb3[sb3.index("--hyperparams") + 1 :])
    assert params == {"n_envs": "8", "n_steps": "128", "batch_size": "256", "n_epochs": "4"}
    args = flags(sb3)
    assert args["env"] == "PongNoFrameskip-v4" and args["n-timesteps"] == str(5 * 1024)
    assert args["eval-freq"] == "-1" and args["device"] == "cpu"

    args = flags(peer_libs.speed_args("cleanrl", "Pong", 5, work, "/t", device="cpu"))
    assert args["env-id"] == "Pong-v5" and args["total-timesteps"] == str(5 * 1024)
    assert (args["num-envs"], args["num-steps"]) == ("8", "128")
    assert (args["num-minibatches"], args["update-epochs"]) == ("4", "4")
    assert "--no-cuda" in peer_libs.speed_args("cleanrl", "Pong", 5, work, "/t")
    assert "--cuda" in peer_libs.speed_args("cleanrl", "Pong", 5, work, "/t", device="cuda:0")

    for workers in (1, 2, 4, 8):
        sf = flags(peer_libs.speed_args("sf", "Pong", 5, work, "/t", sf_workers=workers))
        assert int(sf["num_workers"]) == workers
        assert int(sf["num_workers"]) * int(sf["num_envs_per_worker"]) == 8
        assert sf["rollout"] == "128" and sf["num_epochs"] == "4"
        # the learner's batch: batch_size (its minibatch) x num_batches_per_epoch
        assert int(sf["batch_size"]) * int(sf["num_batches_per_epoch"]) == 1024
        assert sf["batch_size"] == "256"
        assert sf["env"] == "atari_pong" and sf["device"] == "cpu"
        assert int(sf["train_for_env_steps"]) == 4 * 1024 * 4  # frames; one batch late


def test_default_args_set_only_the_game_seed_length_and_device():
    allowed = {
        "sb3": {"algo", "env", "n-timesteps", "seed", "device", "eval-freq", "log-folder"},
        "cleanrl": {"env-id", "total-timesteps", "seed"},
        "sf": {"env", "experiment", "train_dir", "seed", "device", "train_for_env_steps"},
    }
    for name, keys in allowed.items():
        args = peer_libs.default_args(name, "Breakout", 10_000_000, "/t", seed=3, device="cpu")
        assert set(flags(args)) == keys, name
        assert "3" == flags(args)["seed"]
    assert flags(peer_libs.default_args("sb3", "Breakout", 10**7, "/t", seed=1, device="cpu"))[
        "n-timesteps"
    ] == str(10**7 // 4)  # agent steps
    cleanrl = peer_libs.default_args("cleanrl", "Breakout", 10**7, "/t", seed=1, device="cpu")
    assert flags(cleanrl)["total-timesteps"] == str(10**7 // 4)
    sf = peer_libs.default_args("sf", "Breakout", 10**7, "/t", seed=1, device="cuda")
    assert flags(sf)["train_for_env_steps"] == str(10**7)  # frames, its Atari count
    assert flags(sf)["device"] == "gpu"


def test_sample_factory_layout_divides_the_simulators():
    assert peer_libs.sf_layout(2, 8) == (2, 4)
    assert peer_libs.default_sf_workers(2, 8) == 2
    assert peer_libs.default_sf_workers(3, 8) == 2
    assert peer_libs.default_sf_workers(1, 8) == 1
    assert peer_libs.default_sf_workers(40, 8) == 8  # its shipped 8 x 1
    with pytest.raises(PeerError, match="--sf-workers 3: must divide .* 8 simulators"):
        peer_libs.sf_layout(3, 8)


def test_marks_and_games_are_read_from_the_wrappers_lines():
    stderr = (
        f"noise\n{MARK} 1024 100.0\n{EPISODE} 1500 7.0 101.5\n{MARK} 2048 130.0\n"
        f"Epoch 3 |###| {MARK} 3072 132.0\n{MARK} 4096 135.0\n{MARK} 5120 200.0\n"
    )
    marks = peer_libs.read_marks(stderr)
    assert marks[:2] == [(1024, 100.0), (2048, 130.0)]
    assert peer_libs.read_marks(stderr, EPISODE) == [(1500, 7.0, 101.5)]
    # a peer that ran past the batches asked for: the first ones are timed
    assert peer_libs.steady_rate(marks[:4], warmup=2) == 2048 * 4 / 5.0
    # a line another process split (print writes in pieces; the wrappers write whole lines)
    split = f"{MARK}\x1b[37m[2026-12-03 18:37:05] Updated weights\n{MARK} 9\n{MARK} 1 2 3\n"
    assert peer_libs.read_marks(split) == [(1.0, 2.0)]


def test_missing_venv_or_script_names_the_setup_command(tmp_path, capsys):
    with pytest.raises(
        PeerError, match=r"no sb3 venv in .*: run `python -m benchmarks\.peers setup"
    ):
        peer_libs.venv_python("sb3", tmp_path)
    (tmp_path / "cleanrl" / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "cleanrl" / "venv" / "bin" / "python").symlink_to(sys.executable)
    with pytest.raises(PeerError, match="no ppo_atari_envpool.py .*--cleanrl-script PATH"):
        peer_libs.venv_python("cleanrl", tmp_path)
    with pytest.raises(PeerError, match="setup cleanrl needs --cleanrl-script PATH"):
        peer_libs.setup("cleanrl", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before anything is made
    with pytest.raises(PeerError, match=f"--cleanrl-script {tmp_path}: no ppo_atari_envpool.py"):
        peer_libs.cleanrl_source(tmp_path)
    checkout = tmp_path / "cleanrl-checkout" / "cleanrl"
    checkout.mkdir(parents=True)
    (checkout / "ppo_atari_envpool.py").write_text("")
    assert peer_libs.cleanrl_source(checkout.parent) == checkout / "ppo_atari_envpool.py"

    for argv, message in [
        (["--peers", "sb3", "--cache", str(tmp_path)], "setup sb3 --cache"),
        (["--peers", "rllib", "--cache", str(tmp_path)], "unknown peer 'rllib'"),
        (["--cache", str(tmp_path / "empty")], "no peer is set up"),
        (["--peers", "torchrl"], "--torchrl-sota None: no ppo_atari.py"),
        (["--peers", "sf", "--sf-workers", "3", "--cache", str(tmp_path)], "--sf-workers 3"),
        (
            ["setup", "sb3", "cleanrl", "--cache", str(tmp_path / "c")],
            "needs --cleanrl-script PATH",
        ),
        (
            ["setup", "cleanrl", "--cache", str(tmp_path / "c"), "--cleanrl-script", str(tmp_path)],
            "no ppo_atari_envpool.py there",
        ),
    ]:
        with pytest.raises(SystemExit):
            peers.main(argv)
        assert message in capsys.readouterr().err, argv
    assert not (tmp_path / "c").exists()  # setup refused before making any venv


FAKE_PEER = """
import sys, time
steps = int(sys.argv[sys.argv.index("--steps") + 1])
for n in range(1024, steps + 1, 1024):
    time.sleep(0.02)
    print("{mark}", n, time.perf_counter(), file=sys.stderr, flush=True)
"""


def test_rounds_pair_the_recipe_with_each_library_peer(tmp_path, monkeypatch, capsys):
    """Rounds run the recipe, then each peer; ratios are recipe / peer per round and their
    median; the JSON holds the commands and what setup recorded."""
    for name in ("sb3", "sf"):
        (tmp_path / name / "venv" / "bin").mkdir(parents=True)
        (tmp_path / name / "venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "sb3" / "peer.json").write_text(json.dumps({"versions": "stable-baselines3 x"}))
    fake = FAKE_PEER.format(mark=MARK)

    def fake_command(name, cache, args):
        peer_libs.venv_python(name, cache)
        steps = 8 if name == "sf" else 6  # sample factory runs past the batches asked for
        return [sys.executable, "-c", fake, "--steps", str(steps * 1024), *args]

    monkeypatch.setattr(peer_libs, "command", fake_command)
    monkeypatch.setattr(peers, "recipe_fps", lambda *a, **k: 1000.0)
    out = tmp_path / "peers.json"
    argv = ["--peers", "sb3,sf", "--cache", str(tmp_path), "--batches", "6", "--json", str(out)]
    result = peers.main(argv)
    assert json.loads(out.read_text()) == result
    assert result["rounds"]["recipe"] == [1000.0, 1000.0]
    for name in ("sb3", "sf"):
        assert result["ratios"][name] == [1000.0 / r for r in result["rounds"][name]]
        assert result["ratio_median"][name] == pytest.approx(sum(result["ratios"][name]) / 2)
    assert result["peers"]["sb3"]["installed"] == {"versions": "stable-baselines3 x"}
    assert result["recipe_flags"] == ["--env.sticky-actions", "0"]
    assert result["host"] == cpu_name()
    printed = capsys.readouterr().out
    assert "median ratio" in printed and "Sample Factory 2.1.1" in printed

    # without --peers: every peer whose venv is there
    result = peers.main(["--cache", str(tmp_path), "--batches", "3", "--rounds", "1"])
    assert list(result["ratios"]) == ["sb3", "sf"]

    # several Sample Factory layouts: one row each, paired with the same recipe rounds
    argv = ["--peers", "sb3,sf", "--sf-workers", "2,8,2,1", "--cache", str(tmp_path)]
    result = peers.main([*argv, "--batches", "6", "--rounds", "1"])
    assert list(result["ratios"]) == ["sb3", "sf 2x4", "sf 8x1", "sf 1x8"]
    assert result["sf_workers"] == [2, 8, 1]
    for row, (workers, each) in {"sf 2x4": (2, 4), "sf 8x1": (8, 1), "sf 1x8": (1, 8)}.items():
        assert len(result["rounds"][row]) == 1
        assert result["peers"][row]["title"].endswith(f"{workers} x {each} simulators")
        command = result["peers"][row]["command"]
        assert f"--num_workers={workers}" in command
        assert f"--num_envs_per_worker={each}" in command
    for bad, message in [
        ("2,x", "--sf-workers 2,x: give whole numbers"),
        ("2,3", "--sf-workers 3"),
    ]:
        with pytest.raises(SystemExit):
            peers.main(["--peers", "sf", "--sf-workers", bad, "--cache", str(tmp_path)])
        assert message in capsys.readouterr().err


FAKE_SOTA = """
import sys, time
import tqdm
from utils_atari import batch_sleep  # the wrapper must put the script's folder on sys.path

args = dict(a.lstrip("+").split("=", 1) for a in sys.argv[1:])
if args.get("env.env_name") == "BrokenNoFrameskip-v4":
    sys.exit("no such game")
steps = int(args["collector.frames_per_batch"]) // 4
pbar = tqdm.tqdm(total=int(args["collector.total_frames"]) // 4)
for _ in range(int(args["collector.total_frames"]) // int(args["collector.frames_per_batch"])):
    time.sleep(batch_sleep)
    pbar.update(steps)
"""


def test_torchrl_peer_runs_the_script_as_shipped_with_the_recipes_work_per_batch(
    tmp_path, monkeypatch
):
    """``benchmarks.peers`` gives TorchRL's PPO script the recipe's batch, minibatch, epochs and
    simulators, runs it from its own folder (its ``utils_atari`` import), times it from its
    progress bar, and names a failing script with its error."""
    from recipes.ppo_atari import Config

    cfg = Config()
    args = dict(a.lstrip("+").split("=", 1) for a in peers.torchrl_overrides("Pong", 5, "/t"))
    assert args["collector.frames_per_batch"] == str(cfg.collector.steps_per_batch * 4) == "4096"
    assert args["collector.total_frames"] == str(5 * 4096)
    assert args["loss.mini_batch_size"] == str(4096 // cfg.ppo.minibatches)
    assert args["loss.ppo_epochs"] == str(cfg.ppo.epochs)
    assert args["env.num_envs"] == str(cfg.env.num_envs)
    assert args["env.env_name"] == "PongNoFrameskip-v4"
    assert args["logger.backend"] == ""  # no wandb

    (tmp_path / "ppo_atari.py").write_text(FAKE_SOTA)
    (tmp_path / "utils_atari.py").write_text("batch_sleep = 0.05\n")
    rate = peers.torchrl_fps(tmp_path, "Pong", batches=6, warmup=2)
    # 4 batches of 1024 steps x 4 frames in >= 4 x 0.05 s
    assert 0 < rate <= 4 * 4096 / (4 * 0.05)
    with pytest.raises(RuntimeError, match="no such game"):
        peers.torchrl_fps(tmp_path, "Broken", batches=3, warmup=1)
    with pytest.raises(SystemExit):
        peers.main(["--torchrl-sota", str(tmp_path / "missing")])

    # the whole benchmark: rounds pair the recipe (stubbed here) with the script; with only
    # --torchrl-sota and no library venv in the cache, TorchRL is the one peer
    monkeypatch.setattr(peers, "recipe_fps", lambda *a, **k: 1000.0)
    out = tmp_path / "peers.json"
    argv = ["--torchrl-sota", str(tmp_path), "--cache", str(tmp_path / "none")]
    result = peers.main([*argv, "--batches", "4", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["rounds"]["recipe"] == [1000.0, 1000.0]
    assert result["ratios"]["torchrl"] == [1000.0 / r for r in result["rounds"]["torchrl"]]
    assert result["ratio_median"]["torchrl"] == pytest.approx(sum(result["ratios"]["torchrl"]) / 2)


def test_torchrl_peer_rate_starts_at_the_end_of_the_warmup():
    marks = peers.read_marks(
        f"noise\n{MARK} 1024 100.0\n{MARK} 2048 130.0\n"
        f"{MARK} 3072 132.0\r  50%|###  | 3072/6144{MARK} 4096 135.0\n"
    )
    assert marks == [(1024, 100.0), (2048, 130.0), (3072, 132.0), (4096, 135.0)]
    # from the end of batch 2 (step 2048, 130 s) to the end: 2048 steps x 4 frames in 5 s
    assert peers.steady_rate(marks, warmup=2) == 2048 * 4 / 5.0
    with pytest.raises(ValueError, match="warmup"):
        peers.steady_rate(marks, warmup=4)


FAKE_SCRIPT = """
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter("runs/fake")
for step in (1024, 2048):
    writer.add_scalar("charts/episodic_return", step / 512, step - 100)
    writer.add_scalar("losses/value_loss", 0.5, step)
    writer.add_scalar("charts/SPS", 300, step)
writer.close()
"""


def test_cleanrl_wrapper_marks_updates_and_games_without_editing_the_script(tmp_path):
    """The CleanRL wrapper (plain torch and TensorBoard, so it runs here too) turns the
    script's own ``charts/SPS`` and ``charts/episodic_return`` scalars into marks."""
    script = tmp_path / "ppo_atari_envpool.py"
    script.write_text(FAKE_SCRIPT)
    wrapper = peer_libs.WRAPPERS / "cleanrl_script.py"
    out = subprocess.run(
        [sys.executable, str(wrapper), str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [m[0] for m in peer_libs.read_marks(out.stderr)] == [1024, 2048]
    games = peer_libs.read_marks(out.stderr, EPISODE)
    assert [g[:2] for g in games] == [(924, 2.0), (1948, 4.0)]
    assert (tmp_path / "runs" / "fake").is_dir()  # the writer still writes


FAKE_LEARNER = """
import sys, time
for n, score in enumerate([1, 2, 3, 9, 12, 15, 20]):
    print("{episode}", 256 * (n + 1), score, time.perf_counter(), file=sys.stderr, flush=True)
    print("{mark}", 256 * (n + 1), time.perf_counter(), file=sys.stderr, flush=True)
    time.sleep(0.05)
time.sleep(600)  # a peer that would go on: the benchmark stops it
"""


def test_time_to_score_writes_a_peers_curve_and_stops_it_at_the_target(tmp_path, monkeypatch):
    fake = FAKE_LEARNER.format(episode=EPISODE, mark=MARK)
    seen = {}

    def fake_command(name, cache, args, algo="ppo"):
        seen["args"], seen["algo"] = args, algo
        return [sys.executable, "-c", fake]

    monkeypatch.setattr(peer_libs, "command", fake_command)
    out = tmp_path / "out"
    argv = ["--peer", "cleanrl", "--game", "Breakout", "--target", "10", "--window", "3"]
    result = time_to_score.main([*argv, "--budget-s", "120", "--out", str(out), "--device", "cpu"])
    assert result["reached"] and result["ended_by"] == "target"
    assert result["frames_at_target"] == 6 * 256 * 4  # (9 + 12 + 15) / 3 >= 10 at the 6th game
    assert result["final_mean"] == 12.0 and result["episodes"] == 6
    assert 0 < result["wall_s_from_first_update"] <= result["wall_s_from_launch"] < 60
    assert result["peer_returncode"] is not None  # stopped, not left running
    assert result["host"] == cpu_name() and result["date"] == datetime.date.today().isoformat()
    rows = (out / "curve.csv").read_text().splitlines()
    assert rows[0] == "wall_s,frames,return" and len(rows) == 7
    assert rows[1].split(",")[1:] == ["1024", "1.0"]
    assert "--env-id=Breakout-v5" in seen["args"] and seen["algo"] == "ppo"
    assert json.loads((out / "time_to_score.json").read_text()) == result
    # --algo pqn: CleanRL's PQN script, with the same arguments
    time_to_score.main([*argv, "--algo", "pqn", "--budget-s", "120", "--out", str(tmp_path / "q")])
    assert seen["algo"] == "pqn" and "--env-id=Breakout-v5" in seen["args"]


def test_cleanrl_runs_its_pqn_script_when_setup_copied_it(tmp_path, monkeypatch):
    """``setup cleanrl`` copies PQN's script from beside PPO's (a checkout has both) and
    ``--algo pqn`` runs it; without it, or with a peer that has no PQN, one line says why."""
    checkout = tmp_path / "checkout" / "cleanrl"
    checkout.mkdir(parents=True)
    (checkout / "ppo_atari_envpool.py").write_text("# ppo")
    cache = tmp_path / "cache"

    def fake_run(cmd, *args, **kwargs):  # the venv and pip: made, installed
        python = Path(cmd[-1]) / "bin" / "python"
        if cmd[1:3] == ["-m", "venv"] and not python.exists():
            python.parent.mkdir(parents=True)
            python.symlink_to(sys.executable)
        return subprocess.CompletedProcess(cmd, 0, stdout="torch 2.13.0", stderr="")

    monkeypatch.setattr(peer_libs.subprocess, "run", fake_run)
    record = peer_libs.setup("cleanrl", cache, cleanrl_script=checkout.parent)
    assert "pqn_script_source" not in record
    with pytest.raises(PeerError, match="no pqn_atari_envpool.py in .* with a checkout"):
        peer_libs.command("cleanrl", cache, ["--seed=1"], algo="pqn")
    (checkout / "pqn_atari_envpool.py").write_text("# pqn")
    record = peer_libs.setup("cleanrl", cache, cleanrl_script=checkout.parent)
    assert record["pqn_script_source"] == str(checkout / "pqn_atari_envpool.py")
    cmd = peer_libs.command("cleanrl", cache, ["--seed=1"], algo="pqn")
    assert cmd[2:] == [str(cache / "cleanrl" / "pqn_atari_envpool.py"), "--seed=1"]
    assert cmd[2] != peer_libs.command("cleanrl", cache, [])[2]  # PPO's by default
    with pytest.raises(PeerError, match="--algo pqn with --peer sb3: it runs ppo here"):
        peer_libs.command("sb3", cache, [], algo="pqn")


FAKE_RECIPE = """#!{python}
import os, sys, time
argv = sys.argv
run_dir = argv[argv.index("--run-dir") + 1]
os.makedirs(run_dir)
open(os.path.join({argv_file!r}), "w").write(" ".join(argv[1:]))
with open(os.path.join(run_dir, "metrics.csv"), "w") as m:
    m.write("frames,time_s\\n1024,0.1\\n")
with open(os.path.join(run_dir, "episodes.csv"), "w", buffering=1) as e:
    e.write("frames,return,length\\n")
    for n, score in enumerate([1.5, 2.5, 12.25, 9.0, 30.0]):
        line = f"{{1024 * (n + 1)}},{{score}},100\\n"
        e.write(line[:6])  # a row caught half-written by the benchmark's next read
        e.flush()
        time.sleep(1.3)
        e.write(line[6:])
        e.flush()
time.sleep(600)  # a recipe that would go on: the benchmark stops it
"""


def test_time_to_score_writes_the_recipes_curve_from_whole_rows(tmp_path):
    argv_file = tmp_path / "argv.txt"
    fake = tmp_path / "python"
    fake.write_text(FAKE_RECIPE.format(python=sys.executable, argv_file=str(argv_file)))
    fake.chmod(0o755)
    out = tmp_path / "out"
    result = time_to_score.main(
        ["--python", str(fake), "--game", "Breakout", "--target", "10", "--window", "2",
         "--seed", "7", "--budget-s", "120", "--out", str(out), "--device", "cpu"]
    )  # fmt: skip
    assert result["reached"] and result["frames_at_target"] == 4 * 1024  # (12.25 + 9) / 2
    assert result["seed"] == 7 and "--seed 7" in argv_file.read_text()
    # The peers' protocol by default: the recipe plays without sticky actions, FIRE after a
    # lost life (flags its own parser takes).
    assert " ".join(time_to_score.PROTOCOL_FLAGS) in argv_file.read_text()
    assert result["protocol"] == "peers"
    from accelrl.algos.catalog import algorithm
    from accelrl.cli import parse_flags

    cfg = parse_flags(algorithm("ppo").config, time_to_score.PROTOCOL_FLAGS)
    assert cfg.env.sticky_actions == 0 and cfg.env.fire_on_life_loss
    assert result["host"] == cpu_name() and result["commit"] == code_version()["commit"]
    with open(out / "curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["frames"], r["return"]) for r in rows] == [
        ("1024", "1.5"), ("2048", "2.5"), ("3072", "12.25"), ("4096", "9.0")
    ]  # fmt: skip
    walls = [float(r["wall_s"]) for r in rows]
    assert walls == sorted(walls) and walls[-1] <= result["wall_s_from_launch"] + 1e-3


def test_window_mean_is_the_mean_of_exactly_the_last_window_games():
    rows = [(1024 * (i + 1), score) for i, score in enumerate([4.0, 8.0, 10.0, 12.0])]
    assert time_to_score.window_mean(rows[:2], 3) is None  # fewer games than the window
    assert time_to_score.window_mean(rows[:3], 3) == pytest.approx(22 / 3)  # first full window
    assert time_to_score.window_mean(rows, 3) == pytest.approx(10.0)  # the oldest game left out
    assert time_to_score.window_mean(rows, 1) == 12.0


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw amx_tile

processor\t: 1
model name\t: another CPU that is not read
"""


def test_cpu_name_names_the_model_its_numbers_and_its_widest_vectors():
    name = cpu_name(CPUINFO)
    assert name.startswith("Intel(R) Xeon(R) Platinum 8488C (family 6, model 143; AVX-512), ")
    assert name.endswith(" cores")
    zen1 = CPUINFO.replace("avx512f avx512bw amx_tile", "").replace("Intel(R) Xeon(R) Pla", "")
    assert "(family 6, model 143; AVX2)" in cpu_name(zen1)
    assert "; no AVX2)" in cpu_name("model name\t: Old\ncpu family\t: 6\nflags\t: sse2\n")


def write_tts_run(folder, *, peer=None, seed=0, scores=(), wall_per_game=60.0, reached_at=None,
                  target=10.0, window=2, host="CPU X", frames_at_target=None):  # fmt: skip
    folder.mkdir(parents=True)
    result = {"game": "Breakout", "seed": seed, "target": target, "window": window, "host": host,
              "budget_s": 86400.0, "reached": reached_at is not None,
              "ended_by": "target" if reached_at is not None else "time budget",
              "wall_s_from_launch": None if reached_at is None else reached_at * wall_per_game,
              "wall_s_from_first_update": None if reached_at is None
              else reached_at * wall_per_game - 30,
              "frames_at_target": None if reached_at is None
              else frames_at_target or reached_at * 1000,
              "best_mean": max(scores)}  # fmt: skip
    if peer:
        result["peer"] = peer
    (folder / "time_to_score.json").write_text(json.dumps(result))
    rows = "".join(
        f"{(i + 1) * wall_per_game},{(i + 1) * 1000},{s}\n" for i, s in enumerate(scores)
    )
    (folder / "curve.csv").write_text("wall_s,frames,return\n" + rows)


def test_time_to_score_report_tabulates_each_run_and_each_librarys_mean(tmp_path, capsys):
    from benchmarks import time_to_score_report as tts_report

    write_tts_run(tmp_path / "r0", seed=0, scores=[1, 9, 11, 12], reached_at=3)
    # seeds differ in frames (3,000 and 5,000), so the library's mean frames is a mean
    write_tts_run(tmp_path / "r1", seed=1, scores=[1, 9, 13], reached_at=3, wall_per_game=100,
                  frames_at_target=5000)  # fmt: skip
    write_tts_run(tmp_path / "s0", peer="sb3", seed=0, scores=[1, 2, 9, 12], reached_at=4,
                  wall_per_game=150)  # fmt: skip
    write_tts_run(tmp_path / "f0", peer="sf", seed=0, scores=[1, 2, 3])  # not reached
    write_tts_run(tmp_path / "f1", peer="sf", seed=1, scores=[9, 12], reached_at=2)
    # another host: its minutes are set against the recipe's there only
    write_tts_run(tmp_path / "r2", seed=2, scores=[9, 12], reached_at=2, host="CPU Y")
    write_tts_run(tmp_path / "c2", peer="cleanrl", seed=2, scores=[1, 9, 12], reached_at=3,
                  host="CPU Y")  # fmt: skip
    write_tts_run(tmp_path / "s3", peer="sb3", seed=3, scores=[9, 12], reached_at=2, host="CPU Z")
    out = tmp_path / "report"
    folders = [str(tmp_path / n) for n in ("s0", "f1", "r1", "f0", "r0", "r2", "c2", "s3")]
    assert tts_report.main([*folders, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert text == (out / "table.md").read_text()
    assert (out / "curves.png").stat().st_size > 10_000
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "- host A: CPU X" in text and "- host B: CPU Y" in text and "- host C: CPU Z" in text
    # runs: the recipe first, seed by seed; minutes = games x wall per game / 60
    assert rows[1].startswith("| accelrl | 0 | A | yes | 3.0 | 2.5 | 3,000 | 20 |")
    assert rows[2].startswith("| accelrl | 1 | A | yes | 5.0 | 4.5 | 5,000 |")
    assert rows[3].startswith("| accelrl | 2 | B | yes | 2.0 |")
    assert rows[4].startswith("| Stable-Baselines3 | 0 | A | yes | 10.0 |")  # the speed order
    assert rows[7].startswith("| Sample Factory | 0 | A | no (time budget, 1440.0 min) | - |")
    # means on host A: accelrl (3 + 5) / 2 = 4 min; SB3 10 min = 2.50x (not against the
    # recipe's runs on B); SF has a run short of the target
    assert "| accelrl | A | 2 | 4.0 | 3.0-5.0 | 3.0, 5.0 | 4,000 | 1.00x |" in text
    assert "| Stable-Baselines3 | A | 1 | 10.0 | 10.0-10.0 | 10.0 | 4,000 | 2.50x |" in text
    assert "| Sample Factory | A | 2 | not all reached | - | -, 2.0 | - | - |" in text
    # host B: CleanRL 3 min against the recipe's 2; host C has no recipe run to set SB3 against
    assert "| CleanRL | B | 1 | 3.0 | 3.0-3.0 | 3.0 | 3,000 | 1.50x |" in text
    assert (
        "| Stable-Baselines3 | C | 1 | 2.0 | 2.0-2.0 | 2.0 | 2,000 "
        "| - (no accelrl run on this host) |" in text
    )


def test_time_to_score_report_interval_of_the_mean_is_a_bootstrap_over_runs():
    from benchmarks.time_to_score_report import mean_interval

    # five runs of 1, 2, 3, 4 and 10 minutes: their mean, 4.0, lies inside; the percentile
    # interval of resampled means lies strictly within the runs' range (a resampled mean is 1
    # or 10 only when all five draws are that run: 1 in 3,125 each)
    low, high = (float(x) for x in mean_interval([60, 120, 180, 240, 600]).split("-"))
    assert 1.0 < low < 4.0 < high < 10.0
    assert mean_interval([300.0, 300.0, 300.0]) == "5.0-5.0"


def test_time_to_score_report_refuses_runs_of_different_targets(tmp_path, capsys):
    from benchmarks import time_to_score_report as tts_report

    write_tts_run(tmp_path / "a", scores=[1, 2], target=10)
    write_tts_run(tmp_path / "b", peer="sb3", scores=[1, 2], target=18)
    assert tts_report.main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path)]) == 2
    assert "differ in (game, target, window)" in capsys.readouterr().err
    assert tts_report.main([str(tmp_path), "-o", str(tmp_path / "x")]) == 2
    assert "no time_to_score.json and curve.csv" in capsys.readouterr().err


def test_time_to_score_refuses_recipe_flags_for_a_peer(tmp_path, capsys):
    with pytest.raises(SystemExit):
        time_to_score.main(["--peer", "sf", "--out", str(tmp_path), "--", "--env.num-envs", "4"])
    assert "apply to recipes only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        time_to_score.main(["--peer", "sf", "--cache", str(tmp_path), "--out", str(tmp_path)])
    assert "setup sf --cache" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", list(peer_libs.PEERS))
def test_each_library_runs_as_shipped_and_marks_its_batches(name, tmp_path):
    """Three batches of the real peer from its venv (``ACCELRL_PEERS_CACHE`` or the default
    cache): every batch is marked, with the recipe's 1,024 agent steps each."""
    try:
        peer_libs.venv_python(name, CACHE)
    except PeerError as err:
        pytest.skip(str(err))
    args = peer_libs.speed_args(name, "Pong", 3, peer_libs.recipe_work(), str(tmp_path))
    marks = peer_libs.run_for_marks(name, peer_libs.command(name, CACHE, args), tmp_path, 3)
    assert [int(m[0]) for m in marks] == [1024, 2048, 3072]
    assert peer_libs.steady_rate(marks, warmup=1) > 0


def test_peer_wrappers_are_scripts_for_the_peers_venvs():
    """The wrappers import their peer, never accelrl: they run in the peer's venv."""
    for name, spec in peer_libs.PEERS.items():
        text = (peer_libs.WRAPPERS / spec.wrapper).read_text()
        assert "accelrl" not in text.replace("accelrl-peers", ""), name
    body = textwrap.dedent((peer_libs.WRAPPERS / "sample_factory_atari.py").read_text())
    assert 'if __name__ == "__main__":' in body  # its workers re-import it (spawn)
