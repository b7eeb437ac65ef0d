"""Plain single-file PyTorch training loops: the references that the recipes are checked against.

Written the way a single-file implementation (CleanRL-style) would be: numpy arrays from the
simulators, torch tensors, ``nn.Module`` networks; no TensorDict, no TorchRL, no accelrl runtime
code. Each loop takes a recipe's own ``Config`` and reads its settings there, so one config
drives the recipe and its plain loop.

- ``reference.atari``: ale-py's ``AtariVectorEnv`` with DeepMind preprocessing, the Nature CNNs,
  checkpoints and the batch plan shared by the Atari loops; ``reference.atari_actor_critic``
  (``plain_ppo``, ``plain_a2c``) and ``reference.atari_dqn`` (``plain_dqn``) are the loops. The
  throughput reference of ``benchmarks.run`` and the oracle of the parity tests.
- ``reference.recurrent``: the recurrent actor-critics and their PPO and A2C loops (what
  ``plain_ppo`` and ``plain_a2c`` run for a recurrent config); ``reference.actor_critic_parts``:
  the batch and the objectives both actor-critic families share.
- ``reference.classic``: the CartPole-v1 loops (``plain_dqn``, ``plain_ppo``, ``plain_a2c``), the
  learning reference of ``benchmarks.learning_cartpole`` and the CartPole tests;
  ``reference.cartpole_presets`` holds their settings, once.
- ``reference.common``: what both families share (batch layout, TF-form RMSprop, the replay ring
  and its sum tree, C51's projection).

``python -m reference atari ppo --game Pong`` or ``python -m reference cartpole dqn --seed 0``
runs one loop alone.
"""
