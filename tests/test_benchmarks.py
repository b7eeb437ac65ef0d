"""The benchmark suite runs end to end (``python -m benchmarks.run --quick``) and its table has
every row with finite figures, and the training rows' plain reference runs with the recipe's own
config. Benchmarks are not tests: nothing here asserts a speed or a met target."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,  # a hang guard, not a speed requirement (about 5 minutes on 2 cores)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def expected_rows(payload: dict) -> list[str]:
    from benchmarks.run import ENV_LABELS, collect_pipelines
    from benchmarks.train_throughput import available_specs

    game = payload["games"][0]
    names = [f"env {g}: {label}" for g in payload["games"] for label in ENV_LABELS.values()]
    collect = payload["details"]["collect"]
    n = collect["num_envs"]
    for label, *_ in collect_pipelines(n, payload["workers"]):
        names += [f"collect {game}: accelrl {label}"] * 2  # vs ceiling and vs TorchRL
    names += [
        f"collect {game}: TorchRL ref (ParallelEnv+transforms) + Collector",
        f"collect {game}: ceiling 1/(1/env + inference s/step)",
        f"collect {game}: part: accelrl env alone, {n} sims",
    ]
    names += [f"train {game}: {spec.name} (" for spec in available_specs()]
    names += ["replay: FrameReplay per 1M Atari transitions", "replay: sample + DQN update"]
    names += ["learner ppo, idle: recipe"]  # vs the plain loop at its best thread count
    names += ["update DQN cartpole dqn: recipe", "update DQN minatar dqn: recipe"]
    names += ["first batch: ppo Pong, in-process", "first batch: ppo Pong, 2 worker processes"]
    names += ["env MinAtar/Breakout: accelrl make_env minatar"]
    names += ["env MinAtar/Breakout: stepped as LeanCollector steps it"]
    names += [f"acting Null/CartPole, 8 sims: {r} collection (cpu)" for r in ("ppo", "dqn")]
    return names


@pytest.mark.slow
def test_quick_run_has_every_row_with_finite_figures(quick_run: tuple[dict, str]) -> None:
    payload, stdout = quick_run
    rows = payload["rows"]
    whats = [r["what"] for r in rows]
    for name in expected_rows(payload):
        assert any(w.startswith(name) for w in whats), f"missing row {name!r} in {whats}"
    # Every collector kind this checkout has is in the table.
    from benchmarks.collector_throughput import collector_kinds

    for kind in collector_kinds():
        assert any(f"accelrl {kind}" in w for w in whats), kind
    assert sum(w.startswith("replay: sample + DQN update") for w in whats) == 2
    assert any("inference alone" in w for w in whats)
    for r in rows:
        assert r["rate"] is not None and math.isfinite(r["rate"]) and r["rate"] > 0, r
        if r["reference"]:
            assert r["ref_rate"] is not None and math.isfinite(r["ref_rate"]), r
            assert r["ratio"] is not None and math.isfinite(r["ratio"]) and r["ratio"] > 0, r
        assert r["met"] in ("yes", "MISSED", "-"), r
        if r["target"] is not None:
            assert r["met"] in ("yes", "MISSED"), r
    # One table on stdout, every row in it, misses spelled out.
    assert stdout.count("what ") == 1 and "met?" in stdout
    for w in whats:
        assert w in stdout
    missed = sum(r["met"] == "MISSED" for r in rows)
    assert f"{missed} of {sum(r['target'] is not None for r in rows)} targets MISSED" in stdout


def test_throughput_plain_reference_reads_the_recipe_config(monkeypatch, tmp_path):
    """``train_throughput``'s plain DQN runs from the recipe's ``Config``, so a changed
    ``learning_starts_frames`` moves its first update (a settings copy by field name once lost
    it in a rename: the plain DQN rows then never updated)."""
    import torch

    from benchmarks import train_throughput as tt

    updates: list[int] = []
    clip = torch.nn.utils.clip_grad_norm_

    def counting_clip(*args, **kw):
        updates.append(1)
        return clip(*args, **kw)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", counting_clip)
    spec = next(s for s in tt.SPECS if s.name == "dqn")
    counts, frames = {}, {}
    for starts in (128, 256):
        cfg = tt.make_config(spec, "Pong", "cpu", quick=True, run_dir=str(tmp_path / "unused"))
        assert cfg.dqn.learning_starts_frames == 128  # after the first batch of 8 x 4 steps
        cfg.dqn.learning_starts_frames = starts
        cfg.dqn.replay_capacity = 1000
        updates.clear()
        records = tt.plain_runner(spec, cfg, seed=0)()
        counts[starts], frames[starts] = len(updates), [f for f, _ in records]
    assert frames == {128: [128, 256, 384, 512], 256: [128, 256, 384, 512]}
    # 8 x 32 / 32 x intensity 8 = 8 updates a batch once more than learning_starts_frames.
    assert counts == {128: 24, 256: 16}


def test_train_rows_compare_with_the_plain_loop_at_its_best_thread_count(monkeypatch):
    """The recipe's synchronous updates pick their torch threads by measurement, so a training
    row's plain loop runs at the recipe's collection share *and* at its update count, and the
    ratio is against the faster (a plain loop held at 1 thread flattered the recipe 1.6x)."""
    from accelrl import collectors
    from benchmarks import train_throughput as tt

    plan = collectors.ThreadPlan(
        cores=2, learner_torch=1, worker_torch=1, sim_threads=2, update_torch=2
    )
    monkeypatch.setattr(collectors, "plan_threads", lambda *a, **k: plan)

    def records(fps: float, n: int = 7) -> list[tuple[int, float]]:
        return [(i * 1000, i * 1000 / fps) for i in range(1, n + 1)]

    # The recipe runs its first thread probe on top (test below).
    monkeypatch.setattr(tt, "run_recipe", lambda spec, cfg: records(100.0, 16))
    seen = []

    def plain_runner(spec, cfg, seed, torch_threads=None):
        seen.append(torch_threads)
        return lambda: records({1: 50.0, 2: 80.0}[torch_threads])

    monkeypatch.setattr(tt, "plain_runner", plain_runner)
    spec = next(s for s in tt.SPECS if s.name == "dqn")
    res = tt.bench_spec(spec, "Pong", "cpu", quick=False, rounds=2, verbose=False)
    assert sorted(seen) == [1, 1, 2, 2]
    assert res["plain_best"] == "plain@2"
    assert res["plain_fps"] == pytest.approx(80.0)
    assert res["ratio"] == pytest.approx(1.25)
    # --quick (the suite's smoke test) runs the plain loop once, at the learner's share.
    seen.clear()
    res = tt.bench_spec(spec, "Pong", "cpu", quick=True, rounds=1, verbose=False)
    assert seen == [1] and res["plain_best"] == "plain@1"


def test_train_rows_leave_out_the_recipes_first_thread_probe(monkeypatch):
    """A synchronous run's first batches probe 1 and 2 threads for whole updates and
    collections; the train row runs them on top of the warm-up and leaves them out of the
    recipe's rate (a 4-batch PPO row had measured little but the probe)."""
    from accelrl import collectors
    from benchmarks import train_throughput as tt

    plan = collectors.ThreadPlan(
        cores=2, learner_torch=1, worker_torch=1, sim_threads=2, update_torch=2
    )
    monkeypatch.setattr(collectors, "plan_threads", lambda *a, **k: plan)
    spec = next(s for s in tt.SPECS if s.name == "ppo")
    batch = tt.make_config(spec, "Pong", "cpu", quick=False, run_dir="unused")
    frames = batch.collector.steps_per_batch * batch.env.frameskip
    probing = tt.probe_batches(spec, batch, plan)
    # Updates: warm-up, then 2 probes of each count; collections: from the second on, 4 each.
    assert probing == 10
    fixed = collectors.ThreadPlan(cores=2, learner_torch=2, worker_torch=2, sim_threads=2)
    assert tt.probe_batches(spec, batch, fixed) == 0  # one count: nothing to probe
    dqn = next(s for s in tt.SPECS if s.name == "dqn")
    dqn_cfg = tt.make_config(dqn, "Pong", "cpu", quick=True, run_dir="unused")
    assert tt.probe_batches(dqn, dqn_cfg, plan) == 10
    dqn_cfg.dqn.asynchronous = True  # the replay feeder collects during updates: one count
    assert tt.probe_batches(dqn, dqn_cfg, plan) == 0
    slow = spec.warmup[False] + probing
    threads = []

    def recipe(spec, cfg):  # warm-up and probe batches at 10 frames/s, then 100 frames/s
        threads.append(cfg.threads.torch_threads)
        n = cfg.total_frames // frames
        times = itertools.accumulate(frames / (10.0 if i < slow else 100.0) for i in range(n))
        return [((i + 1) * frames, t) for i, t in enumerate(times)]

    def plain_runner(spec, cfg, seed, torch_threads=None):
        n = cfg.total_frames // frames
        return lambda: [((i + 1) * frames, (i + 1) * frames / 100.0) for i in range(n)]

    monkeypatch.setattr(tt, "run_recipe", recipe)
    monkeypatch.setattr(tt, "plain_runner", plain_runner)
    res = tt.bench_spec(spec, "Pong", "cpu", quick=False, rounds=1, verbose=False)
    assert res["recipe_probe_iterations"] == 10 and threads == [0]  # the recipe's own plan
    assert res["ratio"] == pytest.approx(1.0)
    # --quick fixes the recipe at the plain loop's count: nothing to probe, no batches on top.
    threads.clear()
    quick = tt.make_config(spec, "Pong", "cpu", quick=True, run_dir="unused")
    frames = quick.collector.steps_per_batch * quick.env.frameskip
    slow = spec.warmup[True]
    res = tt.bench_spec(spec, "Pong", "cpu", quick=True, rounds=1, verbose=False)
    assert res["recipe_probe_iterations"] == 0 and threads == [1]
    assert res["ratio"] == pytest.approx(1.0)


def test_dqn_update_benchmark_times_both_sides_and_every_phase(tmp_path):
    """``benchmarks.dqn_update`` times the recipe's update and the plain loop's in paired rounds
    at every thread setting and reports their ratio and each phase's time."""
    from benchmarks import dqn_update

    out = tmp_path / "update.json"
    args = ["--nets", "cartpole", "--variants", "rainbow", "--json", str(out)]
    dqn_update.main([*dqn_update.quick_args(), *args])
    (result,) = json.loads(out.read_text())["results"].values()
    assert result["best_recipe"].startswith("recipe@")
    assert result["best_plain"].startswith("plain@")
    assert all(rate > 0 for rate in result["updates_per_s"].values())
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    phases = {"sample", "forward and loss", "backward", "clip and optimizer step"}
    phases |= {"target update", "priority update", "total"}
    for side in ("recipe", "plain"):
        assert set(result["split_us"][side]) == phases
        assert all(us > 0 for us in result["split_us"][side].values())


@pytest.mark.parametrize("variant", ["dqn", "rainbow"])
def test_dqn_update_benchmarks_phases_are_the_recipes_update(variant):
    """The benchmark's phase-by-phase update takes the same steps as ``DQN.update``: two
    learners from the same seed, one updated each way on the same samples, end with the same
    weights, target weights and priorities."""
    from benchmarks import dqn_update

    d = dqn_update.settings("cartpole", variant)
    d = dqn_update.DQNConfig(**{**vars(d), "target_update_interval": 3})
    td = dqn_update.transitions(dqn_update.NETS["cartpole"])
    whole, phased = (dqn_update.RecipeSide("cartpole", d, td) for _ in range(2))
    for step in range(7):  # two target copies
        np.random.seed(step)
        whole()
        np.random.seed(step)
        phased(lambda phase: None)
    for a, b in zip(whole.dqn.networks(), phased.dqn.networks(), strict=True):
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
            assert torch.equal(x, y)
    np.random.seed(99)
    drawn = whole.replay.sample(256)["index"]
    np.random.seed(99)
    assert torch.equal(drawn, phased.replay.sample(256)["index"])


@pytest.mark.parametrize("net", ["cartpole", "minatar"])
def test_dqn_update_benchmarks_autograd_side_takes_the_same_steps(net):
    """``--autograd`` times the update as it ran before (autograd, PyTorch's own optimizer
    calls) on the same results: both sides from one seed end with equal weights, bit for bit,
    and the recipe's side does compute without autograd."""
    from benchmarks import dqn_update

    d = dqn_update.settings(net, "dqn")
    td = dqn_update.transitions(dqn_update.NETS[net])
    mine, before = (dqn_update.RecipeSide(net, d, td, autograd=a) for a in (False, True))
    assert mine.dqn._chain is not None and before.dqn._chain is None
    for step in range(5):
        for side in (mine, before):
            np.random.seed(step)
            side()
    for a, b in zip(mine.dqn.networks(), before.dqn.networks(), strict=True):
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
            assert torch.equal(x, y)


def test_minatar_benchmark_steps_both_sides(tmp_path):
    """``benchmarks.minatar_throughput`` times accelrl's MinAtar env and the raw loop in paired
    rounds and reports their ratio."""
    pytest.importorskip("minatar")
    from benchmarks import minatar_throughput

    out = tmp_path / "minatar.json"
    minatar_throughput.main(
        ["--num-envs", "2", "--seconds", "0.2", "--rounds", "2", "--json", str(out)]
    )
    (result,) = json.loads(out.read_text())["results"]
    assert len(result["per_round"]["raw"]) == len(result["per_round"]["accelrl"]) == 2
    assert len(result["per_round"]["accelrl lean"]) == 2
    assert result["raw_steps_per_s"] > 0 and result["accelrl_steps_per_s"] > 0
    assert result["lean_steps_per_s"] > 0 and math.isfinite(result["lean_over_raw"])
    assert math.isfinite(result["accelrl_over_raw"]) and result["accelrl_over_raw"] > 0


def test_acting_overhead_benchmark_times_the_plain_loop_and_each_recipe():
    """``benchmarks.acting_overhead`` times each recipe's collection (TorchRL's ``Collector``
    too with ``before``) and the plain loops in paired rounds on zero-cost simulators and
    reports microseconds per agent step and the ratios."""
    from benchmarks import acting_overhead

    result = acting_overhead.bench("Null/CartPole", 4, ("ppo", "dqn"), 2, 0.2, before=True)
    for name in ("plain ppo", "ppo", "ppo torchrl", "plain dqn", "dqn", "dqn torchrl"):
        assert len(result["per_round"][name]) == 2, name
        assert result[f"{name} us/step"] > 0, name
    for name in ("ppo", "ppo torchrl", "dqn", "dqn torchrl"):
        assert math.isfinite(result[f"{name} / plain"]) and result[f"{name} / plain"] > 0


# --- the prepared GPU check (benchmarks.gpu_check) --------------------------------------------

CHECK_LINES = ["ppo-vs-plain", "a2c-vs-plain", "collect-vs-ceiling", "dqn-512"]


def test_gpu_check_smoke_runs_every_step_and_gives_every_line(quick_run, tmp_path):
    """The GPU check's CPU smoke mode, on this suite's quick run: every line has its figure
    (PASS or FAIL says nothing on a CPU), and check.txt names the date, commit and host."""
    from benchmarks import gpu_check

    payload, _ = quick_run
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(payload))
    out = tmp_path / "check"
    lines = gpu_check.main(["--smoke", "--out", str(out), "--suite-json", str(suite)])
    names = [line.name for line in lines]
    assert names == [*CHECK_LINES, "acting-graph-8", "acting-ppo-8", "acting-a2c-8",
                     "acting-dqn-8", "pong-18"]  # fmt: skip
    missing = [line.text() for line in lines if line.status == "MISSING"]
    assert not missing, missing
    assert all(line.value > 0 for line in lines if line.name not in ("pong-18", "acting-graph-8"))
    # A CPU has no CUDA graphs: the line says why instead of stopping the check.
    graph = lines[names.index("acting-graph-8")]
    assert graph.status == "FAIL" and graph.detail
    text = (out / "check.txt").read_text()
    assert "accelrl commit" in text and "smoke run" in text and "device cpu" in text
    assert [row["name"] for row in json.loads((out / "check.json").read_text())["lines"]] == names


def test_gpu_check_judges_each_figure_against_its_target():
    from benchmarks.gpu_check import acting_lines, graph_line, pong_line, suite_lines

    def train(recipe, ratio):
        return {"section": "train", "what": f"train Pong: {recipe} (16 envs)", "rate": 1000.0,
                "frames_per_s": 4000.0, "reference": "plain", "ref_rate": 1000.0 / ratio,
                "ratio": ratio}  # fmt: skip

    ceiling = {
        "section": "collect",
        "what": "collect Pong: accelrl sync in-process 16",
        "reference": "sync ceiling",
        "rate": 80.0,
        "ref_rate": 100.0,
        "ratio": 0.8,
    }
    versus_torchrl = {**ceiling, "reference": "TorchRL ref Collector", "ratio": 2.0}
    rows = [train("ppo", 1.12), train("a2c", 1.05), versus_torchrl, ceiling]
    lines = {line.name: line for line in suite_lines({"rows": rows})}
    assert lines["ppo-vs-plain"].status == "PASS" and lines["a2c-vs-plain"].status == "FAIL"
    assert lines["collect-vs-ceiling"].value == 0.8  # the row against the ceiling, not TorchRL
    assert lines["collect-vs-ceiling"].status == "FAIL"
    assert lines["dqn-512"].status == "MISSING"
    result = {"num_envs": 64, "game": "Null/Atari", "ppo / plain": 1.2, "a2c / plain": 1.3,
              "ppo us/step": 1.2, "plain ppo us/step": 1.0, "a2c us/step": 1.3,
              "plain a2c us/step": 1.0}  # fmt: skip
    acting = {line.name: line.status for line in acting_lines({"results": [result]}, (64, 256))}
    assert acting == {"acting-ppo-64": "PASS", "acting-a2c-64": "FAIL",
                      "acting-dqn-64": "MISSING", "acting-ppo-256": "MISSING",
                      "acting-a2c-256": "MISSING", "acting-dqn-256": "MISSING"}  # fmt: skip
    assert graph_line("g", True, "a CUDA graph (eager 90 us, graph 30 us a step)").status == "PASS"
    assert graph_line("g", False, "eager (not faster as a CUDA graph: ...)").status == "INFO"
    assert graph_line("g", False, "eager (the graph's outputs differ ...)").status == "FAIL"
    assert graph_line("g", None, "RuntimeError: capture failed").status == "FAIL"
    reached = {"reached": True, "wall_s_from_launch": 200.0, "frames_at_target": 9_000_000}
    assert pong_line(reached, 128).status == "PASS"
    assert pong_line({"reached": False, "frames": 5_000_000}, 128).status == "FAIL"
    assert pong_line(None, 128).status == "MISSING"
