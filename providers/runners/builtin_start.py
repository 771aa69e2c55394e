"""Starts the builtin worker: `python -I -S builtin_start.py` (see BuiltinRunner.build).

Python compiles the script it is given from source on every start (~5 ms for builtin_worker.py)
but imports modules from their cached byte code: so this script stays tiny and imports the worker.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's dir off
    from builtin_worker import main

    sys.exit(main())
