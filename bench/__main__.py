"""``python -m bench [--quick] [--sizes ...] [--only ...]`` - see :mod:`bench.run`."""
from bench.run import main

raise SystemExit(main())
