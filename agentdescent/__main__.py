"""`python -m agentdescent` is the `agentdescent` command."""

import sys

from agentdescent.cli import main

sys.exit(main())
