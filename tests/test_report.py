"""``accelrl.tools.report``: per-game and human-normalized aggregate scores of a set of run folders,
checked on synthetic folders with known scores (and against rliable where it imports), and on
real short runs; the Atari suites are games ale-py knows, and ``slurm.launch --suite`` sweeps
them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accelrl.tools.atari_scores import RANDOM_HUMAN, SUITES, human_normalized
from accelrl.tools.report import (
    interval_estimates,
    iqm,
    performance_profile,
    read_run,
    report,
    score_matrix,
)

REPO = Path(__file__).resolve().parents[1]


def fake_run(root: Path, algo: str, game: str, seed: int, normalized: float | None = None,
             *, score: float | None = None, episodes: int = 120) -> Path:  # fmt: skip
    """A run folder with a final greedy evaluation at ``normalized`` (human-normalized)."""
    run = root / f"{algo}-{game}-s{seed}"
    run.mkdir(parents=True)
    config = {"env": {"game": game}, "seed": seed}
    (run / "config.json").write_text(json.dumps({"algo": algo, "config": config}))
    if normalized is not None:
        random, human = RANDOM_HUMAN[game.lower()]
        score = random + normalized * (human - random)
    if score is not None:
        (run / "summary.json").write_text(json.dumps({"eval/greedy_return": score}))
    lines = ["frames,return,length"] + [f"{1000 * (i + 1)},{i % 7},100" for i in range(episodes)]
    (run / "episodes.csv").write_text("\n".join(lines) + "\n")
    return run


def test_reference_scores_cover_the_57_games_ale_py_ships():
    from accelrl.envs import available_games

    assert len(RANDOM_HUMAN) == 57 and set(SUITES["atari57"]) == set(RANDOM_HUMAN)
    assert set(RANDOM_HUMAN) <= set(available_games())
    assert set(SUITES["atari5"]) < set(SUITES["atari10"]) < set(RANDOM_HUMAN)
    assert human_normalized("breakout", 1.7) == 0.0 and human_normalized("breakout", 30.5) == 1.0
    assert math.isnan(human_normalized("CartPole-v1", 500.0))


def test_aggregates_of_known_scores(tmp_path):
    # 3 games x 2 seeds; game means 0.2, 1.0, 3.0 -> median 1.0; all six values sorted:
    # 0.1 0.3 0.9 1.1 2.0 4.0 -> IQM drops one from each end: mean(0.3, 0.9, 1.1, 2.0) = 1.075.
    values = {"Pong": (0.1, 0.3), "Breakout": (0.9, 1.1), "Qbert": (2.0, 4.0)}
    runs = [
        fake_run(tmp_path, "ppo", g, s, v) for g, vs in values.items() for s, v in enumerate(vs)
    ]
    out = report(runs, tmp_path / "rep", reps=500)
    point = {k: v[0] for k, v in out["estimates"]["ppo"].items()}
    assert point["median"] == pytest.approx(1.0)
    assert point["iqm"] == pytest.approx(1.075)
    assert point["mean"] == pytest.approx(np.mean([0.1, 0.3, 0.9, 1.1, 2.0, 4.0]))
    for p, low, high in out["estimates"]["ppo"].values():
        assert low <= p <= high
    for suffix in ("-aggregates.png", "-profiles.png", "-curves.png", ".txt", "-runs.csv"):
        assert (tmp_path / f"rep{suffix}").stat().st_size > 0


def test_intervals_have_no_width_when_seeds_agree_and_grow_when_they_do_not():
    same = np.array([[0.5, 2.0], [0.5, 2.0], [0.5, 2.0]])
    for p, low, high in interval_estimates(same, reps=300).values():
        assert low == p == high
    spread = np.array([[0.0, 1.0], [1.0, 3.0], [2.0, 5.0]])
    est = interval_estimates(spread, reps=2000)
    assert all(high - low > 0.5 for _, low, high in est.values())
    # Stratified: each game keeps its own runs, so the mean's interval stays inside the range
    # of per-game means that resampling can produce.
    assert est["mean"][1] >= (0.0 + 1.0) / 2 and est["mean"][2] <= (2.0 + 5.0) / 2


def test_matches_rliable_where_it_imports():
    pytest.importorskip("arch")
    try:
        from rliable import library as rly
        from rliable import metrics
    except Exception as err:  # rliable 1.2 + pandas 3: arch fails to import
        pytest.skip(f"rliable does not import here: {err!r}")
    rng = np.random.default_rng(1)
    m = rng.gamma(2.0, 0.5, size=(5, 7))

    def agg(x):
        return np.array([metrics.aggregate_median(x), metrics.aggregate_iqm(x),
                         metrics.aggregate_mean(x)])  # fmt: skip

    points, cis = rly.get_interval_estimates({"a": m}, agg, reps=4000)
    ours = interval_estimates(m, reps=4000)
    for i, name in enumerate(("median", "iqm", "mean")):
        assert ours[name][0] == pytest.approx(points["a"][i])
        assert ours[name][1] == pytest.approx(cis["a"][0, i], abs=0.06)
        assert ours[name][2] == pytest.approx(cis["a"][1, i], abs=0.06)
    taus = np.linspace(0, 3, 7)
    profile, _ = rly.create_performance_profile({"a": m}, taus)
    assert performance_profile(m, taus) == pytest.approx(profile["a"])


def test_iqm_and_unequal_seed_counts(tmp_path):
    assert iqm(np.arange(8.0)) == pytest.approx(np.mean([2, 3, 4, 5]))
    runs = [fake_run(tmp_path, "dqn", "Pong", s, 0.5) for s in range(3)]
    runs += [fake_run(tmp_path, "dqn", "Breakout", s, 1.5) for s in range(2)]
    results = [read_run(r) for r in runs]
    assert score_matrix(results, ["breakout", "pong"]).shape == (2, 2)


def test_score_sources_and_errors(tmp_path):
    # No evaluation: the last 100 training episodes.
    run = fake_run(tmp_path, "a2c", "Breakout", 0, episodes=150)
    result = read_run(run)
    assert result.source == "last-100 training mean"
    assert result.score == pytest.approx(np.mean([i % 7 for i in range(50, 150)]))
    (tmp_path / "empty").mkdir()
    out = subprocess.run([sys.executable, "-m", "accelrl.tools.report", str(tmp_path / "empty")],
                         capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert out.returncode == 2 and out.stderr.strip() == (
        f"accelrl.tools.report: error: {tmp_path / 'empty'} has no config.json: not a run folder "
        "written by a recipe"
    )


def test_report_on_real_cartpole_runs(tmp_path):
    runs = []
    for seed in (0, 1):
        run = tmp_path / f"ppo-{seed}"
        cmd = [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), "--env.game",
               "CartPole-v1", "--env.num-envs", "4", "--collector.steps-per-batch", "64",
               "--ppo.minibatches", "2", "--total-frames", "1024", "--seed", str(seed),
               "--log.eval-episodes", "2", "--log.no-tensorboard", "--log.no-progress",
               "--run-dir", str(run)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(run)
    out = subprocess.run([sys.executable, "-m", "accelrl.tools.report", *map(str, runs), "-o",
                          str(tmp_path / "r")], capture_output=True, text=True, cwd=REPO,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ppo  CartPole-v1  2  " in out.stdout and "final greedy evaluation" in out.stdout
    assert "raw scores only" in out.stdout
    assert (tmp_path / "r-curves.png").stat().st_size > 0
