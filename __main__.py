import sys

from pilothouse.core.cli import main

sys.exit(main())
