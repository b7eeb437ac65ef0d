"""Collectors: the thread budget (``threads``), the factory that builds the collector a run's
``CollectorConfig.kind`` names (``factory``), the watchdog around it (``watchdog``), accelrl's
own collectors beyond TorchRL's (``alternating``, ``batched``), TorchRL's in-process collector
with a lean rollout (``lean``), its acting network as a CUDA graph (``graphs``) and the
policy-lag rule of asynchronous collection (``policy_lag``).

Every collector yields batches laid out like TorchRL's ``Collector`` (``[simulators, T]``, time
last, each row one simulator through time) and answers ``update_policy_weights_()`` and
``shutdown()``, so recipes do not care which one runs.
"""

from accelrl.collectors.alternating import AlternatingCollector
from accelrl.collectors.batched import BatchedInferenceCollector, single_simulator
from accelrl.collectors.factory import env_factory, make_collector, run_collector
from accelrl.collectors.lean import LeanCollector
from accelrl.collectors.policy_lag import VERSION_KEY, PolicyLag, VersionStamp, policy_lag
from accelrl.collectors.threads import ThreadPlan, UpdateThreads, core_shortfall, plan_threads
from accelrl.collectors.watchdog import CollectorFailure, WatchedCollector

__all__ = [
    "VERSION_KEY",
    "AlternatingCollector",
    "BatchedInferenceCollector",
    "CollectorFailure",
    "LeanCollector",
    "PolicyLag",
    "ThreadPlan",
    "UpdateThreads",
    "VersionStamp",
    "WatchedCollector",
    "core_shortfall",
    "env_factory",
    "make_collector",
    "plan_threads",
    "policy_lag",
    "run_collector",
    "single_simulator",
]
