import sys

from dlproc.cli import main

sys.exit(main())
