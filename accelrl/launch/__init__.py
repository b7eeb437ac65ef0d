"""Recipe runs named by module: their flags parsed and validated into configs, one run folder
each (``accelrl.launch.plan``), and the job that a submitit executor runs for each, here or on
a cluster (``accelrl.launch.job``). The study (``accelrl.study``) and the SLURM launcher
(``slurm.launch``) both build on them; neither is imported here.
"""
