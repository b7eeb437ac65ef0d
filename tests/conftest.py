import torch

# Tests share 2 cores with ALE's threads and collector workers: one torch thread avoids
# OpenMP barrier stalls (see accelrl.collect.plan_threads).
torch.set_num_threads(1)
