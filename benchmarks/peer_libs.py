"""The libraries ``benchmarks.peers`` runs next to the recipe: Stable-Baselines3 (through RL
Baselines3 Zoo, its training script), CleanRL's ``ppo_atari_envpool.py`` and Sample Factory.

Each runs from a venv of its own under a cache folder (``setup``: pinned versions; nothing of
theirs is kept in this repository), as shipped, through a small script in ``peer_wrappers/``
that notes ``time.perf_counter()`` at the end of every update and of every game on stderr
(``MARK`` and ``EPISODE`` lines; agent steps, not frames). ``speed_args`` are the overrides that
give a peer the recipe's work per batch; ``default_args`` set only the game, the seed, the
frames and the device, for ``benchmarks.time_to_score --peer``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peer_wrappers.marks import EPISODE as EPISODE  # re-exported for the tests
from benchmarks.peer_wrappers.marks import MARK

FRAMESKIP = 4  # every peer's Atari setting, and the recipe's default
DEFAULT_CACHE = Path.home() / ".cache" / "accelrl-peers"
WRAPPERS = Path(__file__).parent / "peer_wrappers"
CLEANRL_SCRIPT = "ppo_atari_envpool.py"
# CleanRL's scripts the cleanrl peer runs, by algorithm (time_to_score --peer cleanrl --algo):
# PPO's, and PQN's when setup found it next to PPO's (a checkout has both).
CLEANRL_SCRIPTS = {"ppo": CLEANRL_SCRIPT, "pqn": "pqn_atari_envpool.py"}
# The CPU build where pip finds one (a local wheel folder, or PyTorch's CPU index passed with
# --pip-arg); 2.13.0 is the newest CPU wheel this project's machines keep.
TORCH = "torch==2.13.0"


class PeerError(Exception):
    """A one-line message naming the bad value and the fix."""


@dataclass(frozen=True)
class Peer:
    name: str
    title: str
    packages: tuple[str, ...]
    wrapper: str
    imports: tuple[str, ...]
    """Modules that must import in the venv after the install."""

    def check(self) -> str:
        """Python for the venv: imports ``imports``, prints the installed packages' versions."""
        names = ["torch", *(p.split("==")[0] for p in self.packages)]
        return (
            f"import importlib, importlib.metadata as m\n"
            f"for name in {list(self.imports)!r}: importlib.import_module(name)\n"
            f"print(' '.join(f'{{d}} {{m.version(d)}}' for d in {names!r}))"
        )


PEERS = {
    "sb3": Peer(
        "sb3",
        "Stable-Baselines3 2.9.2 (RL Baselines3 Zoo's train.py, its Atari PPO settings)",
        (
            "stable-baselines3==2.9.2",
            "rl-zoo3==2.9.2",
            "gymnasium==1.4.0",
            "ale-py==0.12.1",
            "opencv-python-headless==5.1.0.95",
        ),
        "sb3_zoo.py",
        ("stable_baselines3", "rl_zoo3", "ale_py", "cv2", "torch"),
    ),
    "cleanrl": Peer(
        "cleanrl",
        "CleanRL ppo_atari_envpool.py (envpool 0.8.4)",
        (
            "envpool==0.8.4",
            "gym==0.23.1",
            "numpy==1.26.4",
            "tyro==1.0.17",
            "tensorboard==2.21.0",
        ),
        "cleanrl_script.py",
        ("envpool", "gym", "tyro", "torch.utils.tensorboard"),
    ),
    "sf": Peer(
        "sf",
        "Sample Factory 2.1.1 (sf_examples.atari.train_atari)",
        (
            "sample-factory==2.1.1",
            "gymnasium==0.29.1",
            "ale-py==0.9.1",
            "numpy==1.26.4",
            "opencv-python==4.11.0.86",
        ),
        "sample_factory_atari.py",
        ("sample_factory", "sf_examples.atari.train_atari", "ale_py", "cv2", "torch"),
    ),
}


def peer(name: str) -> Peer:
    if name not in PEERS:
        raise PeerError(f"peer {name!r}: choose one of {', '.join(PEERS)}")
    return PEERS[name]


def setup_command(name: str, cache: Path) -> str:
    extra = " --cleanrl-script PATH" if name == "cleanrl" else ""
    return f"python -m benchmarks.peers setup {name} --cache {cache}{extra}"


def venv_python(name: str, cache: Path) -> Path:
    """The peer's Python; a ``PeerError`` naming the setup command when it is not there."""
    python = cache / name / "venv" / "bin" / "python"
    if not python.exists():
        raise PeerError(f"no {name} venv in {cache}: run `{setup_command(name, cache)}` first")
    if name == "cleanrl" and not (cache / name / CLEANRL_SCRIPT).is_file():
        raise PeerError(
            f"no {CLEANRL_SCRIPT} in {cache / name}: run `{setup_command(name, cache)}` first"
        )
    return python


def installed(name: str, cache: Path) -> dict:
    """What ``setup`` recorded for the peer (versions, the CleanRL script's source and hash)."""
    path = cache / name / "peer.json"
    return json.loads(path.read_text()) if path.exists() else {}


def cleanrl_source(path: Path) -> Path:
    """``ppo_atari_envpool.py`` itself, or the one in a CleanRL checkout's ``cleanrl/``."""
    for candidate in (path, path / "cleanrl" / CLEANRL_SCRIPT, path / CLEANRL_SCRIPT):
        if candidate.is_file() and candidate.name == CLEANRL_SCRIPT:
            return candidate
    raise PeerError(
        f"--cleanrl-script {path}: no {CLEANRL_SCRIPT} there; pass the file or a checkout "
        "of github.com/vwxyzjn/cleanrl"
    )


def setup(
    name: str,
    cache: Path,
    *,
    python: str = sys.executable,
    torch: str = TORCH,
    pip_args: tuple[str, ...] = (),
    cleanrl_script: Path | None = None,
) -> dict:
    """Make ``cache/name/venv`` with the peer's pinned packages (and copy CleanRL's script into
    ``cache/cleanrl``); returns what it records in ``cache/name/peer.json``."""
    spec = peer(name)
    source = None
    if name == "cleanrl":
        if cleanrl_script is None:
            raise PeerError(
                "setup cleanrl needs --cleanrl-script PATH: CleanRL's ppo_atari_envpool.py or a "
                "checkout of github.com/vwxyzjn/cleanrl (its PyPI release needs Python < 3.11)"
            )
        source = cleanrl_source(cleanrl_script)
    home = cache / name
    home.mkdir(parents=True, exist_ok=True)
    venv = home / "venv"
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *pip_args]
    if subprocess.run([*pip, torch, *spec.packages]).returncode:
        raise PeerError(
            f"{name}: pip could not install {' '.join([torch, *spec.packages])} (its output is "
            "above); --torch and --pip-arg choose another torch build or index"
        )
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c", spec.check()], capture_output=True, text=True
    )
    if check.returncode:
        raise PeerError(f"{name}: the installed packages do not import: {check.stderr.strip()}")
    record = {
        "peer": name,
        "title": spec.title,
        "packages": [torch, *spec.packages],
        "versions": check.stdout.strip(),
    }
    if source is not None:
        shutil.copyfile(source, home / CLEANRL_SCRIPT)
        record["script_source"] = str(source.resolve())
        record["script_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
        pqn = source.parent / CLEANRL_SCRIPTS["pqn"]
        if pqn.is_file():  # as shipped next to PPO's: --peer cleanrl --algo pqn
            shutil.copyfile(pqn, home / pqn.name)
            record["pqn_script_source"] = str(pqn.resolve())
            record["pqn_script_sha256"] = hashlib.sha256(pqn.read_bytes()).hexdigest()
    (home / "peer.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def command(name: str, cache: Path, args: list[str], algo: str = "ppo") -> list[str]:
    """The peer's wrapped command line: its venv's Python, the marking wrapper, ``args``;
    ``algo``: which of CleanRL's scripts (``CLEANRL_SCRIPTS``; the other peers run PPO)."""
    scripts = CLEANRL_SCRIPTS if name == "cleanrl" else {"ppo": None}
    if algo not in scripts:
        raise PeerError(f"--algo {algo} with --peer {name}: it runs {', '.join(scripts)} here")
    python = venv_python(name, cache)
    script = []
    if name == "cleanrl":
        path = cache / name / CLEANRL_SCRIPTS[algo]
        if not path.is_file():
            raise PeerError(
                f"no {path.name} in {path.parent}: run `{setup_command(name, cache)}` with a "
                "checkout of github.com/vwxyzjn/cleanrl, which has it next to PPO's"
            )
        script = [str(path)]
    return [str(python), str(WRAPPERS / peer(name).wrapper), *script, *args]


@dataclass(frozen=True)
class Work:
    """The recipe's work per batch, which ``speed_args`` give every peer."""

    num_envs: int
    steps_per_env: int
    epochs: int
    minibatches: int

    @property
    def batch_steps(self) -> int:
        return self.num_envs * self.steps_per_env

    @property
    def minibatch_steps(self) -> int:
        return self.batch_steps // self.minibatches


def recipe_work() -> Work:
    """``recipes/ppo_atari.py``'s default batch: 8 simulators x 128 steps, 4 epochs x 4."""
    from recipes.ppo_atari import Config

    cfg = Config()
    if cfg.env.frameskip != FRAMESKIP:
        raise ValueError(
            f"the peers run at frameskip {FRAMESKIP}; the recipe has {cfg.env.frameskip}"
        )
    envs = cfg.env.num_envs
    return Work(envs, cfg.collector.steps_per_batch // envs, cfg.ppo.epochs, cfg.ppo.minibatches)


def sf_layout(workers: int, num_envs: int) -> tuple[int, int]:
    """(rollout worker processes, simulators each) for ``num_envs`` simulators in all."""
    if workers < 1 or num_envs % workers:
        raise PeerError(
            f"--sf-workers {workers}: must divide the recipe's {num_envs} simulators "
            f"(one of {', '.join(str(d) for d in range(1, num_envs + 1) if num_envs % d == 0)})"
        )
    return workers, num_envs // workers


def default_sf_workers(cores: int, num_envs: int) -> int:
    """The most rollout worker processes that divide ``num_envs`` and fit in ``cores``."""
    return max(d for d in range(1, num_envs + 1) if num_envs % d == 0 and d <= max(cores, 1))


def speed_args(
    name: str,
    game: str,
    batches: int,
    work: Work,
    tmp: str,
    *,
    seed: int = 1,
    device: str = "cpu",
    sf_workers: int = 2,
) -> list[str]:
    """Overrides that give the peer the recipe's work per batch for ``batches`` batches (most
    repeat the peer's own Atari default, which already matches the recipe's)."""
    steps = batches * work.batch_steps
    cuda = device.startswith("cuda")
    if name == "sb3":
        params = [
            f"n_envs:{work.num_envs}",
            f"n_steps:{work.steps_per_env}",
            f"batch_size:{work.minibatch_steps}",
            f"n_epochs:{work.epochs}",
        ]
        # DummyVecEnv, the zoo's default: every simulator in the learner process
        return [
            *zoo_args(game, steps, seed, device, tmp),
            "--vec-env=dummy",
            "--hyperparams",
            *params,
        ]
    if name == "cleanrl":
        return [
            *cleanrl_args(game, steps, seed, cuda),
            f"--num-envs={work.num_envs}",
            f"--num-steps={work.steps_per_env}",
            f"--num-minibatches={work.minibatches}",
            f"--update-epochs={work.epochs}",
        ]
    if name == "sf":
        workers, per_worker = sf_layout(sf_workers, work.num_envs)
        # Sample Factory stops once its learner's count passes train_for_env_steps, counted in
        # frames (summaries_use_frameskip, its Atari default) and read one report late: this
        # runs at least ``batches`` iterations, and the benchmark times the first ``batches``.
        frames = (batches - 1) * work.batch_steps * FRAMESKIP
        return [
            *sf_args(game, frames, seed, cuda, tmp),
            f"--num_workers={workers}",
            f"--num_envs_per_worker={per_worker}",
            f"--rollout={work.steps_per_env}",
            f"--batch_size={work.minibatch_steps}",
            f"--num_batches_per_epoch={work.minibatches}",
            f"--num_epochs={work.epochs}",
        ]
    raise PeerError(f"peer {name!r}: choose one of {', '.join(PEERS)}")


def default_args(
    name: str, game: str, frames: int, tmp: str, *, seed: int, device: str
) -> list[str]:
    """The peer's own default PPO settings for Atari; only the game, seed, length (``frames``
    emulator frames) and device are set, and the zoo's periodic evaluation is off."""
    cuda = device.startswith("cuda")
    if name == "sb3":
        return zoo_args(game, frames // FRAMESKIP, seed, device, tmp)
    if name == "cleanrl":
        return cleanrl_args(game, frames // FRAMESKIP, seed, cuda)
    if name == "sf":
        return sf_args(game, frames, seed, cuda, tmp)
    raise PeerError(f"peer {name!r}: choose one of {', '.join(PEERS)}")


def zoo_args(game: str, steps: int, seed: int, device: str, tmp: str) -> list[str]:
    return [
        "--algo=ppo",
        f"--env={game}NoFrameskip-v4",
        f"--n-timesteps={steps}",
        f"--seed={seed}",
        f"--device={device}",
        "--eval-freq=-1",
        f"--log-folder={tmp}/zoo",
    ]


def cleanrl_args(game: str, steps: int, seed: int, cuda: bool) -> list[str]:
    return [
        f"--env-id={game}-v5",
        f"--total-timesteps={steps}",
        f"--seed={seed}",
        "--cuda" if cuda else "--no-cuda",
    ]


def sf_args(game: str, frames: int, seed: int, cuda: bool, tmp: str) -> list[str]:
    return [
        f"--env=atari_{game.lower()}",
        "--experiment=peers",
        f"--train_dir={tmp}/sf",
        f"--seed={seed}",
        f"--device={'gpu' if cuda else 'cpu'}",
        f"--train_for_env_steps={frames}",
    ]


def read_marks(stderr: str, kind: str = MARK) -> list[tuple[float, ...]]:
    """The wrapper's ``kind`` lines as numbers: MARK (agent steps, perf_counter) and EPISODE
    (agent steps, game score, perf_counter). A mark may follow other text on the same line
    (tqdm redraws with a carriage return and no newline)."""
    width = 2 if kind == MARK else 3
    marks = []
    for line in stderr.splitlines():
        if kind in line:
            fields = line[line.index(kind) + len(kind) :].split()[:width]
            try:
                mark = tuple(float(f) for f in fields)
            except ValueError:
                continue  # not a whole mark (the wrappers write each in one piece)
            if len(mark) == width:
                marks.append(mark)
    return marks


def steady_rate(
    marks: list[tuple[float, ...]], warmup: int, frames_per_step: int = FRAMESKIP
) -> float:
    """Frames/s between the ``warmup``-th mark (1-based: the end of batch ``warmup``) and the
    last one; marks are (agent steps so far, perf_counter seconds)."""
    if not 1 <= warmup < len(marks):
        raise ValueError(f"{len(marks)} progress marks: need 1 <= warmup ({warmup}) < marks")
    (n0, t0), (n1, t1) = marks[warmup - 1][:2], marks[-1][:2]
    return (n1 - n0) * frames_per_step / (t1 - t0)


def run_for_marks(name: str, cmd: list[str], cwd: str, batches: int) -> list[tuple[float, ...]]:
    """Run a wrapped peer to its end; its first ``batches`` marks. A ``RuntimeError`` with the
    tail of its stderr when it fails or marks fewer batches."""
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    marks = read_marks(out.stderr)
    if out.returncode or len(marks) < batches:
        tail = "\n".join(out.stderr.strip().splitlines()[-15:])
        why = f"exit {out.returncode}" if out.returncode else f"{len(marks)} of {batches} batches"
        raise RuntimeError(f"{name} failed ({why}): {' '.join(cmd)}\n{tail}")
    return marks[:batches]
