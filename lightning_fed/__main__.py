"""``python -m lightning_fed``: the ``lightning-fed`` process (:func:`lightning_fed.startup.main`)."""

import sys

from lightning_fed.startup import main

sys.exit(main())
