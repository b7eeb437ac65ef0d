"""accelrl: fast deep RL experiments built from TorchRL parts (Stooke & Abbeel, 2018)."""

# Kept equal to pyproject.toml's [project] version; tests/test_install.py checks it. A literal,
# not importlib.metadata, so that a checkout on PYTHONPATH reports its own version.
__version__ = "0.1.0"
