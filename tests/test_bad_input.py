"""Wrong inputs stop before anything starts: exit code 2, one line naming the problem, no
worker process. Each case runs the recipe's command line in this process (the same code path
as ``python recipes/X.py ...``, without paying the interpreter start-up per case)."""

import importlib

import pytest

from accelrl.cli import run_recipe
from tests.test_async import child_pids

CARTPOLE = [
    "--env.game", "CartPole-v1", "--env.num-envs", "4", "--collector.steps-per-batch", "64",
    "--log.eval-episodes", "0", "--log.no-tensorboard", "--log.no-progress",
]  # fmt: skip

CASES = [
    # (recipe, flags, words the one line must contain)
    ("ppo_atari", ["--env.game", "Pongg"], ["--env.game='Pongg'", "pong"]),
    ("dqn_atari", ["--env.game", "MinAtar/Pong"], ["--env.game='MinAtar/Pong'", "MinAtar/Asterix"]),
    ("ppo_atari", ["--env.num-envs", "0"], ["--env.num-envs=0", "> 0"]),
    ("ppo_atari", ["--env.num-envs", "-3"], ["--env.num-envs=-3"]),
    ("ppo_atari", ["--env.num-envs", "abc"], ["--env.num-envs", "abc"]),
    ("ppo_atari", ["--collector.steps-per-batch", "100"], ["steps-per-batch=100", "multiple"]),
    ("ppo_atari", ["--collector.num-workers", "-1"], ["--collector.num-workers=-1"]),
    ("ppo_atari", ["--total-frames", "0"], ["--total-frames=0"]),
    # No CUDA here: "not available"; on a GPU machine the same case names the devices there.
    ("ppo_atari", ["--device", "cuda:99"], ["--device='cuda:99'", "CUDA"]),
    ("ppo_atari", ["--device", "tpu"], ["--device='tpu'"]),
    ("ppo_atari", ["--ppo.lr", "-1"], ["--ppo.lr=-1"]),
    ("ppo_atari", ["--ppo.minibatches", "3"], ["--ppo.minibatches=3", "divide"]),
    ("ppo_atari", ["--ppo.gamma", "1.5"], ["--ppo.gamma=1.5", "[0, 1]"]),
    ("ppo_atari", ["--env.async-batch-size", "4"], ["--env.async-batch-size=4", "PPO"]),
    ("ppo_atari", ["--env.sticky-actions", "2"], ["--env.sticky-actions=2.0"]),
    ("ppo_atari", ["--dqn.prioritized"], ["Unrecognized options: --dqn.prioritized"]),
    ("ppo_atari", ["--collector.kind", "async"], ["--collector.num-workers=0", "async"]),
    ("ppo_atari", ["--collector.kind", "alternating", "--env.num-envs", "3",
                   "--collector.steps-per-batch", "96"], ["--env.num-envs=3", "even"]),
    ("ppo_atari", ["--collector.kind", "fast"], ["--collector.kind", "fast"]),
    ("ppo_atari", ["--dist.lr-scaling", "cubic"], ["--dist.lr-scaling", "sqrt"]),
    ("ppo_atari", ["--log.keep-checkpoints", "0"], ["--log.keep-checkpoints=0"]),
    ("ppo_atari", ["--log.video-every-frames", "-5"], ["--log.video-every-frames=-5"]),
    ("ppo_atari", ["--log.trackers", "neptune"], ["--log.trackers", "neptune"]),
    ("ppo_atari", ["--env.game", "CartPole-v1", "--log.video-every-frames", "512"],
     ["--log.video-every-frames=512", "CartPole-v1 (backend classic) has none"]),
    ("ppo_atari", ["--compile.cudagraphs", "on", "--device", "cpu"],
     ["--compile.cudagraphs", "GPU"]),
    ("ppo_atari", ["--compile.cudagraphs", "always"], ["--compile.cudagraphs", "always"]),
    ("ppo_atari", ["--compile.policy", "--collector.kind", "alternating"],
     ["--compile.policy", "alternating"]),
    ("a2c_atari", ["--a2c.lr", "0"], ["--a2c.lr=0"]),
    ("a2c_atari", ["--a2c.optimizer", "sgd"], ["--a2c.optimizer", "sgd"]),
    ("appo_atari", ["--appo.vtrace-rho-clip", "0"], ["--appo.vtrace-rho-clip=0"]),
    ("dqn_atari", ["--dqn.n-step", "0"], ["--dqn.n-step=0"]),
    ("dqn_atari", ["--dqn.batch-size", "0"], ["--dqn.batch-size=0"]),
    ("dqn_atari", ["--dqn.distributional", "--dqn.v-min", "10", "--dqn.v-max", "-10"],
     ["--dqn.v-min=10.0", "v_max"]),
    ("dqn_atari", ["--collector.kind", "async", "--collector.num-workers", "2"],
     ["--collector.kind='async'", "replay"]),
]  # fmt: skip

# The same classes of odd input on every recipe: a non-finite float, a seed outside what the
# generators take, a probability or factor out of range, a count below 1.
SECTION = {"ppo_atari": "ppo", "a2c_atari": "a2c", "appo_atari": "appo", "dqn_atari": "dqn"}
for _recipe, _s in SECTION.items():
    CASES += [
        (_recipe, [f"--{_s}.lr", "inf"], [f"--{_s}.lr=inf", "finite"]),
        (_recipe, [f"--{_s}.lr", "nan"], [f"--{_s}.lr=nan", "finite"]),
        (_recipe, [f"--{_s}.max-grad-norm", "-inf"], [f"--{_s}.max-grad-norm=-inf", "finite"]),
        (_recipe, ["--seed", "-1"], ["--seed=-1", "2**32 - 1"]),
        (_recipe, ["--seed", "4294967296"], ["--seed=4294967296", "2**32 - 1"]),
        (_recipe, [f"--{_s}.gamma", "1.01"], [f"--{_s}.gamma=1.01", "[0, 1]"]),
        (_recipe, ["--env.sticky-actions", "-0.1"], ["--env.sticky-actions=-0.1", "[0, 1]"]),
        (_recipe, ["--log.eval-episodes", "-1"], ["--log.eval-episodes=-1", ">= 0"]),
        (_recipe, ["--model.mlp-hidden", "0"], ["--model.mlp-hidden='0'", "> 0"]),
    ]


def run_cli(recipe: str, argv: list[str], capsys) -> tuple[int, str]:
    module = importlib.import_module(f"recipes.{recipe}")
    with pytest.raises(SystemExit) as exit_info:
        run_recipe(module.Config, module.train, description="", argv=argv)
    return exit_info.value.code, capsys.readouterr().err


def assert_one_clear_line(code: int, err: str, words: list[str]) -> None:
    assert code == 2
    # Progress lines of a run that got as far as reading its checkpoint are not errors.
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[accelrl]")]
    assert len(lines) == 1, err
    assert lines[0].startswith("accelrl: error: ")
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("recipe,flags,words", CASES, ids=[" ".join(c[1]) for c in CASES])
def test_wrong_input_stops_with_one_line(recipe, flags, words, capsys, monkeypatch):
    def no_run(self, cfg, algo, proc, *args, **kwargs):
        raise AssertionError(f"validation let {flags} through: a run started")

    monkeypatch.setattr("accelrl.run.folder.RunFolder.__init__", no_run)
    before = child_pids()
    code, err = run_cli(recipe, flags, capsys)
    # Nothing started: RunFolder.__init__ raises above, so no wall-clock bound is needed here.
    assert_one_clear_line(code, err, words)
    assert not child_pids() - before, "no worker may start"


def test_run_dir_that_is_a_file(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("x")
    code, err = run_cli("ppo_atari", [*CARTPOLE, "--run-dir", str(path)], capsys)
    assert_one_clear_line(code, err, ["--run-dir", "is a file"])


def test_resume_without_a_checkpoint(tmp_path, capsys):
    code, err = run_cli("ppo_atari", [*CARTPOLE, "--run-dir", str(tmp_path), "--resume"], capsys)
    assert_one_clear_line(code, err, ["--resume=True", "no checkpoint"])


def test_resume_with_another_algorithm_or_model_shape(tmp_path, capsys):
    run = str(tmp_path / "run")
    ppo = importlib.import_module("recipes.ppo_atari")
    run_recipe(ppo.Config, ppo.train, description="", argv=[*CARTPOLE, "--total-frames", "128",
                                                            "--run-dir", run])  # fmt: skip
    capsys.readouterr()
    code, err = run_cli("a2c_atari", [*CARTPOLE, "--run-dir", run, "--resume"], capsys)
    assert_one_clear_line(code, err, ["'ppo' run", "'a2c'"])
    smaller = [*CARTPOLE, "--run-dir", run, "--resume", "--model.mlp-hidden", "32"]
    code, err = run_cli("ppo_atari", smaller, capsys)
    assert_one_clear_line(code, err, ["--model.mlp-hidden [64, 64] -> [32]", "--allow-config"])
    code, err = run_cli("ppo_atari", [*smaller, "--allow-config-change"], capsys)
    assert_one_clear_line(code, err, ["does not fit this model"])
    code, err = run_cli("ppo_atari", [*CARTPOLE, "--run-dir", run], capsys)
    assert_one_clear_line(code, err, ["already holds checkpoints", "--resume"])
