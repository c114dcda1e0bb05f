from autoscaler.cli import main
import sys

sys.exit(main())
