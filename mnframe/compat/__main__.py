"""``python -m mnframe.compat ...``: see launcher.py."""

import sys

from mnframe.compat.launcher import main

sys.exit(main())
