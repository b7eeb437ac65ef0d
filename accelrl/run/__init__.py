"""A run's lifecycle: its folder and everything written to it.

- ``folder``: ``RunFolder``, the ``with`` block a loop trains in (lock, record, restore,
  episodes, logs, schedule, checkpoints, stop signals, the summary);
- ``opening``: the start of a run in its folder (lock, ``--resume`` / ``--run-dir`` checks,
  ``config.json``); ``record``: ``config.json`` and the changes a ``--resume`` brings;
  ``lock``: one writer per folder;
- ``checkpoint``: atomic writes, safe loads;
- ``progress``: frame and update counters, schedules; ``console``: the progress bar;
- ``logger``: the CSV files, TensorBoard and trackers a run logs to (``sinks``, ``trackers``);
- ``evaluate``: evaluation episodes and videos.
"""
