"""Run accelrl recipes on SLURM through submitit.

- ``slurm.launch``: ``python -m slurm.launch recipes.ppo_atari --nodes 2 --gpus-per-node 8 --
  <recipe flags>`` submits one job (or a job array for ``--sweep``) whose tasks call the recipe's
  ``train(cfg)``; a job that reaches its time limit or is preempted is requeued and resumes from
  its run folder's latest checkpoint. ``--dry-run`` prints the sbatch script, ``--local`` runs the
  same job on this machine.
- ``slurm.study``: ``python -m slurm.study run GRID --slurm`` runs a study's cells
  (``accelrl.study``) as SLURM job arrays, ``--print-array`` prints them.
- ``slurm/testing/local_cluster.sh``: a real SLURM cluster on one machine (two fake nodes) for
  the ``slurm``-marked tests.

Recipe flags and ``--sweep`` values become validated configs in ``accelrl.launch.plan``; what
every task of a job runs is ``accelrl.launch.job.RecipeJob``. accelrl never imports this package.
"""
