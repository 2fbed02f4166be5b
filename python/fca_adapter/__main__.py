"""python3 -m fca_adapter modules --build FILE.py:FUNCTION (discover.py)."""
import sys

from .discover import main

sys.exit(main())
