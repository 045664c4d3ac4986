"""The long fuzz run by hand (issue 19): tests/test_hostile_fuzz.py with many examples per target, in a child
process under an address-space rlimit, so a memory blow-up fails the run instead of the machine.

    PYTHONPATH=$PWD python tests/fuzz_long_run.py [EXAMPLES=20000] [LIMIT_GIB=8]

Prints pytest's summary and the outcome counts per target ("ok" = answered, "refused" = one-line error).
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def main(examples: int = 20000, limit_gib: float = 8.0) -> int:
    stats = Path(tempfile.mkdtemp(prefix="kvsim-fuzz-stats-")) / "stats.json"
    env = {**os.environ, "KVSIM_FUZZ_EXAMPLES": str(examples), "KVSIM_FUZZ_STATS": str(stats)}
    limit = int(limit_gib * 2**30)

    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    test = Path(__file__).with_name("test_hostile_fuzz.py")
    proc = subprocess.run([sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider",
                           "--hypothesis-show-statistics"], env=env, preexec_fn=cap_memory)
    if stats.exists():
        print(json.dumps(json.loads(stats.read_text()), indent=1))
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main(*(float(a) if "." in a else int(a) for a in sys.argv[1:])))
