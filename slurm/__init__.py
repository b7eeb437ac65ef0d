"""Run accelrl recipes on SLURM through submitit.

- ``slurm.launch``: ``python -m slurm.launch recipes.ppo_atari --nodes 2 --gpus-per-node 8 --
  <recipe flags>`` submits one job (or a job array for ``--sweep``) whose tasks call the recipe's
  ``train(cfg)``; a job that reaches its time limit or is preempted is requeued and resumes from
  its run folder's latest checkpoint. ``--dry-run`` prints the sbatch script, ``--local`` runs the
  same job on this machine.
- ``slurm.plan``: recipe flags and ``--sweep`` values to validated configs, one run folder each.
- ``slurm.job``: ``RecipeJob``, what every task of a job runs.
- ``slurm/testing/local_cluster.sh``: a real SLURM cluster on one machine (two fake nodes) for
  the ``slurm``-marked tests.
"""
