"""``python -m lightning_fed``: the ``lightning-fed`` process (:func:`lightning_fed.process.main`)."""

import sys

from lightning_fed.process import main

sys.exit(main())
