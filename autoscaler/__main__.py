import sys

from autoscaler.cli.main import main

sys.exit(main())
