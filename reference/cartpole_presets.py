"""The CartPole-v1 settings of the learning-parity runs and the CartPole learning tests, defined
once: RL-zoo's hyperparameters for each algorithm (``DQN_CARTPOLE`` and its ``DQN_VARIANTS``,
``PPO_CARTPOLE``, ``A2C_CARTPOLE``), ``use_cartpole``, which puts them with the simulators,
batch, MLP and budget into a recipe ``Config``, and ``cartpole_config``, the whole ``Config``
that a recipe and its plain loop (``reference.classic``) both run with in
``benchmarks.learning_cartpole``."""

from __future__ import annotations

from typing import Any

from accelrl.algos.a2c import A2CConfig
from accelrl.algos.catalog import algorithm
from accelrl.algos.dqn import DQNConfig
from accelrl.algos.ppo import APPOConfig, PPOConfig
from accelrl.algos.pqn import PQNConfig

ENV_ID = "CartPole-v1"
NUM_ENVS = 8

KINDS: dict[str, str] = {
    "ppo": "ppo",
    "a2c": "a2c",
    "dqn": "dqn",
    "double-dueling": "dqn",
    "double-dueling-nstep": "dqn",
    "nstep-prioritized": "dqn",
    "c51": "dqn",
    "rainbow": "dqn",
    "pqn": "pqn",
}
"""algo name -> kind: the registered algorithm (``accelrl.algos.catalog``) and the plain loop
``reference.classic.plain_<kind>`` (PQN's: ``reference.pqn.plain_pqn``)."""

DQN_CARTPOLE = dict(
    lr=2.3e-3, adam_eps=1e-8, max_grad_norm=10.0, gamma=0.99,
    batch_size=64, replay_capacity=100_000, learning_starts_frames=1000, training_intensity=32.0,
    target_update_interval=128,
    eps_start=1.0, eps_end=0.04, eps_decay_frames=8000,
    v_min=0.0, v_max=100.0,
)  # fmt: skip
"""RL-zoo's CartPole DQN (``DQNConfig`` fields; outside Atari a frame is an agent step): 8 envs,
256 transitions a batch, (256, 256) ReLU MLP, 128 updates of batch 64 per batch."""

C51 = dict(distributional=True, atoms=51, v_min=0.0, v_max=100.0)
DQN_VARIANTS: dict[str, dict] = {
    "dqn": {},
    "double-dueling": dict(double=True, dueling=True),
    # Double Q-learning with 1-step targets peaks below 200 here in both loops (plain loop, seed
    # 0, 100k steps: best last-100 134-185 with target copies every 32/128/512 updates, Polyak
    # 0.01, lr 1e-3, gamma 0.98); with 3-step returns and lr 1e-3 it reaches 374 at 50k.
    "double-dueling-nstep": dict(double=True, dueling=True, n_step=3, lr=1e-3),
    "nstep-prioritized": dict(n_step=3, prioritized=True),
    "c51": C51,
    "rainbow": {**C51, "double": True, "dueling": True, "n_step": 3, "prioritized": True},
}
"""The DQN variants run with the same settings and budget (50k transitions). At 100k the plain
double+dueling loop had fallen back to a last-100 mean of 49 (greedy 109) on seed 0: with this
learning rate DQN on CartPole peaks and then collapses."""

PPO_CARTPOLE = dict(
    lr=1e-3, clip_epsilon=0.2, epochs=20, minibatches=1,
    gamma=0.98, gae_lambda=0.8, entropy_coef=0.0, value_coef=0.5, max_grad_norm=0.5,
)  # fmt: skip
"""RL-zoo's CartPole PPO (``PPOConfig`` fields; APPO's tests use them too): 8 envs x 32 steps,
lr and clip range annealed to 0, clipped value loss."""

A2C_CARTPOLE = dict(
    optimizer="rmsprop", lr=4e-3, rms_alpha=0.99, eps=1e-5,
    gamma=0.99, gae_lambda=1.0, entropy_coef=0.0, value_coef=0.5, max_grad_norm=0.5,
)  # fmt: skip
"""RL-zoo's CartPole A2C (``A2CConfig`` fields): 8 envs x 5 steps, n-step returns, TF-form
RMSprop, lr annealed to 0."""


PQN_CARTPOLE = dict(
    lr=1e-3, anneal_lr=True, gamma=0.99, q_lambda=0.65, epochs=4, minibatches=4,
    max_grad_norm=10.0, eps_start=1.0, eps_end=0.05, eps_decay_fraction=0.5,
)  # fmt: skip
"""CleanRL's CartPole PQN (``pqn.py``: RAdam, lambda 0.65, 4 epochs x 4 minibatches, epsilon
1 -> 0.05 over half the budget, (120, 84) LayerNorm MLP) at 4x its learning rate, 8 envs x 32
steps and a fifth of its 500k steps, so that a run fits the learning tests' minute."""


def use_cartpole(cfg: Any, algo: str) -> Any:
    """``cfg`` (the ``Config`` of ``recipes/<kind>_atari.py`` for ``algo``; APPO's for
    ``"appo"``) set to CartPole-v1 with ``algo``'s settings: simulators, batch, MLP, the
    algorithm's section and the step budget. Other fields keep their values."""
    kind = KINDS.get(algo, algo)
    cfg.env.game = ENV_ID
    cfg.env.num_envs = NUM_ENVS
    if kind == "dqn":
        cfg.collector.steps_per_batch = 256
        cfg.model.mlp_hidden = (256, 256)
        cfg.dqn = DQNConfig(**{**DQN_CARTPOLE, **DQN_VARIANTS[algo]})
        cfg.total_frames = 50_000
    elif kind in ("ppo", "appo"):
        cfg.collector.steps_per_batch = 8 * 32
        cfg.model.mlp_hidden = (64, 64)
        if kind == "ppo":
            cfg.ppo = PPOConfig(**PPO_CARTPOLE)
        else:
            cfg.appo = APPOConfig(**PPO_CARTPOLE)
        cfg.total_frames = 150_000
    elif kind == "a2c":
        cfg.collector.steps_per_batch = 8 * 5
        cfg.model.mlp_hidden = (64, 64)
        cfg.a2c = A2CConfig(**A2C_CARTPOLE)
        cfg.total_frames = 150_000
    elif kind == "pqn":
        cfg.collector.steps_per_batch = 8 * 32
        cfg.model.mlp_hidden = (120, 84)
        cfg.pqn = PQNConfig(**PQN_CARTPOLE)
        cfg.total_frames = 100_000
    else:
        raise ValueError(f"no CartPole settings for {algo!r}")
    return cfg


def cartpole_config(
    algo: str,
    seed: int = 0,
    *,
    quick: bool = False,
    eval_episodes: int = 10,
    run_dir: str | None = None,
    threads: int = 1,
) -> Any:
    """The recipe's ``Config`` for ``algo`` on CartPole: the one source of the settings that the
    recipe and the plain loop both run with in the parity table (a tenth of the budget with
    ``quick``), on the CPU with ``threads`` torch threads, no progress line, no TensorBoard and
    only the final checkpoint. Fields not set here keep the recipe's defaults."""
    cfg = use_cartpole(algorithm(KINDS[algo]).config(), algo)
    if quick:
        cfg.total_frames //= 10
    cfg.seed = seed
    cfg.run_dir = run_dir
    cfg.device = "cpu"
    cfg.threads.torch_threads = threads
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = eval_episodes
    cfg.log.checkpoint_every_frames = 10 * cfg.total_frames  # only the final one
    return cfg
