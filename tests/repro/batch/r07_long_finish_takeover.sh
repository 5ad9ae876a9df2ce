#!/bin/sh
# A batch's finish runs gate after gate; an attempt late in the batch waits for its turn with no heartbeat
# (before the fix the batch beat only during the write): `eo recover --stale-after 600` while day 3 is
# validated, an hour of gates after the write, takes day 4 over - alive - and the batch loses it.
# The scenario is the test itself (backdated signs of life = an hour passing; hooks at the exact points).
cd "$(dirname "$0")/../../.." && PYTHONPATH=$PWD/plugins:$PWD .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/integration/test_batch_adversarial.py -k long_finish
