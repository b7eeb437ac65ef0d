"""After training: what reads a run folder.

- ``python -m accelrl.tools.play RUN_DIR``: watch the trained agent (episodes, an MP4);
- ``python -m accelrl.tools.export RUN_DIR policy.onnx``: the greedy policy as ONNX or .pt2;
- ``python -m accelrl.tools.plot RUN_DIR...``: learning curves;
- ``python -m accelrl.tools.report RUNS... -o OUT``: scores of a suite of runs with intervals
  (``atari_scores``: human and random scores for normalisation).
"""
