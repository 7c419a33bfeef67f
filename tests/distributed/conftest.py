"""Multi-process tests: each test starts its ranks as separate processes (see
launch.py), so nothing here may touch the device of the pytest process."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
