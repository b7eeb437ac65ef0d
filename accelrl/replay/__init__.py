"""The replay memory of the DQN family.

- ``memory``: ``FrameReplay``, each frame stored once, stacks and n-step targets rebuilt when
  sampled, uniform or prioritized;
- ``storage``: the frame arrays (in RAM or memory-mapped on disk);
- ``sampler``: prioritized draws and priority writes over TorchRL's sum and min trees;
- ``feeder``: collection into the replay, synchronous (``SyncReplay``) or in a thread
  (``ReplayFeeder``).
"""
