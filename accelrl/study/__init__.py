"""Studies: a grid of recipe runs (algorithm x setting x game x seed) run on this machine, or as
SLURM job arrays through ``python -m slurm.study`` (the same commands), and the report that
compares the settings.

    python -m accelrl.study run studies/minatar_batch.toml        # resumable; Ctrl-C stops
    python -m slurm.study run studies/minatar_batch.toml --print-array   # SLURM, printed
    python -m accelrl.study report runs/minatar_batch
    python -m accelrl.study pack runs/minatar_batch -o KEPT    # finished cells, small

The grid file format: ``accelrl.study.grid``; running: ``accelrl.study.runner`` (job arrays
elsewhere through its ``JobArrays``); the report: ``accelrl.study.report``; finished cells kept
small to carry or commit: ``accelrl.study.keep``.
"""
