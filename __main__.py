import sys

from pilothouse.providers.hostpython import drop_cwd_from_path

drop_cwd_from_path()  # before the CLI's lazy imports (yaml, sqlite3 …) can find a worker's module

from pilothouse.core.cli import main  # noqa: E402

sys.exit(main())
